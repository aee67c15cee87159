"""Two embedding servers compared in interleaved rounds: the ensemble (ours) and a peer, and how their embeddings agree.

The peers are infinity-emb (:mod:`tritongen.bench.infinity`, baseline d) and the sentence-transformers script
(:mod:`tritongen.bench.st_peer`, baseline f); both are driven by the one HTTP/JSON load generator
(:mod:`tritongen.bench.http_load`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tritongen.bench.http_load import (
    HttpTarget,
    InterleavedRounds,
    Interleaving,
    LoadResult,
    RoundFigures,
    interleaved_rounds,
)

__all__ = ["PeerComparison", "compare_with_peer"]


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
            *self.section(f"{self.heading}: {self.ours} against {self.peer}", "Both servers up at once"),
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
        ours.label, peer.label, results, float(cosines.min()), float(np.median(cosines)), plan.seconds,
        heading,
    )  # fmt: skip
