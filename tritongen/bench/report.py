"""Write a benchmark's CSV, plot and markdown summary."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tritongen.bench.ceiling import CeilingPoint
from tritongen.bench.gateway import GatewayComparison
from tritongen.bench.peer import PeerComparison
from tritongen.bench.perf import PerfPoint
from tritongen.bench.tail import TailReport
from tritongen.bench.tune import TunePoint, best, ratios
from tritongen.serve.stats import StepStats

__all__ = ["BenchReport", "LatencyBudget", "write_report"]

LABELS = {
    "ensemble": "Triton ensemble (dynamic batching)",
    "nobatch": "(b) same ensemble, no batching",
    "pipeline": "(a) transformers pipeline + FastAPI",
}


@dataclass(frozen=True)
class BenchReport:
    """Everything one bench run measured."""

    name: str
    points: list[PerfPoint]
    breakdown: Mapping[tuple[str, int], Mapping[str, StepStats]]
    ceiling: list[CeilingPoint]
    command: str
    ensembles: Mapping[tuple[str, int], StepStats] = field(default_factory=dict)  # the ensemble's own counters
    peer: PeerComparison | None = None  # (d) infinity-emb, interleaved rounds
    gateway: GatewayComparison | None = None  # (e) the OpenAI/TEI gateway against Triton's HTTP API
    script: PeerComparison | None = None  # (f) the sentence-transformers ONNX INT8 + FastAPI script
    interleaved: list[PeerComparison] = field(default_factory=list)  # (g) each --compare ensemble, interleaved
    tuning: list[TunePoint] = field(default_factory=list)  # the instance/thread sweep, the built setting first
    tail: TailReport | None = None  # the slowest 1% of traced requests against the median (tritongen.bench.tail)
    tuned_backend: str = ""  # the model step's backend (which spec section holds its threads)
    served_by: Mapping[str, str] = field(default_factory=dict)  # backend -> what served its steps (native or stand-in)

    def budgets(self, concurrency: int = 1) -> list[LatencyBudget]:
        """The latency budget of each Triton configuration measured at ``concurrency``."""
        budgets = []
        for (config, c), server in sorted(self.ensembles.items()):
            point = self.at(config, c)
            if c == concurrency and point is not None and server.success_count:
                budgets.append(LatencyBudget.of(config, point, server, self.breakdown.get((config, c), {})))
        return budgets

    def at(self, config: str, concurrency: int) -> PerfPoint | None:
        """The measurement of ``config`` at ``concurrency``, if taken."""
        return next((p for p in self.points if p.config == config and p.concurrency == concurrency), None)

    @property
    def top_concurrency(self) -> int:
        """The highest concurrency of the sweep."""
        return max(p.concurrency for p in self.points)

    def ratios(self) -> dict[str, float]:
        """The headline ratios at the top concurrency (only those whose inputs were measured)."""
        c = self.top_concurrency
        ours, pipe, nobatch = self.at("ensemble", c), self.at("pipeline", c), self.at("nobatch", c)
        ratios: dict[str, float] = {}
        if ours and pipe:
            ratios["throughput vs (a) pipeline"] = ours.throughput / pipe.throughput
            ratios["p99 latency vs (a) pipeline"] = ours.p99_ms / pipe.p99_ms
        if ours and nobatch:
            ratios["throughput vs (b) no batching"] = ours.throughput / nobatch.throughput
        for other in sorted({p.config for p in self.points} - {"ensemble", "pipeline", "nobatch"}):
            point = self.at(other, c)
            if ours and point:
                ratios[f"throughput of `{other}` vs `{self.name}`"] = point.throughput / ours.throughput
        if ours and self.ceiling:
            ratios["throughput vs (c) in-process ceiling"] = ours.throughput / max(p.throughput for p in self.ceiling)
        return ratios


_STEP_ORDER = ("_tokenizer", "_model", "_postprocess")


@dataclass(frozen=True)
class LatencyBudget:
    """Where one request's time goes (averages, ms), from perf_analyzer and the statistics API.

    ``client`` is perf_analyzer's average latency and ``server`` the ensemble's own time (arrival to
    response). Each step has its queue and its compute; a Python step's compute includes the round trip
    to its stub process through shared memory. What the steps do not account for is the ensemble's
    scheduling and the tensor hand-offs between steps; what the server does not is HTTP and the client.
    """

    config: str
    client_ms: float
    server_ms: float
    steps: tuple[tuple[str, float, float], ...]  # (model, queue ms, compute ms), in ensemble order

    @classmethod
    def of(cls, config: str, point: PerfPoint, server: StepStats, steps: Mapping[str, StepStats]) -> LatencyBudget:
        """From one perf_analyzer point and the counters of the ensemble and its steps over that run."""

        def order(model: str) -> int:
            return next((i for i, suffix in enumerate(_STEP_ORDER) if model.endswith(suffix)), len(_STEP_ORDER))

        rows = tuple(
            (model, stats.per_request_ms("queue_ns"), _compute_ms(stats))
            for model, stats in sorted(steps.items(), key=lambda item: order(item[0]))
        )
        return cls(config, point.avg_ms, server.per_request_ms("success_ns"), rows)

    @property
    def between_steps_ms(self) -> float:
        """Ensemble scheduling and hand-offs: the server's time the steps' queue and compute do not cover."""
        return self.server_ms - sum(queue + compute for _, queue, compute in self.steps)

    @property
    def outside_server_ms(self) -> float:
        """HTTP, (de)serialisation and the client: the client's latency the server does not cover."""
        return self.client_ms - self.server_ms

    def rows(self) -> list[tuple[str, float]]:
        """(what, ms) lines that add up to the client's latency."""
        rows = [("client ↔ server (HTTP, JSON/binary encoding, perf_analyzer)", self.outside_server_ms)]
        for model, queue, compute in self.steps:
            rows += [(f"`{model}` queue", queue), (f"`{model}` compute", compute)]
        rows.append(("between steps (ensemble scheduling, tensor hand-offs)", self.between_steps_ms))
        return rows


