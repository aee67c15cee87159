"""The accuracy gate: an optimised or quantised model must stay close to FP32 PyTorch.

The candidate runs the served path (the tokenizer model's ``TextEncoder`` with bucket
padding, then ONNX Runtime, batched) on validation texts; the reference is the FP32
PyTorch module on the checkpoint's own tokenizer output. Classification needs >= 99% label
agreement (the largest probability difference is reported), token classification >= 99%
per real token, QA >= 99% of texts with the same most likely start and end token;
embeddings need a mean cosine >= 0.99 and a minimum >= 0.98.

``GateReference`` holds the PyTorch outputs, computed once, so that a search can measure many
candidate models; ``measure_accuracy`` is the one-off form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tritongen.contract import ATTENTION_MASK
from tritongen.errors import AccuracyError, SpecError
from tritongen.gates.parity import ReferenceModel
from tritongen.steps.postprocess import activate
from tritongen.vectors import softmax

__all__ = [
    "GATES",
    "AccuracyReport",
    "CosineGate",
    "Gate",
    "GateReference",
    "LabelGate",
    "SpanGate",
    "TokenCosineGate",
    "TokenLabelGate",
    "default_texts",
    "measure_accuracy",
    "read_texts",
    "require_accuracy",
    "worst_of",
]

LABEL_AGREEMENT_MIN = 0.99
COSINE_MEAN_MIN = 0.99
COSINE_MIN_MIN = 0.98


_AGREEMENT_NAMES = {
    "labels": "label agreement",
    "token_labels": "per-token label agreement",
    "spans": "answer start/end agreement",
}


@dataclass(frozen=True)
class AccuracyReport:
    """Figures of one comparison against FP32 PyTorch (``gate`` is one of :data:`GATES`)."""

    variant: str
    gate: str
    texts: int
    label_agreement: float | None = None
    max_probability_diff: float | None = None
    cosine_mean: float | None = None
    cosine_min: float | None = None
    # A continuous measure of the difference (lower is better), to rank candidates that agree equally:
    # the mean over texts of the largest probability difference, or 1 - mean cosine for embeddings.
    loss: float | None = None
    # Set where the measuring stopped once the gate could no longer pass: the texts there were, of which the
    # figures cover ``texts`` (the worst first).
    of_texts: int | None = None

    @property
    def passed(self) -> bool:
        """Whether the figures are within the gate."""
        if self.gate != "cosine":
            return (self.label_agreement or 0.0) >= LABEL_AGREEMENT_MIN
        return (self.cosine_mean or 0.0) >= COSINE_MEAN_MIN and (self.cosine_min or 0.0) >= COSINE_MIN_MIN

    def criteria(self) -> list[tuple[str, float, float]]:
        """Each figure the gate holds to a floor, as (name, figure, floor)."""
        if self.gate != "cosine":
            return [("agreement", self.label_agreement or 0.0, LABEL_AGREEMENT_MIN)]
        return [("mean", self.cosine_mean or 0.0, COSINE_MEAN_MIN), ("min", self.cosine_min or 0.0, COSINE_MIN_MIN)]

    def margins(self) -> dict[str, float]:
        """Each criterion's figure minus its floor: how far the gate was cleared (negative: missed)."""
        return {name: value - floor for name, value, floor in self.criteria()}

    def deciding(self) -> str:
        """The criterion that decided: each one missed, else the one cleared by the least (``min 0.9768 < 0.98``)."""
        criteria = self.criteria()
        missed = [c for c in criteria if c[1] < c[2]]
        shown = missed or [min(criteria, key=lambda c: c[1] - c[2])]
        return ", ".join(
            f"{name} {self.figure_text(value)} {'<' if value < floor else '>='} {self.figure_text(floor, floor=True)}"
            for name, value, floor in shown
        )

    def figure_text(self, value: float, *, floor: bool = False) -> str:
        """A figure as tables show it: agreement in percent, cosines to 4 decimals (floors as they are set)."""
        if self.gate != "cosine":
            return f"{value:.0%}" if floor else f"{value:.2%}"
        return f"{value:g}" if floor else f"{value:.4f}"

    def summary(self) -> str:
        """One line with the figures and the thresholds."""
        if self.gate != "cosine":
            figures = (
                f"{_AGREEMENT_NAMES[self.gate]} {self.label_agreement:.2%} (gate >= {LABEL_AGREEMENT_MIN:.0%}), "
                f"max probability diff {self.max_probability_diff:.4f}"
            )
        else:
            figures = (
                f"cosine mean {self.cosine_mean:.4f} (gate >= {COSINE_MEAN_MIN}), "
                f"min {self.cosine_min:.4f} (gate >= {COSINE_MIN_MIN})"
            )
        texts = f"{self.texts} validation texts"
        if self.of_texts is not None:
            texts = f"{self.texts} of {self.of_texts} validation texts (stopped: it could no longer pass)"
        return f"{self.variant} vs FP32 PyTorch on {texts}: {figures}"

    def to_markdown(self, *, accepted: bool = False) -> str:
        """The figures for the model card."""
        verdict = "PASSED" if self.passed else "FAILED"
        if not self.passed and accepted:
            verdict += " (accepted with --accept-accuracy-loss)"
        return f"Accuracy gate: **{verdict}** — {self.summary()}.\n"


