"""``tritongen plan``: how many replicas (and GPUs) a target rate and p99 need, from a bench result.

Reads ``results.csv`` as ``make bench`` writes it (one row per configuration and concurrency:
throughput and p50/p95/p99 in ms). A replica's capacity is the throughput of the ensemble at the
highest measured concurrency whose p99 meets the target, less a headroom for bursts and a lost
replica; replicas scale linearly. Those assumptions travel with the plan and are printed with it.

The CPU side (Triton's frontend and the Python steps, everything but the model step) bounds a replica too: on
a GPU node it must keep the GPU fed. ``make bench BENCH_ARGS=--free-model-step`` measures it per core
(``cpu_side.csv``); with the node's cores the plan sets it beside the model step's figure and says which bounds.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from tritongen.errors import DeployError
from tritongen.sizing.cpu_side import CpuSideFigures

__all__ = [
    "CapacityPlan",
    "MeasuredPoint",
    "bench_results_path",
    "cpu_side_path",
    "plan_capacity",
    "read_cpu_side",
    "read_points",
]

ENSEMBLE_CONFIG = "ensemble"  # the row label make bench gives the ensemble as built


@dataclass(frozen=True)
class MeasuredPoint:
    """One row of a bench result."""

    concurrency: int
    throughput: float
    p99_ms: float


@dataclass(frozen=True)
class CpuSideBound:
    """The CPU side's share of a plan: the figures, the node, and what one replica's CPU carries."""

    figures: CpuSideFigures
    cores: int
    tokenizer_instances: int

    @property
    def one_text(self) -> float:
        """One-text requests/s one replica's CPU side carries."""
        return self.figures.capacity(self.cores, self.tokenizer_instances)[0]


@dataclass(frozen=True)
class CapacityPlan:
    """The answer and everything it rests on."""

    qps: float
    p99_ms: float
    headroom: float
    chosen: MeasuredPoint
    replicas: int
    gpus_per_replica: int
    source: Path
    cpu_side: CpuSideBound | None = None

    @property
    def per_replica_qps(self) -> float:
        """What one replica is planned to carry: the lower of its model step and CPU side, less the headroom."""
        return min(self.chosen.throughput, self.cpu_side.one_text if self.cpu_side else float("inf")) * (
            1 - self.headroom
        )

    @property
    def bound_by(self) -> str:
        """Which side bounds a replica: ``the model step`` or ``the CPU side``."""
        return "the CPU side" if self.cpu_side and self.cpu_side.one_text < self.chosen.throughput else "the model step"

    @property
    def gpus(self) -> int:
        """GPUs for all replicas."""
        return self.replicas * self.gpus_per_replica

    def to_text(self) -> str:
        """The plan and its assumptions, for a terminal or a README."""
        c = self.chosen
        return "\n".join(
            [
                f"{self.replicas} replica(s), {self.gpus} GPU(s), for {self.qps:g} requests/s "
                f"at p99 <= {self.p99_ms:g} ms.",
                "Assumptions:",
                f"- one replica carries {c.throughput:.1f} requests/s: the bench's throughput at concurrency "
                f"{c.concurrency}, the highest concurrency whose p99 ({c.p99_ms:.1f} ms) meets {self.p99_ms:g} ms "
                f"({self.source});",
                f"- {self.headroom:.0%} headroom (bursts, a replica lost to a rollout or a node), so "
                f"{self.per_replica_qps:.1f} requests/s planned per replica: ceil({self.qps:g} / "
                f"{self.per_replica_qps:.1f}) = {self.replicas};",
                "- replicas scale linearly behind an even load balancer, each on hardware like the bench's, with "
                "traffic like the bench's texts;",
                f"- {self.gpus_per_replica} GPU(s) per replica.",
                *self._cpu_side_lines(),
            ]
        )

    def _cpu_side_lines(self) -> list[str]:
        if self.cpu_side is None:
            return ["- the CPU side (frontend, tokenizer, postprocess) was not set beside it: measure it with "
                    "`make bench BENCH_ARGS=--free-model-step` and give the node's cores (--cores)."]  # fmt: skip
        side = self.cpu_side
        figures = side.figures
        return [
            f"- the CPU side of a {side.cores}-core node with {side.tokenizer_instances} tokenizer instance(s) carries "
            f"{side.one_text:.0f} one-text requests/s (min of {figures.one_text_per_core:.0f}/s per core and "
            f"{1000 / figures.tokenizer_ms:.0f}/s per tokenizer instance; {figures.source});",
            f"- a replica is bounded by {self.bound_by} ({self.chosen.throughput:.1f} vs {side.one_text:.0f} "
            "requests/s).",
        ]


