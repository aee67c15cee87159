"""Baseline (d), the peer for embedding models: infinity-emb serving the same checkpoint.

infinity-emb (torch engine, its own dynamic batching) is what many teams run instead of Triton for
embeddings. It installs into its own venv (``make infinity-venv`` creates ``.venv-infinity``: torch 2.13 CPU
and ``infinity-emb[torch,server]``), because it pins transformers 4 and sentence-transformers 3. The bench
starts it beside the Triton server, so both meet the same machine at once, and drives both with one HTTP/JSON
load generator (:mod:`tritongen.bench.http_load`) in interleaved rounds; the report gives the median of the
per-round ratios at each concurrency, and checks that the two sides' embeddings agree (cosine).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

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
from tritongen.bench.process import http_process, venv_executable
from tritongen.errors import BenchError
from tritongen.serve.server import free_port

__all__ = [
    "INFINITY_VENV", "PeerComparison", "compare_with_infinity", "compare_with_peer", "infinity_executable",
    "infinity_server",
]  # fmt: skip

INFINITY_VENV = Path(".venv-infinity")


def infinity_executable() -> Path | None:
    """``infinity_emb`` of the infinity venv once ``make infinity-venv`` finished it, or None."""
    return venv_executable(INFINITY_VENV, "infinity_emb")


@contextlib.contextmanager
def infinity_server(checkpoint: str, name: str, log: Path, *, batch_size: int = 32) -> Iterator[str]:
    """Start infinity-emb on ``checkpoint`` (a local folder; offline) on a free port; stop it and its children."""
    executable = infinity_executable()
    if executable is None:
        raise BenchError(f"baseline infinity needs {INFINITY_VENV} with infinity-emb; run `make infinity-venv`")
    port = free_port()
    command = [
        str(executable), "v2", "--model-id", checkpoint, "--served-model-name", name, "--engine", "torch",
        "--device", "cpu", "--port", str(port), "--batch-size", str(batch_size), "--no-bettertransformer",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
           "INFINITY_ANONYMOUS_USAGE_STATS": "0"}  # fmt: skip
    with http_process(command, port, log, what="infinity-emb", env=env, timeout=300) as url:
        yield url


@dataclass(frozen=True)
class PeerComparison(InterleavedRounds):
    """Interleaved rounds of the ensemble and the peer at each concurrency, and their embeddings' agreement.

    ``at(concurrency)`` gives the medians of the rounds: throughputs, their per-round ratio, p50 and p99s.
    """

    ours: str
    peer: str
    rounds: Sequence[tuple[LoadResult, LoadResult]]  # (ours, peer) per round and concurrency
    cosine_min: float
    cosine_median: float
    seconds: float
    heading: str = "(d) the peer"  # the report's section: (d) infinity-emb, (f) the script
    # Each side against FP32 PyTorch, per text set: (set, side, texts, min cosine, median, the shortest text's).
    against_fp32: Sequence[tuple[str, str, int, float, float, float]] = ()
    figures: ClassVar[RoundFigures] = {
        "ours": lambda a, b: a.throughput,
        "peer": lambda a, b: b.throughput,
        "ratio": lambda a, b: a.throughput / b.throughput if b.throughput else float("nan"),
        "ours_p50": lambda a, b: a.percentile(50),
        "peer_p50": lambda a, b: b.percentile(50),
        "ours_p99": lambda a, b: a.percentile(99),
        "peer_p99": lambda a, b: b.percentile(99),
    }
    table_head: ClassVar[str] = (
        "| concurrency | ours req/s | peer req/s | ratio (median of rounds) | ours p50/p99 ms | peer p50/p99 ms |"
    )
    table_row: ClassVar[str] = (
        "| {concurrency} | {ours:.1f} | {peer:.1f} | **{ratio:.2f}x** | {ours_p50:.1f} / {ours_p99:.1f} "
        "| {peer_p50:.1f} / {peer_p99:.1f} |"
    )

    def to_markdown(self) -> str:
        """The summary's section on the peer."""
        lines = [
            f"## {self.heading}: `{self.ours}` against {self.peer}",
            "",
            f"Both servers up at once, {self.method()}; medians.",
            "",
            *self.table(),
            "",
            f"Embeddings agree: cosine min {self.cosine_min:.5f}, median {self.cosine_median:.5f} "
            f"(the same texts through both). Failed requests: {self.failed()}.",
        ]
        if self.against_fp32:
            lines += [
                "",
                "Each side against FP32 PyTorch (cosine, every text of each set):",
                "",
                "| texts | side | count | min | median | shortest text |",
                "|---|---|---:|---:|---:|---:|",
                *(f"| {t} | {side} | {n} | {lo:.4f} | {mid:.4f} | {short:.4f} |"
                  for t, side, n, lo, mid, short in self.against_fp32),
            ]  # fmt: skip
        return "\n".join(lines) + "\n"


def compare_with_peer(
    ours: HttpTarget,
    peer: HttpTarget,
    texts: Sequence[str],
    plan: Interleaving,
    progress: Callable[[str], None] = lambda _: None,
    heading: str = "(d) the peer",
) -> PeerComparison:
    """Drive the ensemble (``ours``) and a peer in interleaved rounds; their embeddings' agreement on the texts."""
    sample = list(texts[:64])
    a, b = ours.embed(sample), peer.embed(sample)
    cosines = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    results = interleaved_rounds(ours, peer, texts, plan, progress)
    return PeerComparison(
        ours.label.strip("`"), peer.label, results, float(cosines.min()), float(np.median(cosines)), plan.seconds,
        heading,
    )  # fmt: skip


def compare_with_infinity(
    triton_url: str,
    name: str,
    peer_url: str,
    texts: Sequence[str],
    plan: Interleaving,
    progress: Callable[[str], None] = lambda _: None,
) -> PeerComparison:
    """Drive the ensemble ``name`` at ``triton_url`` and infinity-emb at ``peer_url`` in interleaved rounds."""
    ours = kserve_target(f"`{name}`", triton_url, name)
    peer = openai_target("infinity-emb (torch engine)", peer_url, name)
    return compare_with_peer(ours, peer, texts, plan, progress)
