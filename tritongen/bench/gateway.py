"""Baseline (e): what the OpenAI/TEI gateway adds in front of an embedding ensemble.

The gateway (``tritongen gateway``, a subprocess) forwards to the running Triton server (KServe HTTP with binary
tensors, merging the requests that wait into one call); the direct side is the same ensemble over Triton's own
HTTP/JSON API. One HTTP/JSON load generator (:mod:`tritongen.bench.http_load`: keep-alive clients, one text per
request) drives both, up at once, with the same texts, in interleaved rounds. The report gives the added latency
at each concurrency (the median over rounds of the gateway's p50 minus the direct p50, and the same for the mean),
the throughput ratio, and the CPU each request cost the server (its frontend and stubs) and the gateway, side by
side, read from ``/proc`` over each measured window; and it checks that both sides return the same embeddings.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from tritongen.bench.cpu_use import process_cpu, server_cpu
from tritongen.bench.http_load import (
    HttpTarget,
    InterleavedRounds,
    Interleaving,
    LoadResult,
    RoundFigures,
    interleaved_rounds,
    kserve_target,
    openai_target,
)
from tritongen.bench.process import running_http_process

__all__ = [
    "GatewayComparison",
    "GatewaySetup",
    "PairedLatency",
    "compare_with_gateway",
    "gateway_server",
    "paired_latency",
]


@contextlib.contextmanager
def gateway_server(
    grpc_url: str, http_url: str, repository: Path, log: Path, *, model: str | None = None, args: Sequence[str] = ()
) -> Iterator[tuple[str, int]]:
    """Start ``python -m tritongen gateway`` in front of Triton's ``grpc_url`` and ``http_url`` on a free port.

    Yields its ``host:port`` and pid; ``args`` are more of its options. It is SIGTERMed at exit.
    """

    def command(port: int) -> list[str]:
        return [
            sys.executable, "-m", "tritongen", "gateway", "--triton-url", grpc_url, "--triton-http-url", http_url,
            "--repository", str(repository), "--port", str(port), *(["--model", model] if model else []), *args,
        ]  # fmt: skip

    env = {k: v for k, v in os.environ.items() if k != "TRITONGEN_GATEWAY_KEY"}  # the bench sends no key
    with running_http_process(command, log, what="the gateway", env=env, timeout=60) as (process, url):
        yield url, process.pid


@dataclass(frozen=True)
class PairedLatency:
    """Concurrency 1, request by request: direct, then through the gateway, then direct again, ...

    Alternating single requests puts both sides under the same moment's load, so the median of the per-pair
    differences is the gateway's added latency even on a busy machine, where rounds of seconds drift.
    """

    requests: int
    direct_p50: float
    gateway_p50: float
    added_p50: float  # median of (gateway - direct) over the pairs


def paired_latency(direct: HttpTarget, gateway: HttpTarget, texts: Sequence[str], requests: int) -> PairedLatency:
    """Send ``requests`` texts to each side alternately, one at a time, on one keep-alive connection each."""
    connections = {t.label: http.client.HTTPConnection(t.host, t.port, timeout=120) for t in (direct, gateway)}
    pairs = []
    try:
        for i in range(requests + 20):  # the first 20 pairs warm both paths up
            text, took = texts[i % len(texts)], {}
            for target in (direct, gateway) if i % 2 == 0 else (gateway, direct):
                start = time.perf_counter()
                target.post(connections[target.label], [text])
                took[target.label] = (time.perf_counter() - start) * 1e3
            if i >= 20:
                pairs.append((took[direct.label], took[gateway.label]))
    finally:
        for connection in connections.values():
            connection.close()
    return PairedLatency(
        requests,
        float(np.median([a for a, _ in pairs])),
        float(np.median([b for _, b in pairs])),
        float(np.median([b - a for a, b in pairs])),
    )


def _mean_ms(result: LoadResult) -> float:
    """The mean latency of one run (NaN for a run with no answer)."""
    return float(np.mean(result.latencies_ms)) if result.latencies_ms else float("nan")


@dataclass(frozen=True)
class GatewayComparison(InterleavedRounds):
    """Interleaved rounds of the ensemble direct and through the gateway, and their embeddings' agreement.

    ``at(concurrency)`` gives the medians of the rounds: throughputs and their ratio, latencies and what is added.
    """

    name: str
    rounds: Sequence[tuple[LoadResult, LoadResult]]  # (direct, gateway) per round and concurrency
    max_abs_diff: float
    seconds: float
    paired: PairedLatency | None = None
    step_calls: tuple[int, int] | None = None  # the gateway's calls to the model step alone, and all its calls
    figures: ClassVar[RoundFigures] = {
        "direct": lambda a, b: a.throughput,
        "gateway": lambda a, b: b.throughput,
        "ratio": lambda a, b: b.throughput / a.throughput if a.throughput else float("nan"),
        "direct_p50": lambda a, b: a.percentile(50),
        "gateway_p50": lambda a, b: b.percentile(50),
        "added_p50": lambda a, b: b.percentile(50) - a.percentile(50),
        "added_mean": lambda a, b: _mean_ms(b) - _mean_ms(a),
        # CPU ms per answered request (one text): the server's direct; through the gateway, the server's and its own
        "server_direct": lambda a, b: a.cpu_ms_per_request(SERVER),
        "server_gateway": lambda a, b: b.cpu_ms_per_request(SERVER),
        "gateway_cpu": lambda a, b: b.cpu_ms_per_request(GATEWAY),
        "node_gateway": lambda a, b: b.cpu_ms_per_request(SERVER) + b.cpu_ms_per_request(GATEWAY),
    }
    table_head: ClassVar[str] = (
        "| concurrency | direct req/s | gateway req/s | gateway/direct | direct p50 ms | gateway p50 ms "
        "| added p50 ms | added mean ms | server CPU ms/text, direct | server CPU ms/text, via gateway "
        "| gateway CPU ms/text | both, via gateway |"
    )
    table_row: ClassVar[str] = (
        "| {concurrency} | {direct:.1f} | {gateway:.1f} | **{ratio:.2f}x** | {direct_p50:.2f} | {gateway_p50:.2f} "
        "| **{added_p50:+.2f}** | {added_mean:+.2f} | {server_direct:.3f} | {server_gateway:.3f} | {gateway_cpu:.3f} "
        "| **{node_gateway:.3f}** |"
    )

    def to_markdown(self) -> str:
        """The summary's section on the gateway."""
        lines = self.section(
            f"(e) the OpenAI/TEI gateway in front of `{self.name}`",
            "Triton's HTTP/JSON API against the gateway's `/v1/embeddings` (binary KServe HTTP to the same server), "
            "both up at once",
        )
        if self.paired is not None:
            p = self.paired
            lines += [
                "",
                f"Paired at concurrency 1 ({p.requests} requests per side, alternating one by one): direct p50 "
                f"{p.direct_p50:.2f} ms, gateway p50 {p.gateway_p50:.2f} ms, **added {p.added_p50:+.2f} ms** (median "
                "of the per-pair differences).",
            ]
        lines += [
            "",
            f"Same embeddings both ways: max abs difference {self.max_abs_diff:.2e}. Failed requests: {self.failed()}.",
        ]
        if self.step_calls is not None:
            alone, calls = self.step_calls
            lines += [
                "",
                f"The gateway sent {alone} of its {calls} Triton calls to the model step alone, its Python steps' "
                "work done in the gateway (`--through-ensemble`: all through the ensemble).",
            ]
        return "\n".join(lines) + "\n"


