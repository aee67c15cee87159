"""The gateway's Prometheus metrics at ``GET /metrics``: Text Embeddings Inference's names, by model and route.

Where a figure means what TEI's does, it has TEI 1.9's name (``router/src/http/server.rs``, ``core/src/infer.rs``,
``core/src/queue.rs``) and TEI's buckets (``router/src/prometheus.rs``), with ``model`` and ``route`` labels added,
since one gateway serves several ensembles:

- ``te_request_count``, ``te_request_success`` (``method``: ``single`` or ``batch``) and ``te_request_failure``
  (``err``: TEI's ``validation``, ``batch_size``, ``overloaded``, ``model_type``, ``backend``, ``unhealthy``);
- ``te_request_duration``: the whole request, seconds; ``te_request_queue_duration``: waiting in the gateway for a
  Triton call to join; ``te_request_inference_duration``: Triton's time, the request's call from sent to answered;
- ``te_request_input_length``: the tokens the model read of each input (the ensemble's ``TOKEN_COUNT``);
- ``te_queue_size``: requests waiting for a Triton call; ``te_batch_next_size``: the rows of each call.

TEI's ``te_request_tokenization_duration`` is the gateway's own encoding of a call, where it runs an embedder's
Python steps itself (:mod:`tritongen.gateway.direct`); through an ensemble the tokenisation is inside Triton, part of
the inference duration (Triton's own ``nv_inference_*`` metrics break it down by step). Ours, without a TEI
counterpart: ``tritongen_gateway_coalesced_requests``, the client requests each Triton call answered, and
``tritongen_gateway_model_step_calls``, the calls that went to the model step alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE", "FAILURES", "GatewayMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST


def _geometric(start: float, factor: float, count: int) -> list[float]:
    values, value = [], start
    for _ in range(count):
        value *= factor
        values.append(value)
    return values


_DURATION_BUCKETS = _geometric(0.00001, 1.5, 35)  # TEI's: 15 us to about 20 minutes
_LENGTH_BUCKETS = [2.0**i for i in range(20)]  # TEI's input lengths (it cuts them at the model's maximum)
_BATCH_BUCKETS = [2.0**i for i in range(13)]  # TEI's batch sizes
# TEI's `err` label by the error the gateway raised (its `code`, else its HTTP status).
FAILURES = {
    "batch_too_large": "batch_size",
    "overloaded": "overloaded",
    "unsupported_model": "model_type",
    "model_not_found": "validation",
    "unavailable": "unhealthy",
}


class GatewayMetrics:
    """One gateway's metrics in a registry of its own; :meth:`render` is the scrape.

    On the event loop, a request's figures are recorded just after its task yields, which is after its answer was
    written: they cost the node the same CPU, but not the client its latency. :meth:`render` records whatever is
    still pending first.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        route = ("model", "route")
        self.count = Counter("te_request_count", "Requests received", [*route, "method"], registry=self.registry)
        self.success = Counter("te_request_success", "Requests answered", [*route, "method"], registry=self.registry)
        self.failure = Counter("te_request_failure", "Requests failed", [*route, "err"], registry=self.registry)
        self.duration = Histogram(
            "te_request_duration", "Request duration (s)", route, buckets=_DURATION_BUCKETS, registry=self.registry
        )
        self.queue_duration = Histogram(
            "te_request_queue_duration", "Wait for a Triton call (s)", ["model"], buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.inference_duration = Histogram(
            "te_request_inference_duration", "Triton's time (s)", ["model"], buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.input_length = Histogram(
            "te_request_input_length", "Tokens per input", ["model"], buckets=_LENGTH_BUCKETS, registry=self.registry
        )
        self.queue_size = Gauge("te_queue_size", "Requests waiting for a call", ["model"], registry=self.registry)
        self.batch_size = Histogram(
            "te_batch_next_size", "Rows per Triton call", ["model"], buckets=_BATCH_BUCKETS, registry=self.registry
        )
        self.coalesced = Histogram(
            "tritongen_gateway_coalesced_requests", "Client requests per Triton call", ["model"],
            buckets=_BATCH_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.tokenization = Histogram(
            "te_request_tokenization_duration", "The gateway's encoding of a call (s)", ["model"],
            buckets=_DURATION_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.step_calls = Counter(
            "tritongen_gateway_model_step_calls", "Triton calls sent to the model step alone, its Python steps' work "
            "done in the gateway", ["model"], registry=self.registry,
        )  # fmt: skip
        self._children: dict[tuple[object, ...], Any] = {}
        self._pending: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def _later(self, record: Callable[..., None], *args: Any) -> None:
        """``record(*args)`` once the running task yields (at once, off the event loop)."""
        self._pending.append((record, args))
        if len(self._pending) > 1:
            return  # a flush is already scheduled
        try:
            asyncio.get_running_loop().call_soon(self.flush)
        except RuntimeError:
            self.flush()

    def flush(self) -> None:
        """Record the figures still pending."""
        pending, self._pending = self._pending, []
        for record, args in pending:
            record(*args)

    def _of(self, metric: Any, *labels: str) -> Any:
        """``metric`` for ``labels``, looked up once (prometheus_client's own lookup takes a lock every time)."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def answered(self, model: str, route: str, rows: int, seconds: float) -> None:
        """A request of ``rows`` inputs answered in ``seconds``."""
        self._later(self._answered, model, route, rows, seconds)

    def _answered(self, model: str, route: str, rows: int, seconds: float) -> None:
        method = "single" if rows <= 1 else "batch"
        self._of(self.count, model, route, method).inc()
        self._of(self.success, model, route, method).inc()
        self._of(self.duration, model, route).observe(seconds)

    def failed(self, model: str, route: str, rows: int, err: str) -> None:
        """A request that failed with TEI's kind of error ``err``."""
        self._later(self._failed, model, route, rows, err)

    def _failed(self, model: str, route: str, rows: int, err: str) -> None:
        self._of(self.count, model, route, "single" if rows <= 1 else "batch").inc()
        self._of(self.failure, model, route, err).inc()

    def call(self, model: str, rows: int, requests: int, waits: Iterable[float], seconds: float) -> None:
        """One Triton call: its rows, the requests it answered, how long each waited for it, and how long it took."""
        self._later(self._call, model, rows, requests, waits, seconds)

    def _call(self, model: str, rows: int, requests: int, waits: Iterable[float], seconds: float) -> None:
        self._of(self.batch_size, model).observe(rows)
        self._of(self.coalesced, model).observe(requests)
        queue, inference = self._of(self.queue_duration, model), self._of(self.inference_duration, model)
        for wait in waits:
            queue.observe(wait)
            inference.observe(seconds)

    def encoded(self, model: str, seconds: float) -> None:
        """One call encoded in the gateway in ``seconds``, for the model step alone."""
        self._later(self._encoded, model, seconds)

    def _encoded(self, model: str, seconds: float) -> None:
        self._of(self.tokenization, model).observe(seconds)
        self._of(self.step_calls, model).inc()

    def queued(self, model: str, waiting: int) -> None:
        """How many requests wait for a Triton call to ``model`` now."""
        self._of(self.queue_size, model).set(waiting)

    def lengths(self, model: str, counts: Iterable[int]) -> None:
        """The tokens the model read of each input."""
        self._later(self._lengths, model, counts)

    def _lengths(self, model: str, counts: Iterable[int]) -> None:
        histogram = self._of(self.input_length, model)
        for count in counts:
            histogram.observe(count)

    def render(self) -> bytes:
        """The scrape, in Prometheus's text format."""
        self.flush()
        return generate_latest(self.registry)
