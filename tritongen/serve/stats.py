"""Read Triton's statistics API: batch sizes, queue and compute time per step, cache hits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["StepStats", "model_stats", "stats_delta"]


@dataclass(frozen=True)
class StepStats:
    """Cumulative counters of one model (the statistics extension's fields, flattened)."""

    name: str
    inference_count: int
    execution_count: int
    success_count: int
    success_ns: int  # request arrival to response, summed: for an ensemble, its whole time in the server
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    cache_hit_count: int
    cache_miss_count: int

    @property
    def average_batch_size(self) -> float:
        """Inferences per execution: above 1 means the dynamic batcher batched."""
        return self.inference_count / self.execution_count if self.execution_count else 0.0

    def per_request_ms(self, field: str) -> float:
        """Average of a ``*_ns`` counter per successful request, in milliseconds."""
        return getattr(self, field) / self.success_count / 1e6 if self.success_count else 0.0


def _parse(entry: dict[str, Any]) -> StepStats:
    inference = entry.get("inference_stats", {})

    def count(key: str) -> int:
        return int(inference.get(key, {}).get("count", 0))

    def ns(key: str) -> int:
        return int(inference.get(key, {}).get("ns", 0))

    return StepStats(
        name=entry["name"],
        inference_count=int(entry.get("inference_count", 0)),
        execution_count=int(entry.get("execution_count", 0)),
        success_count=count("success"),
        success_ns=ns("success"),
        queue_ns=ns("queue"),
        compute_input_ns=ns("compute_input"),
        compute_infer_ns=ns("compute_infer"),
        compute_output_ns=ns("compute_output"),
        cache_hit_count=count("cache_hit"),
        cache_miss_count=count("cache_miss"),
    )


def model_stats(http_url: str, name: str = "") -> dict[str, StepStats]:
    """Statistics of ``name`` (or of every model) from the server at ``http_url``, by model name."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    try:
        raw = client.get_inference_statistics(model_name=name)
    finally:
        client.close()
    stats: dict[str, StepStats] = {}
    for entry in raw.get("model_stats", []):
        parsed = _parse(entry)
        # Several versions may be listed; keep the one that served traffic.
        if parsed.name not in stats or parsed.inference_count > stats[parsed.name].inference_count:
            stats[parsed.name] = parsed
    return stats


def stats_delta(after: StepStats, before: StepStats | None) -> StepStats:
    """Counters accumulated between two snapshots of the same model."""
    if before is None:
        return after
    fields = {k: getattr(after, k) - getattr(before, k) for k in after.__dataclass_fields__ if k != "name"}
    return StepStats(name=after.name, **fields)
