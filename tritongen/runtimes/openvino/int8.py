"""OpenVINO INT8 by NNCF: the fastest of a few candidates that passes the gate at every precision.

NNCF's transformer preset quantises every MatMul, the attention products too, and leaves softmax and the norms in
float. On MiniLM that loses too much on single words (min cosine 0.978 against FP32 PyTorch, under the 0.98
floor). The inputs of the feed-forward down projections (a GELU's output, 4x wider than the hidden size) carry the
outliers 8 bits hold worst; kept in float, MiniLM passes (0.988), and still computes 32 documents 1.7x faster
than the sentence-transformers script's ONNX Runtime INT8 on a CPU with BF16, 1.2x at FP32 (docs/benchmarks.md).
So candidates go in the order of their expected speed, and the first that passes is served:

1. every MatMul in INT8 (NNCF's preset);
2. the down projections in float;
3. the down projections and the attention products in float.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.gates.accuracy import AccuracyReport, worst_of

__all__ = ["CANDIDATES", "Int8Candidate", "Int8Trial", "MatMulKind", "float_matmuls", "quantize_ir", "search_int8_ir"]


class MatMulKind(Enum):
    """The MatMuls a candidate may keep in float."""

    DOWN = "down projections"  # a constant weight, wider in than out: the feed-forward output
    ATTENTION = "attention products"  # no constant input: the attention scores and the weighted values


@dataclass(frozen=True)
class Int8Candidate:
    """One way to quantise: the kinds of MatMul it keeps in float."""

    keeps: tuple[MatMulKind, ...] = ()

    @property
    def label(self) -> str:
        """``every MatMul in INT8``, or ``the down projections in float``."""
        return f"the {' and the '.join(k.value for k in self.keeps)} in float" if self.keeps else "every MatMul in INT8"


CANDIDATES = (
    Int8Candidate(),
    Int8Candidate((MatMulKind.DOWN,)),
    Int8Candidate((MatMulKind.DOWN, MatMulKind.ATTENTION)),
)


@dataclass(frozen=True)
class Int8Trial:
    """A candidate built and gated: its gate at each precision, and how many MatMuls it kept in float."""

    candidate: Int8Candidate
    reports: tuple[AccuracyReport, ...]
    kept: int
    there: tuple[AccuracyReport, ...] = ()  # the gate again where it will be served, once it passed here

    @property
    def passed(self) -> bool:
        """Whether it passed at every precision, here and where it will be served."""
        return all(report.passed for report in (*self.reports, *self.there))

    @property
    def worst(self) -> AccuracyReport:
        """Its worst figures over the precisions."""
        return worst_of(self.reports)

    def line(self) -> str:
        """One line for the console and the card."""
        kept = f", {self.kept} MatMul{'s' if self.kept > 1 else ''} in float" if self.kept else ""
        return f"INT8 candidate, {self.candidate.label}{kept}: {'passed' if self.passed else 'refused'}, " + (
            "; ".join(report.summary() for report in (*self.reports, *self.there))
        )


def float_matmuls(model: Any, kinds: Collection[MatMulKind]) -> list[str]:
    """The names of ``model``'s MatMuls of ``kinds``."""
    names = []
    for op in model.get_ops():
        if op.get_type_name() != "MatMul":
            continue
        constant = any(op.input_value(i).get_node().get_type_name() in ("Constant", "Convert") for i in range(2))
        kind: MatMulKind | None = MatMulKind.ATTENTION
        if constant:
            width_in, width_out = op.input_value(0).get_partial_shape()[-1], op.get_output_partial_shape(0)[-1]
            static = width_in.is_static and width_out.is_static
            kind = MatMulKind.DOWN if static and width_in.get_length() > width_out.get_length() else None
        if kind in kinds:
            names.append(op.get_friendly_name())
    return names


def quantize_ir(
    xml_path: Path, target: Path, feeds: Sequence[Mapping[str, np.ndarray]], kept: Collection[str] = ()
) -> str:
    """Post-training INT8 of the IR at ``xml_path`` into ``target`` with NNCF; return NNCF's version.

    NNCF's transformer preset: MatMul weights per channel and activations calibrated on ``feeds`` (model inputs,
    one text each), with the ops that lose accuracy in INT8 (softmax, layer norms...) left in float, and the
    MatMuls named in ``kept`` too (:func:`float_matmuls`). The result is IR with FakeQuantize nodes, which the CPU
    plugin runs as INT8 kernels (VNNI/AMX where the CPU has them) and which any OpenVINO since 2022 reads.
    """
    import logging

    import nncf
    import openvino as ov

    nncf.set_log_level(logging.ERROR)
    quantized = nncf.quantize(
        ov.Core().read_model(str(xml_path)),
        nncf.Dataset(list(feeds)),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(feeds),
        **({"ignored_scope": nncf.IgnoredScope(names=list(kept))} if kept else {}),
    )
    ov.save_model(quantized, str(target), compress_to_fp16=False)
    return str(nncf.__version__)


def search_int8_ir(
    fp32_xml: Path,
    target: Path,
    feeds: Sequence[Mapping[str, np.ndarray]],
    gate: Callable[[Path, Int8Candidate], Sequence[AccuracyReport]],
    served: Callable[[Path], Sequence[AccuracyReport]] | None = None,
    announce: Callable[[str], None] = lambda _: None,
    status: Callable[[Int8Candidate], None] = lambda _: None,
) -> tuple[list[Int8Trial], Int8Trial, str]:
    """Quantise ``fp32_xml`` as :data:`CANDIDATES` say, in order, until one passes ``gate`` (at every precision).

    ``served``, when set, gates a candidate that passed here again where it will be served (the target container's
    OpenVINO); it must pass there too.

    The chosen candidate (the first that passed, else the most accurate) is written to ``target``
    (``model.xml`` and its ``.bin``). Returns every trial, the chosen one and NNCF's version. ``status`` hears of
    each candidate as it is quantised, ``announce`` gets each trial's line.
    """
    import openvino as ov

    model = ov.Core().read_model(str(fp32_xml))
    work = target.parent / "_int8_candidates"
    work.mkdir(parents=True, exist_ok=True)
    trials: list[tuple[Int8Trial, Path]] = []
    version, tried = "", None
    try:
        for index, candidate in enumerate(CANDIDATES):
            kept = float_matmuls(model, candidate.keeps)
            if set(kept) == tried:  # nothing more of its kinds to keep: the same model as the one tried before
                continue
            tried, path = set(kept), work / f"candidate_{index}.xml"
            status(candidate)
            version = quantize_ir(fp32_xml, path, feeds, kept)
            reports = tuple(gate(path, candidate))
            passed_here = all(report.passed for report in reports)
            there = tuple(served(path)) if served is not None and passed_here else ()
            trial = Int8Trial(candidate, reports, len(kept), there)
            announce(trial.line())
            trials.append((trial, path))
            if trial.passed:
                break
        passed = [(t, p) for t, p in trials if t.passed]
        chosen, path = passed[0] if passed else max(trials, key=lambda item: min(item[0].worst.margins().values()))
        shutil.copyfile(path, target)
        shutil.copyfile(path.with_suffix(".bin"), target.with_suffix(".bin"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [trial for trial, _ in trials], chosen, version
