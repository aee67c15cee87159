"""What the INT8 search tried and what it chose: the model card's table and plot, and build.json's record."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.cpu import int8_weights_saturate
from tritongen.errors import AccuracyError
from tritongen.gates.accuracy import LABEL_AGREEMENT_MIN, AccuracyReport
from tritongen.precision.fusion import AttentionFusion
from tritongen.precision.optimize import WeightMatMul
from tritongen.precision.sensitivity import LayerSensitivity

__all__ = ["SPEED_BATCHES", "Candidate", "SearchReport", "Trial"]

SPEED_BATCHES = (1, 8)  # texts per call when timing: one request alone, and a small dynamic batch


@dataclass(frozen=True)
class Candidate:
    """One int8 model: a scheme, the accuracy levers it uses, and the weight MatMuls kept in float."""

    scheme: str  # dynamic or static
    float_nodes: tuple[str, ...] = ()
    # SmoothQuant-style activation balancing: "" none, "narrow" every weight MatMul's input but the down
    # projections' (whose wide inputs make the balancing Mul cost most), "all" every one
    smooth: str = ""
    calibration: str = "minmax"  # static only
    why: str = field(default="every weight MatMul in int8", compare=False)  # for the report

    @property
    def label(self) -> str:
        """Short name for tables: ``dynamic``, ``static, percentile, smoothed``, ``dynamic, 4 float``."""
        parts = [self.scheme]
        if self.scheme == "static" and self.calibration != "minmax":
            parts.append(self.calibration)
        if self.smooth:
            parts.append("smoothed" if self.smooth == "all" else "smoothed except down projections")
        if self.float_nodes:
            parts.append(f"{len(self.float_nodes)} float")
        return ", ".join(parts)


@dataclass
class Trial:
    """A candidate built for real and measured by the gate; speeds are filled in at the end of the search."""

    candidate: Candidate
    accuracy: AccuracyReport  # in our ONNX Runtime
    path: Path
    texts_per_s: dict[int, float] = field(default_factory=dict)  # batch size -> texts per second
    speedup: dict[int, float] = field(default_factory=dict)  # batch size -> times FP32, same run
    container: AccuracyReport | None = None  # the gate again in the serving runtime; only after passing ours
    seconds: float = 0.0  # to quantise and gate it, for the console
    quantized: Path | None = None  # the quantiser's own graph, where ``path`` is its rewrite (attention fused)
    fusion: AttentionFusion | None = None  # what the attention fusion did to it

    @property
    def measured(self) -> list[AccuracyReport]:
        """The gate's figures in each runtime it was measured in: ours, then the container's."""
        return [self.accuracy] + ([self.container] if self.container is not None else [])

    @property
    def passed(self) -> bool:
        """Whether the gate passed in every runtime it was measured in."""
        return all(report.passed for report in self.measured)

    @property
    def gated(self) -> AccuracyReport:
        """The figures the verdict stands on: ours, or the container's where it failed only there."""
        return next((report for report in self.measured if not report.passed), self.accuracy)

    @property
    def deciding(self) -> AccuracyReport:
        """The runtime whose figures decided: the first that failed, else the one that cleared the gate by the least."""
        if not self.passed:
            return self.gated
        return min(self.measured, key=lambda report: min(report.margins().values()))


def _figures(accuracy: AccuracyReport) -> str:
    """The gate's figures, in words: mean and minimum cosine, or agreement and the largest probability difference."""
    if accuracy.gate == "cosine":
        return f"mean {accuracy.cosine_mean or 0.0:.4f}, min {accuracy.cosine_min or 0.0:.4f}"
    diff = accuracy.max_probability_diff or 0.0
    return f"agreement {accuracy.label_agreement or 0.0:.2%}, max probability diff {diff:.4f}"


def _cells(accuracy: AccuracyReport | None) -> list[str]:
    """The table's two figures of one runtime: mean and min cosine, or agreement and the mean difference."""
    if accuracy is None:
        return ["–", "–"]
    if accuracy.gate == "cosine":
        return [f"{accuracy.cosine_mean or 0.0:.4f}", f"{accuracy.cosine_min or 0.0:.4f}"]
    return [f"{accuracy.label_agreement or 0.0:.4f}", f"{accuracy.loss or 0.0:.4f}"]


def _figure(accuracy: AccuracyReport) -> float:
    """The gate's headline figure: label agreement, or the mean cosine for embeddings."""
    value = accuracy.label_agreement if accuracy.gate != "cosine" else accuracy.cosine_mean
    return 0.0 if value is None else value


