"""Baseline (e): what the OpenAI/TEI gateway adds in front of an embedding ensemble.

The gateway (``tritongen gateway``, a subprocess) forwards to the running Triton server over gRPC; the direct
side is the same ensemble over Triton's own HTTP/JSON API. One HTTP/JSON load generator
(:mod:`tritongen.bench.http_load`: keep-alive clients, one text per request) drives both, up at once, with the
same texts, in interleaved rounds. The report gives the added latency at each concurrency (the median over
rounds of the gateway's p50 minus the direct p50, and the same for the mean) and the throughput ratio, and
checks that both sides return the same embeddings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritongen.bench.http_load import LoadResult, drive, kserve_target, openai_target
from tritongen.errors import BenchError, ServerError
from tritongen.server import free_port, wait_until_ready

__all__ = ["GatewayComparison", "compare_with_gateway", "gateway_server"]


@contextlib.contextmanager
def gateway_server(grpc_url: str, repository: Path, log: Path, *, model: str | None = None) -> Iterator[str]:
    """Start ``python -m tritongen gateway`` in front of ``grpc_url`` on a free port; SIGTERM it at exit."""
    port = free_port()
    command = [
        sys.executable, "-m", "tritongen", "gateway", "--triton-url", grpc_url, "--repository", str(repository),
        "--port", str(port), *(["--model", model] if model else []),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TRITONGEN_GATEWAY_KEY"}  # the bench sends no key
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"127.0.0.1:{port}"
    try:
        try:
            wait_until_ready(url, timeout=60, process=process, what="the gateway", log_file=log, path="/health")
        except ServerError as exc:
            raise BenchError(exc.message, log_file=log) from None
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass(frozen=True)
class GatewayComparison:
    """Interleaved rounds of the ensemble direct and through the gateway, and their embeddings' agreement."""

    name: str
    rounds: Sequence[tuple[LoadResult, LoadResult]]  # (direct, gateway) per round and concurrency
    max_abs_diff: float
    seconds: float

    def concurrencies(self) -> list[int]:
        """The concurrencies measured, ascending."""
        return sorted({direct.concurrency for direct, _ in self.rounds})

    def at(self, concurrency: int) -> dict[str, float]:
        """Medians over the rounds at ``concurrency``: throughputs and their ratio, latencies and what is added."""
        pairs = [(a, b) for a, b in self.rounds if a.concurrency == concurrency]

        def median(values: Sequence[float]) -> float:
            return float(statistics.median(values))

        def mean(result: LoadResult) -> float:
            return float(np.mean(result.latencies_ms)) if result.latencies_ms else float("nan")

        return {
            "direct": median([a.throughput for a, _ in pairs]),
            "gateway": median([b.throughput for _, b in pairs]),
            "ratio": median([b.throughput / a.throughput if a.throughput else float("nan") for a, b in pairs]),
            "direct_p50": median([a.percentile(50) for a, _ in pairs]),
            "gateway_p50": median([b.percentile(50) for _, b in pairs]),
            "added_p50": median([b.percentile(50) - a.percentile(50) for a, b in pairs]),
            "added_mean": median([mean(b) - mean(a) for a, b in pairs]),
            "errors": float(sum(a.errors + b.errors for a, b in pairs)),
        }

    def to_markdown(self) -> str:
        """The summary's section on the gateway."""
        rounds = len(self.rounds) // max(1, len(self.concurrencies()))
        lines = [
            f"## (e) the OpenAI/TEI gateway in front of `{self.name}`",
            "",
            f"Triton's HTTP/JSON API against the gateway's `/v1/embeddings` (gRPC to the same server), both up at "
            f"once, one HTTP/JSON load generator (one text per request, keep-alive clients), {rounds} interleaved "
            f"rounds of {self.seconds:.0f} s per side and concurrency; medians of the rounds.",
            "",
            "| concurrency | direct req/s | gateway req/s | gateway/direct | direct p50 ms | gateway p50 ms "
            "| added p50 ms | added mean ms |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in self.concurrencies():
            m = self.at(c)
            lines.append(
                f"| {c} | {m['direct']:.1f} | {m['gateway']:.1f} | **{m['ratio']:.2f}x** | {m['direct_p50']:.2f} "
                f"| {m['gateway_p50']:.2f} | **{m['added_p50']:+.2f}** | {m['added_mean']:+.2f} |"
            )
        errors = sum(a.errors + b.errors for a, b in self.rounds)
        lines += [
            "",
            f"Same embeddings both ways: max abs difference {self.max_abs_diff:.2e}. Failed requests: {errors}.",
        ]
        return "\n".join(lines) + "\n"


def compare_with_gateway(
    triton_http_url: str,
    name: str,
    gateway_url: str,
    texts: Sequence[str],
    *,
    concurrencies: Sequence[int],
    rounds: int = 3,
    seconds: float = 15.0,
    progress: Callable[[str], None] = lambda _: None,
) -> GatewayComparison:
    """Drive ``name`` directly at ``triton_http_url`` and through the gateway at ``gateway_url``, interleaved."""
    direct = kserve_target("direct", triton_http_url, name)
    gateway = openai_target("gateway", gateway_url, name, path="/v1/embeddings")
    sample = list(texts[:64])
    max_abs_diff = float(np.abs(direct.embed(sample) - gateway.embed(sample)).max())
    results = []
    for round_index in range(rounds):
        for concurrency in concurrencies:
            order = (direct, gateway) if round_index % 2 == 0 else (gateway, direct)  # neither always goes first
            measured = {}
            for target in order:
                progress(f"  round {round_index + 1}/{rounds}: {target.label} at concurrency {concurrency}…")
                measured[target.label] = drive(target, texts, concurrency, seconds)
            results.append((measured["direct"], measured["gateway"]))
    return GatewayComparison(name, results, max_abs_diff, seconds)