SERVER, GATEWAY = "server", "gateway"  # the CPU meters: tritonserver with its stubs, and the gateway's process


@dataclass(frozen=True)
class GatewaySetup:
    """The two sides of the comparison: Triton's HTTP address and the gateway's; their pids for the CPU columns."""

    triton_http_url: str
    gateway_url: str
    pids: tuple[int, int] | None = None  # tritonserver's (its stubs with it) and the gateway's; None: no CPU read


def compare_with_gateway(
    setup: GatewaySetup,
    name: str,
    texts: Sequence[str],
    plan: Interleaving,
    *,
    paired_requests: int = 1000,
    progress: Callable[[str], None] = lambda _: None,
) -> GatewayComparison:
    """Drive ``name`` directly at Triton and through the gateway, interleaved; each window reads both's CPU."""
    direct = kserve_target("direct", setup.triton_http_url, name)
    gateway = openai_target("gateway", setup.gateway_url, name, path="/v1/embeddings")
    pids = setup.pids
    sample = list(texts[:64])
    max_abs_diff = float(np.abs(direct.embed(sample) - gateway.embed(sample)).max())
    progress(f"  paired: {paired_requests} requests per side at concurrency 1, alternating…")
    paired = paired_latency(direct, gateway, texts, paired_requests) if paired_requests else None
    meters = None
    if pids is not None:
        server, process = pids
        meters = {SERVER: lambda: server_cpu(server), GATEWAY: lambda: process_cpu(process)}
    results = interleaved_rounds(direct, gateway, texts, plan, progress, meters)
    return GatewayComparison(name, results, max_abs_diff, plan.seconds, paired, step_calls(gateway, name))


def step_calls(gateway: HttpTarget, name: str) -> tuple[int, int] | None:
    """The gateway's calls of ``name`` to its model step alone, and all its Triton calls of it (its ``/metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families

    connection = http.client.HTTPConnection(gateway.host, gateway.port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    except OSError:
        return None
    finally:
        connection.close()
    counts = {
        sample.name: int(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("model") == name
    }
    return counts.get("tritongen_gateway_model_step_calls_total", 0), counts.get("te_batch_next_size_count", 0)