class Gate:
    """How one task's outputs are compared with FP32 PyTorch's: a task entry names its gate class.

    ``reference`` and ``candidate`` are one batch of model outputs, ``mask`` its real tokens; the candidate
    may be wider (padded to a length bucket). ``function`` is the activation the ``labels`` gate compares.
    """

    name: ClassVar[str]
    parity_argmax_axis: ClassVar[int] = -1  # the axis the parity check compares argmaxes along
    by_margin: ClassVar[bool] = True  # whether a subset picks the texts FP32 decides by the smallest margin

    def __init__(self, function: str = "softmax") -> None:
        self.function = function

    def probabilities(self, outputs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The outputs as the probabilities whose argmax must agree."""
        raise NotImplementedError

    def agreement(self, reference: np.ndarray, candidate: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Per text (or token) whether the argmax agrees."""
        return reference.argmax(-1) == candidate.argmax(-1)

    def margins(self, reference: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Per text, how far FP32's decision is from flipping (the smallest top-two probability gap)."""
        top = np.sort(self.probabilities(reference, mask), axis=-1)
        gap = top[..., -1] - top[..., -2] if top.shape[-1] > 1 else np.abs(top[..., -1] - 0.5)
        return gap.reshape(len(reference), -1).min(-1)

    def compare(self, reference: np.ndarray, candidate: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
        """The figures of one batch: agreement, and the largest probability difference per text."""
        ref_p = self.probabilities(reference, mask)
        cand_p = self.probabilities(candidate[:, : mask.shape[1]] if candidate.ndim > 2 else candidate, mask)
        diff = np.abs(ref_p - cand_p).reshape(len(ref_p), -1).max(-1)
        return self.agreement(ref_p, cand_p, mask), diff

    def report(self, variant: str, texts: int, figures: Sequence[tuple[np.ndarray, ...]]) -> AccuracyReport:
        """The report of all batches' figures."""
        agree = np.concatenate([f[0] for f in figures])
        diff = np.concatenate([f[1] for f in figures])
        return AccuracyReport(
            variant=variant, gate=self.name, texts=texts, label_agreement=float(agree.mean()),
            max_probability_diff=float(diff.max()), loss=float(diff.mean()),
        )  # fmt: skip


class LabelGate(Gate):
    """One label per text: the argmax of ``function``-activated outputs (classification)."""

    name = "labels"

    def probabilities(self, outputs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The task's activation of the logits."""
        return activate(outputs, self.function)


class TokenLabelGate(Gate):
    """One label per real token: the softmax argmax (token classification)."""

    name = "token_labels"

    def probabilities(self, outputs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Softmax over the labels, real tokens only (flattened)."""
        return softmax(outputs)[mask]

    def margins(self, reference: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Per text, the smallest gap over its real tokens."""
        top = np.sort(softmax(reference), axis=-1)
        gap = np.where(mask, top[..., -1] - top[..., -2] if top.shape[-1] > 1 else np.abs(top[..., -1] - 0.5), np.inf)
        return gap.reshape(len(reference), -1).min(-1)


class SpanGate(Gate):
    """The most likely start and end token per text (question answering: ``[batch, seq, 2]`` logits)."""

    name = "spans"
    parity_argmax_axis = 0

    def probabilities(self, outputs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Softmax over the real tokens of each text, for start and end."""
        return _token_softmax(outputs, mask)

    def agreement(self, reference: np.ndarray, candidate: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Whether both the start and the end token agree."""
        return (reference.argmax(1) == candidate.argmax(1)).all(-1)

    def margins(self, reference: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Per text, the smaller top-two gap of start and end."""
        top = np.sort(_token_softmax(reference, mask).transpose(0, 2, 1), axis=-1)  # [batch, 2, seq]
        return (top[..., -1] - top[..., -2]).reshape(len(reference), -1).min(-1)


class CosineGate(Gate):
    """Embeddings: the cosine of each text's vector with FP32's."""

    name = "cosine"
    by_margin = False

    def margins(self, reference: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """No decision to flip: every text counts the same."""
        return np.zeros(len(reference))

    def compare(self, reference: np.ndarray, candidate: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
        """The cosine per text."""
        norms = np.linalg.norm(reference, axis=-1) * np.linalg.norm(candidate, axis=-1)
        return ((reference * candidate).sum(-1) / np.maximum(norms, 1e-12),)

    def report(self, variant: str, texts: int, figures: Sequence[tuple[np.ndarray, ...]]) -> AccuracyReport:
        """Mean and minimum cosine."""
        cosine = np.concatenate([f[0] for f in figures])
        return AccuracyReport(
            variant=variant, gate=self.name, texts=texts, cosine_mean=float(cosine.mean()),
            cosine_min=float(cosine.min()), loss=float(1.0 - cosine.mean()),
        )  # fmt: skip


class TokenCosineGate(CosineGate):
    """Per-token vectors (multi-vector embeddings): each text's worst cosine with FP32 over its real tokens.

    Its figures are the cosine gate's (the mean and the minimum over texts), so it reports as ``cosine``; a task
    names the class, and the spec's gate names (:data:`GATES`) keep ``cosine`` for whole-text vectors.
    """

    def compare(self, reference: np.ndarray, candidate: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
        """The smallest cosine per text (the candidate cut to the reference's tokens)."""
        (cosine,) = super().compare(reference, candidate[:, : mask.shape[1]], mask)
        return (np.where(mask, cosine, np.inf).min(-1),)


GATES: dict[str, type[Gate]] = {gate.name: gate for gate in (LabelGate, CosineGate, TokenLabelGate, SpanGate)}


def read_texts(path: Path | None, which: str) -> list[str]:
    """Texts of a user file (one per line), or the built-in ``calibration``/``validation`` sample."""
    if path is None:
        return default_texts(which)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read {which} texts {{path}}: {exc.__class__.__name__}", path=path) from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise SpecError(f"{which} file {{path}} has no texts (one per line)", path=path)
    return texts


def default_texts(which: str) -> list[str]:
    """The built-in sample the package carries: tweets and BBC news paragraphs."""
    text = resources.files("tritongen").joinpath("data", f"{which}.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


@dataclass(frozen=True)
class _Chunk:
    """One batch of validation texts of similar length, with FP32 PyTorch's outputs on them."""

    rows: np.ndarray  # indices into the validation texts
    texts: list[str]
    pairs: list[str] | None
    reference: np.ndarray
    mask: np.ndarray  # the real tokens of the reference batch

    def take(self, keep: np.ndarray) -> _Chunk:
        """The rows of this chunk where ``keep`` is true."""
        pick = np.flatnonzero(keep)
        pairs = None if self.pairs is None else [self.pairs[i] for i in pick]
        texts = [self.texts[i] for i in pick]
        return _Chunk(self.rows[pick], texts, pairs, self.reference[pick], self.mask[pick])


class GateReference:
    """FP32 PyTorch's outputs on the validation texts, computed once, against which any number of models is measured.

    A precision search measures dozens of candidates against the same texts, so the PyTorch pass happens
    once, here. Texts are grouped by token length, so no batch pads a tweet to a news article. The
    reference asks the checkpoint's tokenizer for exactly the inputs the served encoder feeds.
    """

    def __init__(
        self,
        model: ReferenceModel,
        *,
        gate: Gate | str,
        texts: Sequence[str],
        function: str = "softmax",
        pairs: Sequence[str] | None = None,
        batch_size: int = 32,
    ) -> None:
        if isinstance(gate, str):
            if gate not in GATES:
                raise SpecError(f"accuracy gate `{gate}` is unknown; expected one of {', '.join(GATES)}")
            gate = GATES[gate](function)
        self.gate, self.encoder = gate, model.encoder
        lengths = [len(e.ids) for e in model.encoder.encode(list(texts), None if pairs is None else list(pairs))]
        order = np.argsort(lengths, kind="stable")
        self.chunks = [
            _reference_chunk(model, order[start : start + batch_size], texts, pairs)
            for start in range(0, len(order), batch_size)
        ]
        self.worst: dict[int, float] = {}  # per chunk, its figure in the last measurement (lower: worse)
        self.perfect: dict[int, tuple[np.ndarray, ...]] = {}  # per chunk, the figures of FP32 itself

    @property
    def count(self) -> int:
        """How many texts the reference holds."""
        return sum(chunk.rows.size for chunk in self.chunks)

    def subset(self, count: int) -> GateReference:
        """The ``count`` texts a lossy model is likeliest to get wrong, as a reference of their own.

        For label gates those are the texts FP32 decides by the smallest margin (where a label flips first);
        for embeddings, texts spread evenly over the lengths. For cheap measurements (layer sensitivity).
        """
        margins = np.concatenate([self.gate.margins(chunk.reference, chunk.mask) for chunk in self.chunks])
        if not self.gate.by_margin or count >= margins.size:
            ranks = np.arange(margins.size) % max(1, margins.size // max(count, 1)) == 0
        else:
            ranks = np.zeros(margins.size, bool)
            ranks[np.argsort(margins, kind="stable")[:count]] = True
        picked, start = [], 0
        for chunk in self.chunks:
            keep = ranks[start : start + chunk.rows.size]
            start += chunk.rows.size
            if keep.any():
                picked.append(chunk.take(keep))
        view = object.__new__(GateReference)
        view.__dict__.update(self.__dict__)
        view.chunks = _rebatch(picked, self.encoder.bucket)
        view.worst, view.perfect = {}, {}
        return view

    def measure(
        self,
        model: Path | Any,
        variant: str,
        *,
        batch_dependent: bool = False,
        feeds: dict[str, Any] | None = None,
        until_failed: bool = False,
    ) -> AccuracyReport:
        """Run ``model`` (a path, or an ONNX Runtime session) on the served path and compare it with FP32 PyTorch.

        ``batch_dependent`` (dynamic int8: activation scales come from the whole batch) measures twice, in
        batches as under load and each text alone as at low load, and reports the worse figures. ``feeds``
        are extra inputs for every run (the switches of a sensitivity model). ``until_failed`` stops as soon
        as the gate could not pass even if every text left matched FP32 exactly, taking first the texts the last
        model measured did worst on: the verdict is the full measurement's, the figures cover the texts run.
        """
        session = model if hasattr(model, "run") else _session(model)
        extra = feeds or {}

        def batched(chunk: _Chunk) -> np.ndarray:
            return session.run(None, {**self.encoder(chunk.texts, chunk.pairs), **extra})[0].astype(np.float32)

        def alone(chunk: _Chunk) -> np.ndarray:
            rows = []
            for i, text in enumerate(chunk.texts):
                inputs = self.encoder([text], None if chunk.pairs is None else [chunk.pairs[i]])
                rows.append(_fit(session.run(None, {**inputs, **extra})[0][0], chunk.mask.shape[1]))
            return np.stack(rows).astype(np.float32)

        reports = [self._compare(batched, variant, until_failed)]
        if batch_dependent and reports[0].passed:  # a failure in batches already fails the gate
            reports.append(self._compare(alone, variant, until_failed))
        return worst_of(reports)

    def _compare(self, run: Any, variant: str, until_failed: bool = False) -> AccuracyReport:
        indices = range(len(self.chunks))
        order = sorted(indices, key=lambda i: self.worst.get(i, 1.0)) if until_failed else indices
        figures: dict[int, tuple[np.ndarray, ...]] = {}
        for index in order:
            chunk = self.chunks[index]
            figures[index] = self.gate.compare(chunk.reference, run(chunk), chunk.mask)
            self.worst[index] = float(np.mean(figures[index][0]))
            if until_failed and len(figures) < len(self.chunks) and not self._could_pass(figures, variant):
                measured = sum(self.chunks[i].rows.size for i in figures)
                report = self.gate.report(variant, measured, [figures[i] for i in sorted(figures)])
                return dataclasses.replace(report, of_texts=self.count)
        return self.gate.report(variant, self.count, [figures[i] for i in indices])

    def _could_pass(self, figures: dict[int, tuple[np.ndarray, ...]], variant: str) -> bool:
        """Whether the gate passes if every chunk not in ``figures`` matched FP32 exactly (the best case)."""
        for index, chunk in enumerate(self.chunks):
            if index not in figures and index not in self.perfect:
                self.perfect[index] = self.gate.compare(chunk.reference, chunk.reference, chunk.mask)
        best = [figures.get(i, self.perfect.get(i)) for i in range(len(self.chunks))]
        return self.gate.report(variant, self.count, best).passed


def _reference_chunk(
    model: ReferenceModel, rows: np.ndarray, texts: Sequence[str], pairs: Sequence[str] | None
) -> _Chunk:
    """FP32 PyTorch's outputs on the texts (and pairs) at ``rows``, one padded batch."""
    chunk_texts = [texts[i] for i in rows]
    chunk_pairs = None if pairs is None else [pairs[i] for i in rows]
    segments = [chunk_texts] + ([chunk_pairs] if chunk_pairs is not None else [])
    batch = model.encode(segments, padding=True)
    reference = model.run(batch).astype(np.float32)
    return _Chunk(rows, chunk_texts, chunk_pairs, reference, batch[ATTENTION_MASK].numpy().astype(bool))


def _rebatch(chunks: Sequence[_Chunk], bucket: Any, *, rows: int = 32, tokens: int = 2048) -> list[_Chunk]:
    """Neighbouring ``chunks`` (length order) merged while a batch, padded to its ``bucket``, stays within bounds."""
    groups: list[list[_Chunk]] = []
    for chunk in chunks:
        group = groups[-1] if groups else []
        count = sum(c.rows.size for c in group) + chunk.rows.size
        width = bucket(max([c.mask.shape[1] for c in group] + [chunk.mask.shape[1]]))
        if group and count <= rows and count * width <= tokens:
            group.append(chunk)
        else:
            groups.append([chunk])
    return [_merge(group) for group in groups]


def _merge(group: Sequence[_Chunk]) -> _Chunk:
    """One chunk of ``group``'s texts; per-token outputs and masks padded to the widest."""
    if len(group) == 1:
        return group[0]
    width = max(c.mask.shape[1] for c in group)

    def widen(array: np.ndarray) -> np.ndarray:
        return np.pad(array, [(0, 0), (0, width - array.shape[1])] + [(0, 0)] * (array.ndim - 2))

    pairs = None if group[0].pairs is None else [p for c in group for p in c.pairs or []]
    reference = np.concatenate([c.reference if c.reference.ndim < 3 else widen(c.reference) for c in group])
    mask = np.concatenate([widen(c.mask) for c in group])
    return _Chunk(np.concatenate([c.rows for c in group]), [t for c in group for t in c.texts], pairs, reference, mask)


def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _fit(row: np.ndarray, width: int) -> np.ndarray:
    """One text's output at the reference batch's width: per-token outputs cut or zero-padded, others as they are."""
    if row.ndim < 2:
        return row
    row = row[:width]
    return np.pad(row, [(0, width - row.shape[0])] + [(0, 0)] * (row.ndim - 1))


def worst_of(reports: Sequence[AccuracyReport]) -> AccuracyReport:
    """The worse figures of several measurements of one model (each figure on its own)."""
    if len(reports) == 1:
        return reports[0]
    first = reports[0]

    def pick(name: str, worse: Any) -> Any:
        values = [getattr(r, name) for r in reports if getattr(r, name) is not None]
        return worse(values) if values else None

    return dataclasses.replace(
        first,
        label_agreement=pick("label_agreement", min),
        max_probability_diff=pick("max_probability_diff", max),
        cosine_mean=pick("cosine_mean", min),
        cosine_min=pick("cosine_min", min),
        loss=pick("loss", max),
    )


def measure_accuracy(
    model: ReferenceModel,
    onnx_path: Path,
    *,
    gate: Gate | str,
    texts: Sequence[str],
    variant: str,
    function: str = "softmax",
    pairs: Sequence[str] | None = None,
) -> AccuracyReport:
    """Compare ``onnx_path`` (served path) with ``model`` (FP32 PyTorch) on ``texts`` (one-off :class:`GateReference`).

    ``gate``: ``labels`` (argmax per text of ``function``-activated outputs), ``cosine`` (embeddings),
    ``token_labels`` (softmax argmax per real token) or ``spans`` (argmax start and end token per text).
    """
    reference = GateReference(model, gate=gate, texts=texts, function=function, pairs=pairs)
    return reference.measure(onnx_path, variant)


def _token_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Softmax over the sequence axis (1) of ``logits`` [batch, seq, k], padding excluded."""
    return softmax(np.where(mask[..., None], logits, -np.inf), axis=1)


def require_accuracy(report: AccuracyReport, *, accept_loss: bool) -> None:
    """Raise :class:`AccuracyError` with the figures unless the gate passed or loss is accepted."""
    if not report.passed and not accept_loss:
        raise AccuracyError(f"accuracy gate failed: {report.summary()}; nothing was published")