# The search's phases as the card names them, in order; the last two happen within the others.
PHASES = {
    "prepare": "preparing the model",
    "choose": "finding the served candidate",
    "curve": "the trade-off curve",
    "timing": "timing every candidate",
    "container": "the container's re-gate",
    "sensitivity": "ranking the layers",
}
_WITHIN = ("container", "sensitivity")


@dataclass
class SearchReport:
    """Everything the search tried, for the build's console, the model card and build.json."""

    layers: list[WeightMatMul]
    trials: list[Trial] = field(default_factory=list)
    sensitivity: list[LayerSensitivity] = field(default_factory=list)  # the most sensitive first
    fp32_texts_per_s: dict[int, float] = field(default_factory=dict)
    chosen: Trial | None = None
    notes: list[str] = field(default_factory=list)  # levers skipped or unavailable, calibration used
    runtime: str = "ONNX Runtime"  # ours, where every candidate is gated
    served_runtime: str | None = None  # the container's, where candidates that pass ours are gated again
    # Where the search's time went, in seconds, by phase (:data:`PHASES`), for the card and build.json.
    seconds: dict[str, float] = field(default_factory=dict)

    def best(self) -> Trial:
        """The most accurate candidate (the smallest mean difference from FP32), of those measured in full."""
        complete = [trial for trial in self.trials if trial.gated.of_texts is None] or self.trials
        return min(complete, key=lambda trial: trial.gated.loss or 0.0)

    def failure(self) -> AccuracyError:
        """The one-line error when no candidate passed."""
        best = self.best()
        most_float = max(len(trial.candidate.float_nodes) for trial in self.trials)
        return AccuracyError(
            f"accuracy gate failed: no int8 candidate passed ({len(self.trials)} tried, down to {most_float} of "
            f"{len(self.layers)} weight MatMuls in float); the best, {best.gated.summary()}; nothing was published"
        )

    def layer_names(self, nodes: Sequence[str]) -> list[str]:
        """The PyTorch modules the ONNX nodes came from."""
        by_node = {layer.node: layer.layer for layer in self.layers}
        return [by_node.get(node, node) for node in nodes]

    def runtime_of(self, report: AccuracyReport, trial: Trial) -> str:
        """The runtime ``report`` (one of ``trial``'s) was measured in."""
        return (self.served_runtime or "the serving runtime") if report is trial.container else self.runtime

    def decided_by(self, trial: Trial) -> str:
        """The criterion that decided ``trial``, and the container's runtime where it decided there."""
        report = trial.deciding
        where = f" in {self.runtime_of(report, trial)}" if trial.container is not None else ""
        stopped = f" (stopped after {report.texts} of {report.of_texts} texts)" if report.of_texts is not None else ""
        return report.deciding() + where + stopped

    def margins(self, trial: Trial) -> dict[str, dict[str, float]]:
        """Per runtime measured, each criterion's figure minus its floor."""
        return {self.runtime_of(report, trial): report.margins() for report in trial.measured}

    def trial_line(self, trial: Trial) -> str:
        """One line for the console as a candidate finishes: its figures and verdict in each runtime."""
        number = self.trials.index(trial) + 1 if trial in self.trials else len(self.trials) + 1
        parts = [
            f"{self.runtime_of(report, trial)}: {_figures(report)}, {'pass' if report.passed else 'FAIL'}"
            for report in trial.measured
        ]
        verdict = "passes" if trial.passed else "fails"
        return (
            f"INT8 candidate {number}: {trial.candidate.label} {verdict} ({self.decided_by(trial)}); "
            + "; ".join(parts)
            + f"; {trial.seconds:.0f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        """The search as plain data (build.json)."""
        return {
            "chosen": None if self.chosen is None else self.chosen.candidate.label,
            "float_layers": [] if self.chosen is None else self.layer_names(self.chosen.candidate.float_nodes),
            "fp32_texts_per_s": self.fp32_texts_per_s,
            "weight_bits": 7 if int8_weights_saturate() else 8,  # 7 where this CPU's int8 kernels saturate on 8
            "notes": self.notes,
            "seconds": {phase: round(value, 1) for phase, value in self.seconds.items()},
            "runtime": self.runtime,
            "served_runtime": self.served_runtime,
            "margins": None if self.chosen is None else self.margins(self.chosen),
            "trials": [
                {
                    "candidate": trial.candidate.label,
                    "why": trial.candidate.why,
                    "float_layers": self.layer_names(trial.candidate.float_nodes),
                    "accuracy": dataclasses.asdict(trial.accuracy),
                    "container_accuracy": None if trial.container is None else dataclasses.asdict(trial.container),
                    "passed": trial.passed,
                    "decided_by": self.decided_by(trial),
                    "texts_per_s": trial.texts_per_s,
                    "speedup": trial.speedup,
                }
                for trial in self.trials
            ],
            "sensitivity": [
                {"layer": s.layer.layer, "loss": s.accuracy.loss, "figure": _figure(s.accuracy)}
                for s in self.sensitivity
            ],
        }

    def time_line(self) -> str:
        """Where the search's time went, by phase."""
        spent = {phase: self.seconds[phase] for phase in PHASES if self.seconds.get(phase, 0.0) >= 0.5}
        total = sum(v for k, v in self.seconds.items() if k not in _WITHIN)
        line = f"Search time: {total:.0f} s: " + "; ".join(
            f"{PHASES[k]} {v:.0f} s" for k, v in spent.items() if k not in _WITHIN
        )
        within = [f"{PHASES[k]} {v:.0f} s" for k, v in spent.items() if k in _WITHIN]
        return line + (f"; within those, {' and '.join(within)}" if within else "") + "."

    def to_markdown(self, plot_file: str | None = None) -> str:
        """The search as the model card shows it: the choice, the trade-off table, the sensitive layers."""
        lines = ["## INT8 search", ""]
        lines += self._choice_lines()
        lines += self._table_lines()
        lines += self._sensitivity_lines()
        if self.seconds:
            lines += ["", self.time_line()]
        if self.notes:
            lines += [""] + [f"- {note}" for note in self.notes]
        if plot_file:
            lines += ["", f"![accuracy against speed]({plot_file})"]
        return "\n".join(lines) + "\n"

    def _choice_lines(self) -> list[str]:
        if self.chosen is None:
            return []
        chosen = self.chosen
        kept = self.layer_names(chosen.candidate.float_nodes)
        speed = " and ".join(f"{chosen.speedup.get(b, 0.0):.2f}x (batch {b})" for b in SPEED_BATCHES)
        lines = [
            f"Served: **{chosen.candidate.label}** ({chosen.candidate.why}); {chosen.accuracy.summary()}; "
            f"in process in {self.runtime} it runs at {speed} the FP32 model's speed.",
            "",
            self._margin_line(chosen),
            "",
            f"Kept in float: {', '.join(f'`{k}`' for k in kept)}." if kept else "Kept in float: no weight MatMul.",
        ]
        if kept:
            whole = [
                t for t in self.trials if not t.candidate.float_nodes and t.candidate.scheme == chosen.candidate.scheme
            ]
            if whole:
                fastest = max(whole, key=lambda t: t.speedup.get(SPEED_BATCHES[-1], 0.0))
                lines.append(
                    f"Cost of the float layers: {chosen.speedup.get(SPEED_BATCHES[-1], 0.0):.2f}x instead of "
                    f"{fastest.speedup.get(SPEED_BATCHES[-1], 0.0):.2f}x FP32 ({fastest.candidate.label}, which "
                    f"{'passed' if fastest.passed else 'failed'} the gate) at batch {SPEED_BATCHES[-1]}."
                )
        return lines

    def _margin_line(self, chosen: Trial) -> str:
        """How far the served model cleared each floor, in each runtime: a thin margin is worth knowing."""
        parts = [
            f"{runtime}: " + ", ".join(f"{name} {margin:+.4f}" for name, margin in margins.items())
            for runtime, margins in self.margins(chosen).items()
        ]
        if chosen.container is None:
            container = self.served_runtime or "the container's runtime"
            parts.append(f"{container}: not measured")
        return f"Margin to the gate (each figure minus its floor): {'; '.join(parts)}."

    def _table_lines(self) -> list[str]:
        gate = self.trials[0].accuracy.gate if self.trials else "labels"
        names = ("mean cosine", "min cosine") if gate == "cosine" else ("agreement", "mean difference")
        container = any(trial.container is not None for trial in self.trials)
        columns = [*names, *(f"{name}, container" for name in names if container)]
        fp32_cells = ["1.0000", "1.0000" if gate == "cosine" else "0.0000"]
        fp32 = ", ".join(f"{self.fp32_texts_per_s.get(b, 0.0):.1f} at batch {b}" for b in SPEED_BATCHES)
        again = (
            f" Each candidate that passed there was gated again in {self.served_runtime or 'the serving runtime'} "
            "(the container's: columns marked container; – where not measured)." if container else ""
        )  # fmt: skip
        lines = [
            "",
            f"Every candidate tried, in order ({len(self.layers)} weight MatMuls). Accuracy: the gate against FP32 "
            f"PyTorch on {self.trials[0].accuracy.texts if self.trials else 0} validation texts in {self.runtime}."
            f"{again} Decided by: the criterion missed, else the one cleared by the least. Speed: the served "
            f"path in process (tokenizer and {self.runtime}) on this machine, as a multiple of FP32 in the same run "
            f"(FP32: {fp32} texts/s); for the report only: releases differ in which fused operators are fast.",
            "",
            "| candidate | int8 / float layers | "
            + " | ".join(columns + [f"speed, batch {b}" for b in SPEED_BATCHES])
            + " | gate | decided by |",
            "|---|---:|" + "---:|" * (len(columns) + len(SPEED_BATCHES)) + ":---:|---|",
            f"| FP32 | 0 / {len(self.layers)} | "
            + " | ".join(fp32_cells + [""] * (len(columns) - len(names)) + ["1.00x"] * len(SPEED_BATCHES))
            + " | | |",
        ]
        for trial in self.trials:
            floats = len(trial.candidate.float_nodes)
            mark = " **(served)**" if trial is self.chosen else ""
            cells = _cells(trial.accuracy) + (_cells(trial.container) if container else [])
            speeds = [f"{trial.speedup.get(b, 0.0):.2f}x" for b in SPEED_BATCHES]
            lines.append(
                f"| {trial.candidate.label}{mark} | {len(self.layers) - floats} / {floats} | "
                + " | ".join(cells + speeds)
                + f" | {'pass' if trial.passed else 'fail'} | {self.decided_by(trial)} |"
            )
        return lines

    def _sensitivity_lines(self) -> list[str]:
        if not self.sensitivity:
            return []
        subset = self.sensitivity[0].accuracy.texts
        lines = [
            "",
            f"Most sensitive weight MatMuls, each quantised alone (on the {subset} validation texts nearest "
            "FP32's decision boundary):",
            "",
            "| layer | mean difference | agreement / cosine |",
            "|---|---:|---:|",
        ]
        for item in self.sensitivity[:8]:
            lines.append(f"| `{item.layer.layer}` | {item.loss:.4f} | {_figure(item.accuracy):.4f} |")
        return lines

    def plot(self, path: Path) -> None:
        """Accuracy against speed (batch 8) for every candidate, FP32 at (1, 1), the gate as a line."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        batch = SPEED_BATCHES[-1]
        gate = self.trials[0].accuracy.gate if self.trials else "labels"
        figure, axis = plt.subplots(figsize=(7, 4.5))
        if self.chosen is not None:  # the served candidate's levers with 0, 1, 2, ... layers in float: the curve
            levers = dataclasses.replace(self.chosen.candidate, float_nodes=())
            curve = sorted(
                (t for t in self.trials if dataclasses.replace(t.candidate, float_nodes=()) == levers),
                key=lambda t: len(t.candidate.float_nodes),
            )
            xs, ys = [t.speedup.get(batch, 0.0) for t in curve] + [1.0], [_figure(t.gated) for t in curve] + [1.0]
            axis.plot(xs, ys, color="grey", linewidth=0.8, zorder=2)
        for index, trial in enumerate(self.trials):
            x, y = trial.speedup.get(batch, 0.0), _figure(trial.gated)
            star = trial is self.chosen
            color = "tab:green" if trial.passed else "tab:red"
            axis.scatter(x, y, color=color, zorder=3, marker="*" if star else "o", s=140 if star else 30)
            offset = (4, 3 if index % 2 else -9)  # alternate above and below: neighbours often share a height
            axis.annotate(trial.candidate.label, (x, y), fontsize=7, xytext=offset, textcoords="offset points")
        axis.scatter(1.0, 1.0, color="black", marker="s", zorder=3)
        axis.annotate("FP32", (1.0, 1.0), fontsize=7, xytext=(4, -10), textcoords="offset points")
        axis.axhline(LABEL_AGREEMENT_MIN, color="grey", linestyle="--", linewidth=1)
        axis.set_xlabel(f"speed vs FP32 (served path in-process, batch {batch})")
        axis.set_ylabel("mean cosine" if gate == "cosine" else "agreement with FP32 PyTorch")
        axis.set_title("INT8 candidates (green: passed the gate; star: served; line: more layers in float)", fontsize=9)
        axis.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