def bench_results_path(name: str, root: Path = Path("perf_analyzer_configs")) -> Path:
    """Where ``make bench NAME=name`` leaves its ``results.csv``."""
    return root / name / "results" / "results.csv"


def read_points(path: Path, config: str = ENSEMBLE_CONFIG) -> list[MeasuredPoint]:
    """The rows of ``config`` in a bench ``results.csv``, by concurrency."""
    if not Path(path).is_file():
        raise DeployError("no bench result at {path}; run the bench first", path=path)
    try:
        with open(path, newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if row.get("config") == config]
        points = [MeasuredPoint(int(r["concurrency"]), float(r["throughput"]), float(r["p99_ms"])) for r in rows]
    except (KeyError, ValueError, TypeError) as exc:
        raise DeployError(f"{{path}} is not a bench results.csv ({exc})", path=path) from None
    if not points:
        raise DeployError(f"{{path}} has no rows for `{config}`", path=path)
    return sorted(points, key=lambda p: p.concurrency)


def cpu_side_path(name: str, root: Path = Path("perf_analyzer_configs")) -> Path:
    """Where ``make bench NAME=name BENCH_ARGS=--free-model-step`` leaves its ``cpu_side.csv``."""
    return root / name / "cpu_side" / "cpu_side.csv"


def read_cpu_side(path: Path) -> CpuSideFigures:
    """The per-core figures of a ``cpu_side.csv``: the ensemble's best gRPC rows, its model step native."""
    if not Path(path).is_file():
        raise DeployError("no CPU-side result at {path}; run `make bench BENCH_ARGS=--free-model-step`", path=path)
    try:
        with open(path, newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r["target"] == "ensemble" and r["protocol"] == "grpc"]
        best = {
            batch: max(float(r["texts_per_s_per_core_native_model"]) for r in rows if r["texts_per_request"] == batch)
            for batch in ("1", "32")
        }
        tokenizer_ms = min(float(r["tokenizer_cpu_ms_per_request"]) for r in rows if r["texts_per_request"] == "1")
    except (KeyError, ValueError, TypeError) as exc:
        raise DeployError(f"{{path}} is not a CPU-side cpu_side.csv ({exc})", path=path) from None
    return CpuSideFigures(best["1"], best["32"], tokenizer_ms, f"measured in {path}")


def plan_capacity(
    path: Path,
    *,
    qps: float,
    p99_ms: float,
    headroom: float = 0.3,
    gpus_per_replica: int = 1,
    cpu_side: CpuSideBound | None = None,
) -> CapacityPlan:
    """Replicas for ``qps`` requests/s with p99 at most ``p99_ms``, from the bench result at ``path``.

    With ``cpu_side``, a replica carries the lower of its model step's and its CPU side's rate.
    """
    if qps <= 0 or p99_ms <= 0:
        raise DeployError(f"the target needs a positive rate and latency (got {qps:g}/s, {p99_ms:g} ms)")
    if not 0 <= headroom < 1:
        raise DeployError(f"headroom {headroom:g} is not a fraction in [0, 1)")
    points = read_points(path)
    meeting = [p for p in points if p.p99_ms <= p99_ms and p.throughput > 0]
    if not meeting:
        best = min(points, key=lambda p: p.p99_ms)
        raise DeployError(
            f"no measured concurrency meets p99 <= {p99_ms:g} ms in {{path}} (the lowest p99 is {best.p99_ms:.1f} ms "
            f"at concurrency {best.concurrency}); more replicas cannot lower it",
            path=path,
        )
    chosen = max(meeting, key=lambda p: p.concurrency)
    plan = CapacityPlan(qps, p99_ms, headroom, chosen, 1, gpus_per_replica, Path(path), cpu_side)
    return dataclasses.replace(plan, replicas=max(1, math.ceil(qps / plan.per_replica_qps)))
