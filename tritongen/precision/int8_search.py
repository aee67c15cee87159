"""Find the fastest int8 model that passes the accuracy gate: across schemes, levers and layers.

A user who asks for int8 wants the fastest model that keeps the gate, not a refusal, and should not
have to know which scheme to try. Candidates are tried in the order of their expected speed on ONNX
Runtime's CPU provider, and the first that passes the gate on the full validation set is served:

1. **Whole models**, every weight MatMul in int8 with per-channel weights, per scheme (``dynamic``:
   activations quantised per batch at run time, the fastest here; then ``static``: QDQ, activations
   calibrated, what TensorRT takes), each with its accuracy levers in turn: plain, SmoothQuant-style
   activation balancing (``tritongen.precision.smoothquant``), and for static percentile calibration on a
   bounded sample. Calibration texts are the calibration sample, drawn from the same tweets and news as
   the built-in validation texts but disjoint from them.
2. **Mixed**: the fastest scheme, with its most accurate lever, keeps its most sensitive weight
   MatMuls in float. Each MatMul's sensitivity is the difference it causes when it alone is int8, on the
   validation texts nearest FP32's decision boundary (``tritongen.precision.sensitivity``, one switch model,
   no rebuild per layer). The 1, 2, 4, ... most sensitive stay in float until the gate passes, then the
   count is bisected down. Only the verdict decides these steps, so each one's gate stops as soon as the
   candidate can no longer pass, running first the texts the last candidate did worst on.

Every candidate is gated against the same FP32 PyTorch reference (dynamic ones both one text at a time
and in batches, since their activation scales depend on the batch). At the end all of them are timed
in-process on the served path against FP32, for the model card's trade-off table and plot only: the
choice follows the expected speed order, not a timing on a machine that may be busy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritongen.errors import ExportError, describe
from tritongen.gates.accuracy import AccuracyReport, GateReference
from tritongen.precision.fusion import AttentionFusion, check_feeds, fuse_attention
from tritongen.precision.int8_report import SPEED_BATCHES, Candidate, SearchReport, Trial
from tritongen.precision.optimize import (
    HISTOGRAM_TEXTS,
    Int8Recipe,
    prepare_for_quantization,
    quantize_int8,
    weight_matmuls,
)
from tritongen.precision.sensitivity import build_switch_model, measure_sensitivity, rank_layers
from tritongen.precision.smoothquant import SMOOTHING_TEXTS, smooth_activations

__all__ = [
    "SCHEMES",
    "Candidate",
    "SearchFeedback",
    "SearchReport",
    "SearchSettings",
    "ServedGate",
    "Trial",
    "search_int8",
    "smallest_passing",
]

SCHEMES = ("dynamic", "static")  # expected speed on the CPU execution provider, fastest first
SENSITIVITY_TEXTS = 32  # texts nearest the decision boundary, for the per-layer measurements
CALIBRATION_TEXTS = 128  # min-max calibration streams; more texts only cost time
SMOOTHING_ALPHA = 0.75  # how much of the activations' range moves into the weights (0.5 in the paper)
# After the choice, for the model card's trade-off curve only: the served candidate with this many of its
# most sensitive weight MatMuls (also) in float, and every scheme's whole model. Empty: no curve.
CURVE_FLOAT_COUNTS = (1, 2, 4)
# Without an explicit setting the curve is measured for models of at most this many bytes of FP32 ONNX (about
# 50M parameters: MiniLM-sized). On a base-size model each of its candidates is one more gate of minutes.
CURVE_AUTO_BYTES = 200_000_000


def smallest_passing(limit: int, passes: Callable[[int], bool]) -> int | None:
    """A small count in 1..``limit`` that ``passes``: 1, 2, 4, ... until one passes, then bisection.

    Bisection stops within a quarter of the count (every step is a build and a gate). More layers in
    float help accuracy in expectation, not in every case, so the answer is the smallest passing count
    this walk finds, not necessarily the smallest that exists.
    """
    failed, count = 0, 1
    while True:
        count = min(count, limit)
        if count <= failed:
            return None
        if passes(count):
            break
        failed, count = count, count * 2
    passed = count
    while passed - failed > max(1, passed // 4):  # within a quarter is close enough: each step is a build
        middle = (failed + passed) // 2
        if passes(middle):
            passed = middle
        else:
            failed = middle
    return passed


def _quiet(line: str) -> None:
    """Say nothing."""


@dataclass(frozen=True)
class ServedGate:
    """The gate again in the runtime that will serve the model: the container's ONNX Runtime (``gates.compat``).

    ``measure(path, label, batch_dependent)`` gates a candidate that passed here; it must pass there as well, and
    the trial records both runtimes' figures. ``runtime`` names that runtime in the report.
    """

    measure: Callable[[Path, str, bool], AccuracyReport]
    runtime: str | None = None


@dataclass(frozen=True)
class SearchSettings:
    """What one INT8 search measures with and may try, bound once per build.

    ``reference`` is the gate; ``encoder`` the served tokenizer; ``calibration`` the calibration texts.
    ``schemes`` are the schemes allowed, fastest first (one when the user pinned it); ``symmetric`` gives int8
    activations for TensorRT. ``baseline`` is the FP32 model speeds are compared with (default: the source,
    which may carry fusions), timed on ``speed_texts``. When nothing passes, the most accurate candidate is
    written only with ``accept_loss``. ``curve`` adds candidates after the choice, for the model card's
    trade-off curve only (None: for small models only, :data:`CURVE_AUTO_BYTES`). ``served``, when set, gates
    every candidate that passed here again where it will run. ``fuse_attention`` rewrites each dynamic
    candidate's attention blocks as one operator each before it is gated, where the outputs stay the same.
    """

    reference: GateReference
    encoder: Any
    calibration: Sequence[str]
    schemes: Sequence[str] = SCHEMES
    symmetric: bool = False
    baseline: Path | None = None
    speed_texts: Sequence[str] = ()
    accept_loss: bool = False
    curve: bool | None = True  # None: only for a source of at most CURVE_AUTO_BYTES
    served: ServedGate | None = None
    fuse_attention: bool = True  # dynamic candidates' attention as QAttention (CPU; ``tritongen.precision.fusion``)


@dataclass(frozen=True)
class SearchFeedback:
    """What a search of minutes shows while it runs.

    ``status`` gets what the search is doing now (a spinner's text); ``announce`` gets one line per candidate
    as it is decided, with its figures.
    """

    status: Callable[[str], None] = _quiet
    announce: Callable[[str], None] = _quiet


def search_int8(
    source: Path, target: Path, settings: SearchSettings, feedback: SearchFeedback = SearchFeedback()
) -> SearchReport:
    """Write the first int8 quantisation of ``source`` (in expected speed order) that passes the gate to ``target``.

    When nothing passes, ``chosen`` is the most accurate candidate, written only with ``settings.accept_loss``;
    ``SearchReport.failure`` is the error.
    """
    work = target.resolve().parent / "_int8_search"
    work.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    try:
        with _timed(seconds, "prepare"):
            search = _Search(source, work, settings, feedback)
        search.report.seconds = seconds
        with _timed(seconds, "choose"):
            chosen = search.run(settings.schemes)
        if chosen is not None and _wants_curve(settings.curve, source, search.report) and CURVE_FLOAT_COUNTS:
            try:
                with _timed(seconds, "curve"):
                    search.explore(chosen, settings.schemes)
            except Exception as exc:  # the curve only informs; a quantiser failure there must not lose the choice
                search.report.notes.append(f"The trade-off curve stopped early: {describe(exc)}.")
        report = search.report
        report.chosen = chosen or (report.best() if report.trials else None)
        report.notes += search.notes()
        feedback.status("INT8 search: timing the candidates against FP32…")
        with _timed(seconds, "timing"):
            _time_trials(report, settings.baseline or source, settings.encoder, settings.speed_texts)
        feedback.announce(report.time_line())
        if report.chosen is not None and (report.chosen.passed or settings.accept_loss):
            shutil.copyfile(report.chosen.path, target)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


class _Search:
    """The state of one search: the prepared model, its weight MatMuls, and every trial so far."""

    def __init__(self, source: Path, work: Path, settings: SearchSettings, feedback: SearchFeedback) -> None:
        import onnxruntime as ort

        self.work, self.settings, self.feedback, self.failed_there = work, settings, feedback, 0
        calibration = settings.calibration
        self.calibration = list(calibration[:: -(-len(calibration) // CALIBRATION_TEXTS) or 1])  # spread over the file
        feedback.status("INT8 search: preparing the model…")
        self.prepared = prepare_for_quantization(source, work)
        self.report = SearchReport(
            layers=weight_matmuls(self.prepared), runtime=f"ONNX Runtime {ort.__version__}",
            served_runtime=settings.served.runtime if settings.served is not None else None,
        )  # fmt: skip
        if not self.report.layers:
            raise ExportError("the model has no MatMul with a constant weight, which is what int8 quantises")
        feedback.announce(
            f"INT8 search: {len(self.report.layers)} weight MatMuls; candidates in expected speed order, each gated "
            f"on {settings.reference.count} validation texts; the first that passes is served"
        )
        self._smoothed: dict[str, Path] = {}
        self.fusion_feeds = check_feeds(settings.encoder, list(settings.speed_texts) or self.calibration)
        self.fusion_checked: AttentionFusion | None = None  # the first fused candidate's check, which the rest take

    def notes(self) -> list[str]:
        """How the levers that were used were set up, for the report."""
        used = [trial.candidate for trial in self.report.trials]
        notes = []
        if any(c.scheme == "static" for c in used):
            notes.append(
                f"Static calibration: min-max over {len(self.calibration)} texts"
                + (f"; percentile (99.999th) over at most {HISTOGRAM_TEXTS} of them, as histograms hold every "
                   "activation" if any(c.calibration == "percentile" for c in used) else "")
                + "."
            )  # fmt: skip
        if any(c.smooth for c in used):
            notes.append(
                f"Activation balancing: SmoothQuant-style, alpha {SMOOTHING_ALPHA}, activation ranges over "
                f"{min(len(self.calibration), SMOOTHING_TEXTS)} calibration texts (ONNX Runtime's own SmoothQuant "
                "needs Intel Neural Compressor, which is not installed)."
            )
        if self.settings.served is not None:
            notes.append(
                "Every candidate that passed here was gated again in the serving runtime (the target Triton "
                f"container's ONNX Runtime); {self.failed_there} passed here and failed there."
            )
        fusion = None if self.report.chosen is None else self.report.chosen.fusion
        if fusion is not None and fusion.note():
            notes.append(fusion.note())
        if self.report.sensitivity:
            notes.append(
                "Sensitivity: each weight MatMul alone in int8 (the others float), ranked by the mean difference "
                "it causes; measured with one switch model, so no layer needs its own build."
            )
        return notes

    @property
    def nodes(self) -> list[str]:
        """Every weight MatMul."""
        return [layer.node for layer in self.report.layers]

    def run(self, schemes: Sequence[str]) -> Trial | None:
        """The first candidate that passes, in expected speed order; None when none does."""
        for scheme in schemes:
            passed = self.whole_models(scheme)
            if passed is not None:
                return passed
        return self.mixed(schemes[0])

    def float_model(self, smooth: str) -> Path:
        """The float model a candidate quantises: the prepared one, or a balanced version (each made once).

        ``smooth`` ``all`` balances every weight MatMul's input; ``narrow`` all but the down projections'.
        """
        if not smooth:
            return self.prepared
        if smooth not in self._smoothed:
            self.feedback.status("INT8 search: balancing activations (SmoothQuant)…")
            nodes = [layer.node for layer in self.report.layers if smooth == "all" or not layer.down_projection]
            self._smoothed[smooth] = self.work / f"smoothed_{smooth}.onnx"
            smooth_activations(
                self.prepared, self._smoothed[smooth], nodes=nodes, encoder=self.settings.encoder,
                texts=self.calibration, alpha=SMOOTHING_ALPHA,
            )  # fmt: skip
        return self._smoothed[smooth]

    def attempt(self, candidate: Candidate, *, until_failed: bool = False) -> Trial:
        """Build ``candidate`` for real and gate it on the full validation set; announce its figures.

        ``until_failed``: the gate stops once the candidate can no longer pass (its verdict decided; its figures
        then cover the texts run), for candidates whose figures decide nothing beyond pass or fail.
        """
        start = time.perf_counter()
        self.feedback.status(f"INT8 search: {candidate.label} (candidate {len(self.report.trials) + 1})…")
        path = self.work / f"candidate_{len(self.report.trials)}.onnx"
        int8_nodes = [node for node in self.nodes if node not in set(candidate.float_nodes)]
        recipe = Int8Recipe(
            candidate.scheme, int8_nodes, self.settings.encoder, self.calibration, self.settings.symmetric,
            candidate.calibration,
        )  # fmt: skip
        dynamic = candidate.scheme == "dynamic"
        checked = self.fusion_checked
        fuse = dynamic and self.settings.fuse_attention and bool(self.fusion_feeds)
        fuse = fuse and (checked is None or bool(checked.blocks))
        quantized = path.with_name(f"{path.stem}_quantized.onnx") if fuse else path
        quantize_int8(self.float_model(candidate.smooth), quantized, recipe)
        # Only the int8 blocks: a block kept in float stays as the gate's layer choices left it. The rewrite is
        # checked once: the candidates differ only in their numbers, and each is gated as it is served.
        feeds = self.fusion_feeds if checked is None else []
        fusion = fuse_attention(quantized, path, feeds, ("QAttention",)) if fuse else None
        if checked is None and fusion is not None:
            self.fusion_checked = fusion  # nothing matched, or refused: later candidates are not rewritten either
        unfused = quantized if fusion is not None and fusion.blocks else None  # what the switch model reads
        if fuse and unfused is None:
            quantized.unlink()
        accuracy = self.settings.reference.measure(
            path, f"INT8 {candidate.label}", batch_dependent=dynamic, until_failed=until_failed
        )
        there, served = None, self.settings.served
        if accuracy.passed and served is not None:  # what serves it must pass too
            self.feedback.status(f"INT8 search: {candidate.label} in {served.runtime or 'the serving runtime'}…")
            with _timed(self.report.seconds, "container"):
                there = served.measure(path, f"INT8 {candidate.label}", dynamic)
            if not there.passed:
                self.failed_there += 1
        seconds = time.perf_counter() - start
        trial = Trial(candidate, accuracy, path, container=there, seconds=seconds, quantized=unfused, fusion=fusion)
        self.feedback.announce(self.report.trial_line(trial))
        self.report.trials.append(trial)
        return trial

    def whole_models(self, scheme: str) -> Trial | None:
        """Every weight MatMul of ``scheme`` in int8, lever after lever; the first that passes."""
        plain = self.attempt(Candidate(scheme))
        if plain.passed:
            return plain
        downs = {layer.down_projection for layer in self.report.layers}
        if downs == {True, False}:  # the cheaper balancing first: the down projections' wide inputs left as they are
            why = "every weight MatMul in int8, activations balanced but the down projections' inputs"
            narrow = self.attempt(Candidate(scheme, smooth="narrow", why=why))
            if narrow.passed:
                return narrow
        smoothed = self.attempt(
            Candidate(scheme, smooth="all", why="every weight MatMul in int8, activations balanced")
        )
        if smoothed.passed or scheme != "static":
            return smoothed if smoothed.passed else None
        smooth = "all" if (smoothed.gated.loss or 0.0) < (plain.gated.loss or 0.0) else ""
        why = "every weight MatMul in int8, percentile calibration" + (", activations balanced" if smooth else "")
        percentile = self.attempt(Candidate(scheme, smooth=smooth, calibration="percentile", why=why))
        return percentile if percentile.passed else None

    def mixed(self, scheme: str) -> Trial | None:
        """Keep the most sensitive weight MatMuls of ``scheme``'s most accurate whole model in float."""
        wholes = [t for t in self.report.trials if t.candidate.scheme == scheme and not t.candidate.float_nodes]
        base = min(wholes, key=lambda t: t.gated.loss or 0.0).candidate
        ranked = self.ranked_layers(base)
        tried: dict[int, Trial] = {}

        # Only the verdict matters here, so a failing candidate stops early; unless the most accurate candidate
        # may be served when none passes, which takes every candidate's full figures.
        until_failed = not self.settings.accept_loss

        def passes(count: int) -> bool:
            tried[count] = self.attempt(self.with_float(base, ranked[:count]), until_failed=until_failed)
            return tried[count].passed

        count = smallest_passing(len(ranked) - 1, passes)
        return None if count is None else tried[count]

    def ranked_layers(self, base: Candidate) -> list[str]:
        """The weight MatMuls, the most sensitive first, measured (once) on ``base``'s whole int8 model."""
        if not self.report.sensitivity:
            with _timed(self.report.seconds, "sensitivity"):
                self._rank(base)
        return [item.layer.node for item in self.report.sensitivity]

    def _rank(self, base: Candidate) -> None:
        """Measure every weight MatMul's sensitivity on ``base``'s whole int8 model, into the report."""
        whole = next(t for t in self.report.trials if t.candidate == base)  # built before any layer search
        self.feedback.status("INT8 search: building the sensitivity model…")
        switch = build_switch_model(
            self.float_model(base.smooth), whole.quantized or whole.path, self.work / "switch.onnx", scheme=base.scheme
        )
        sensitivities = measure_sensitivity(
            switch, self.report.layers, self.settings.reference.subset(SENSITIVITY_TEXTS), batch_dependent=False,
            progress=lambda message: self.feedback.status(f"INT8 search: {message}…"),
        )  # fmt: skip
        self.report.sensitivity = rank_layers(sensitivities)
        switch.path.unlink(missing_ok=True)
        top = ", ".join(item.layer.layer for item in self.report.sensitivity[:3])
        self.feedback.announce(
            f"INT8 search: {len(sensitivities)} weight MatMuls ranked by sensitivity; the most: {top}"
        )

    @staticmethod
    def with_float(base: Candidate, nodes: Sequence[str]) -> Candidate:
        """``base`` with ``nodes`` kept in float."""
        why = f"the {len(nodes)} most sensitive weight MatMuls in float"
        return Candidate(base.scheme, tuple(nodes), base.smooth, base.calibration, why=why)

    def explore(self, chosen: Trial, schemes: Sequence[str]) -> None:
        """For the trade-off curve only: every scheme's whole model, and ``chosen`` with more layers in float."""
        for scheme in schemes:
            if all(trial.candidate != Candidate(scheme) for trial in self.report.trials):
                self.attempt(Candidate(scheme, why="every weight MatMul in int8 (tried for the curve)"))
        base = dataclasses.replace(chosen.candidate, float_nodes=())
        ranked = self.ranked_layers(base)
        done = {len(t.candidate.float_nodes) for t in self.report.trials if t.candidate.scheme == base.scheme}
        for count in CURVE_FLOAT_COUNTS:
            if len(chosen.candidate.float_nodes) < count < len(ranked) and count not in done:
                self.attempt(self.with_float(base, ranked[:count]))


def _wants_curve(curve: bool | None, source: Path, report: SearchReport) -> bool:
    """Whether to measure the trade-off curve; where the default says no, the report says why and how."""
    if curve is not None:
        return curve
    size = source.stat().st_size
    if size <= CURVE_AUTO_BYTES:
        return True
    report.notes.append(
        f"The trade-off curve was not measured: the model has {size / 1e6:.0f} MB of FP32 weights (over "
        f"{CURVE_AUTO_BYTES / 1e6:.0f} MB), where its extra candidates cost more than the search; `--int8-curve` "
        "measures it."
    )
    return False


@contextlib.contextmanager
def _timed(seconds: dict[str, float], phase: str) -> Iterator[None]:
    """Add the time the block takes to ``seconds[phase]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds[phase] = seconds.get(phase, 0.0) + time.perf_counter() - start


def _time_trials(report: SearchReport, baseline: Path, encoder: Any, texts: Sequence[str]) -> None:
    """Texts per second of FP32 and every trial on the served path in-process; for the report only.

    Interleaved rounds, the best of each: FP32 and the served model get two, the others one.
    """
    import onnxruntime as ort

    if not texts:
        return
    paths = [baseline] + [trial.path for trial in report.trials]
    twice = [baseline] + ([report.chosen.path] if report.chosen is not None else [])
    best = {(path, batch): 0.0 for path in paths for batch in SPEED_BATCHES}
    for round_paths in (paths, twice):
        for path in round_paths:
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            for batch in SPEED_BATCHES:
                best[path, batch] = max(best[path, batch], _texts_per_s(session, encoder, texts, batch))
    report.fp32_texts_per_s = {batch: best[baseline, batch] for batch in SPEED_BATCHES}
    for trial in report.trials:
        trial.texts_per_s = {batch: best[trial.path, batch] for batch in SPEED_BATCHES}
        trial.speedup = {
            batch: trial.texts_per_s[batch] / report.fp32_texts_per_s[batch] if report.fp32_texts_per_s[batch] else 0.0
            for batch in SPEED_BATCHES
        }


def _texts_per_s(session: Any, encoder: Any, texts: Sequence[str], batch: int) -> float:
    """One timed pass over ``texts`` in calls of ``batch`` texts, tokenizer included, after one warm-up call."""
    session.run(None, encoder(list(texts[:batch])))
    start = time.perf_counter()
    for index in range(0, len(texts), batch):
        session.run(None, encoder(list(texts[index : index + batch])))
    return len(texts) / (time.perf_counter() - start)