def _compute_ms(stats: StepStats) -> float:
    return sum(stats.per_request_ms(f) for f in ("compute_input_ns", "compute_infer_ns", "compute_output_ns"))


def write_report(report: BenchReport, directory: Path) -> dict[str, Path]:
    """Write ``results.csv``, ``breakdown.csv``, ``plot.png`` and ``summary.md`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "csv": directory / "results.csv",
        "breakdown": directory / "breakdown.csv",
        "plot": directory / "plot.png",
        "summary": directory / "summary.md",
    }
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(report.points[0])))
        writer.writeheader()
        writer.writerows(asdict(p) for p in report.points)
    with open(paths["breakdown"], "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["config", "concurrency", "step", "avg_batch", "queue_ms", "compute_ms", "requests"])
        for (config, concurrency), steps in sorted(report.breakdown.items()):
            for step, stats in sorted(steps.items()):
                writer.writerow([config, concurrency, step, *_step_figures(stats), stats.success_count])
    if report.tuning:
        paths["tuning"] = directory / "tuning.csv"
        with open(paths["tuning"], "w", newline="") as handle:
            writer = csv.writer(handle)
            header = ["tokenizer_instances", "model_instances", "threads", "postprocess_instances"]
            writer.writerow([*header, *asdict(report.tuning[0].point)])
            for t in report.tuning:
                s = t.setting
                writer.writerow([s.tokenizer, s.model, s.threads, s.postprocess, *asdict(t.point).values()])
    _plot(report, paths["plot"])
    paths["summary"].write_text(summary_markdown(report), encoding="utf-8")
    return paths


def _step_figures(stats: StepStats) -> tuple[str, str, str]:
    compute = _compute_ms(stats)
    return f"{stats.average_batch_size:.2f}", f"{stats.per_request_ms('queue_ns'):.2f}", f"{compute:.2f}"


def summary_markdown(report: BenchReport) -> str:
    """The summary: the sweep table, the ratios, the ceiling and the per-step breakdown."""
    c = report.top_concurrency
    lines = [f"# Benchmark of `{report.name}`", "", f"Command: `{report.command}`", ""]
    if report.served_by:
        lines += ["Model steps served by: " + "; ".join(f"{b}: {what}" for b, what in report.served_by.items()), ""]
    if any(not p.stable for p in report.points):
        lines += [
            "Rows marked *unstable* did not settle within 15% over 10 trials (a noisy machine) and were "
            "measured again with a 50% threshold.",
            "",
        ]
    lines += ["| configuration | concurrency | infer/s | p50 ms | p95 ms | p99 ms |", "|---|---:|---:|---:|---:|---:|"]
    for p in report.points:
        lines.append(
            f"| {LABELS.get(p.config, p.config)} | {p.concurrency}{'' if p.stable else ' (unstable)'} | "
            f"{p.throughput:.1f} | {p.p50_ms:.1f} | "
            f"{p.p95_ms:.1f} | {p.p99_ms:.1f} |"
        )
    if report.ceiling:
        best = max(report.ceiling, key=lambda p: p.throughput)
        sizes = ", ".join(f"{p.batch_size}: {p.throughput:.1f}" for p in report.ceiling)
        lines += [
            "",
            f"(c) in-process ONNX Runtime ceiling: best {best.throughput:.1f} texts/s at batch {best.batch_size} "
            f"(batch size: texts/s — {sizes}).",
        ]
    lines += ["", f"## Ratios at concurrency {c}", ""]
    lines += [f"- {key}: **{value:.2f}x**" for key, value in report.ratios().items()]
    if report.peer is not None:
        lines += ["", report.peer.to_markdown().rstrip("\n")]
    if report.gateway is not None:
        lines += ["", report.gateway.to_markdown().rstrip("\n")]
    for comparison in [report.script, *report.interleaved]:
        if comparison is not None:
            lines += ["", comparison.to_markdown().rstrip("\n")]
    if report.tail is not None:
        lines += ["", report.tail.to_markdown().rstrip("\n")]
    for budget in report.budgets(1):
        lines += [
            "",
            f"## Latency budget of {LABELS.get(budget.config, f'`{budget.config}`')} at concurrency 1",
            "",
            f"Client latency {budget.client_ms:.2f} ms on average, of which {budget.server_ms:.2f} ms in the "
            "server (the ensemble's statistics); a Python step's compute includes its stub's IPC round trip.",
            "",
            "| where | ms/request | share |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| {what} | {ms:.2f} | {ms / budget.client_ms:.0%} |" for what, ms in budget.rows() if budget.client_ms
        ]
    lines += _tuning_markdown(report)
    steps = report.breakdown.get(("ensemble", c), {})
    if steps:
        lines += [
            "",
            f"## Per-step breakdown of the ensemble at concurrency {c}",
            "",
            "| step | avg batch | queue ms/request | compute ms/request |",
            "|---|---:|---:|---:|",
        ]
        for step, stats in sorted(steps.items()):
            batch, queue, compute = _step_figures(stats)
            lines.append(f"| {step} | {batch} | {queue} | {compute} |")
    return "\n".join(lines) + "\n"


def _tuning_markdown(report: BenchReport) -> list[str]:
    """The tuning sweep's table, and the best setting at the top concurrency with the spec that keeps it."""
    if not report.tuning:
        return []
    lines = [
        "",
        "## Instances and threads (tuning sweep; the first row is the setting the build wrote)",
        "",
        "| setting | concurrency | infer/s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in report.tuning:
        p = t.point
        lines.append(
            f"| {t.setting.label} | {p.concurrency}{'' if p.stable else ' (unstable)'} | {p.throughput:.1f} | "
            f"{p.p50_ms:.1f} | {p.p99_ms:.1f} |"
        )
    c = max(t.point.concurrency for t in report.tuning)
    winner, built = best(report.tuning, c) or (None, None)
    if winner is None or built is None:
        return lines
    lines += ["", f"Best at concurrency {c}: **{winner.setting.label}**, {winner.point.throughput:.1f} infer/s, "
              f"{winner.point.throughput / built.point.throughput:.2f}x the built setting "
              f"(p99 {winner.point.p99_ms:.1f} vs {built.point.p99_ms:.1f} ms)."]  # fmt: skip
    others = {k: v for k, v in ratios(report.tuning, winner.setting).items() if k != c}
    if others and winner.setting != built.setting:
        figures = ", ".join(f"c{k} {v:.2f}x" for k, v in others.items())
        lines += ["", f"Against the built setting at the other concurrencies: {figures} (what wins under load can lose "
                  "at low concurrency)."]  # fmt: skip
    if winner.setting != built.setting:
        lines += ["", "To build with it, put this in the spec (`SPEC=`):", "", "```yaml",
                  *winner.setting.spec_lines(report.tuned_backend), "```"]  # fmt: skip
    return lines


def _plot(report: BenchReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    configs: Sequence[str] = sorted({p.config for p in report.points})
    for axis, measure, title in ((axes[0], "p95_ms", "p95 latency"), (axes[1], "p99_ms", "p99 latency")):
        for config in configs:
            points = sorted((p for p in report.points if p.config == config), key=lambda p: p.concurrency)
            xs = [p.throughput for p in points]
            ys = [getattr(p, measure) for p in points]
            axis.plot(xs, ys, marker="o", label=LABELS.get(config, config))
            for p, x, y in zip(points, xs, ys, strict=True):
                axis.annotate(str(p.concurrency), (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
        if report.ceiling:
            axis.axvline(
                max(p.throughput for p in report.ceiling), color="grey", linestyle="--", label="(c) in-process ceiling"
            )
        axis.set_xlabel("throughput (infer/s)")
        axis.set_ylabel(f"{title} (ms)")
        axis.set_yscale("log")
        axis.set_title(f"{report.name}: throughput vs {title} (labels: concurrency)")
        axis.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
