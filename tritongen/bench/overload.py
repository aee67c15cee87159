"""A burst far above capacity: how much is accepted, how much is shed, and the latency of what is accepted.

``concurrency`` coroutines on one asyncio client (gRPC or HTTP) send the same short request back to back
for ``seconds`` (a sender that was shed backs off briefly first). Every answer is sorted into accepted,
rejected (the server shed it: gRPC ``UNAVAILABLE``, HTTP 503, as Triton answers when a step's
``max_queue_size`` is exceeded or its queue timeout expires) and errors (anything else). The p50/p99 are
those of accepted requests. Run it against an ensemble built with a queue limit and one without, in the
same run, to see what the limit buys.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from tritongen.contract import carried_by_text_requests

__all__ = ["OverloadResult", "run_burst"]

_TEXT = b"A short sentence, as most requests are."


@dataclass(frozen=True)
class OverloadResult:
    """One burst's outcome."""

    name: str
    protocol: str
    concurrency: int
    seconds: float
    accepted: int
    rejected: int
    errors: dict[str, int]
    p50_ms: float | None
    p99_ms: float | None

    @property
    def sent(self) -> int:
        """Requests answered in any way."""
        return self.accepted + self.rejected + sum(self.errors.values())

    @property
    def accepted_per_s(self) -> float:
        """Accepted requests per second."""
        return self.accepted / self.seconds

    @property
    def rejected_share(self) -> float:
        """The share of requests the server shed."""
        return self.rejected / max(self.sent, 1)

    def row(self) -> str:
        """A markdown table row (see :data:`HEADER`)."""
        p50 = "-" if self.p50_ms is None else f"{self.p50_ms:.0f}"
        p99 = "-" if self.p99_ms is None else f"{self.p99_ms:.0f}"
        return (
            f"| {self.name} | {self.protocol} | {self.concurrency} | {self.sent} | {self.accepted_per_s:.1f} | "
            f"{self.rejected_share:.1%} | {sum(self.errors.values())} | {p50} | {p99} |"
        )


HEADER = (
    "| ensemble | protocol | concurrency | requests | accepted/s | rejected | errors | p50 ms (accepted) "
    "| p99 ms (accepted) |\n|---|---|---|---|---|---|---|---|---|"
)


def _rejected(protocol: str, exc: Exception) -> bool:
    status = str(getattr(exc, "status", lambda: "")())
    return status == "StatusCode.UNAVAILABLE" if protocol == "grpc" else status == "503"


async def _burst(
    name: str, url: str, protocol: str, concurrency: int, seconds: float, backoff_s: float
) -> OverloadResult:
    if protocol == "grpc":
        import tritonclient.grpc.aio as module
    else:
        import tritonclient.http.aio as module
    client = (
        module.InferenceServerClient(url)
        if protocol == "grpc"
        else module.InferenceServerClient(url, conn_limit=concurrency)
    )
    if protocol == "grpc":
        config = (await client.get_model_config(name)).config
        names = [tensor.name for tensor in config.input if carried_by_text_requests(tensor.name, tensor.optional)]
    else:
        names = [
            tensor["name"]
            for tensor in (await client.get_model_config(name))["input"]
            if carried_by_text_requests(tensor["name"], bool(tensor.get("optional")))
        ]
    array = np.array([_TEXT], dtype=object).reshape(1, 1)
    latencies: list[float] = []
    counts = {"rejected": 0}
    errors: dict[str, int] = {}
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        while time.monotonic() < deadline:
            tensors = []
            for tensor_name in names:
                tensor = module.InferInput(tensor_name, [1, 1], "BYTES")
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            started = time.perf_counter()
            try:
                await client.infer(name, tensors)
            except Exception as exc:  # sorted below; a burst must count every outcome
                if _rejected(protocol, exc):
                    counts["rejected"] += 1
                    await asyncio.sleep(backoff_s)  # as a client (or balancer) backs off before retrying
                else:
                    cause = str(getattr(exc, "status", lambda: None)() or type(exc).__name__)
                    errors[cause] = errors.get(cause, 0) + 1
                continue
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.monotonic()
    try:
        await asyncio.gather(*(sender() for _ in range(concurrency)))
    finally:
        await client.close()
    elapsed = time.monotonic() - started
    return OverloadResult(
        name=name, protocol=protocol, concurrency=concurrency, seconds=elapsed, accepted=len(latencies),
        rejected=counts["rejected"], errors=errors,
        p50_ms=float(np.percentile(latencies, 50)) if latencies else None,
        p99_ms=float(np.percentile(latencies, 99)) if latencies else None,
    )  # fmt: skip


def run_burst(
    name: str,
    url: str,
    *,
    protocol: str = "grpc",
    concurrency: int = 256,
    seconds: float = 20.0,
    backoff_s: float = 0.05,
) -> OverloadResult:
    """Send a burst of ``concurrency`` back-to-back requests at ``name`` for ``seconds``.

    A sender whose request was shed waits ``backoff_s`` before the next one, as real clients back off;
    with no wait, the burst measures how fast the server can say no rather than what it accepts.
    """
    return asyncio.run(_burst(name, url, protocol, concurrency, seconds, backoff_s))
