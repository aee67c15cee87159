"""The accuracy gate: an optimised or quantised model must stay close to FP32 PyTorch.

The candidate runs the served path (the tokenizer model's ``TextEncoder`` with bucket
padding, then ONNX Runtime, batched) on validation texts; the reference is the FP32
PyTorch module on the checkpoint's own tokenizer output. Classification needs >= 99% label
agreement (the largest probability difference is reported), token classification >= 99%
per real token, QA >= 99% of texts with the same most likely start and end token;
embeddings need a mean cosine >= 0.99 and a minimum >= 0.98.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from generator.errors import GeneratorError
from generator.triton_models.postprocess import activate

__all__ = [
    "AccuracyError",
    "AccuracyReport",
    "default_texts",
    "measure_accuracy",
    "read_texts",
    "require_accuracy",
]

LABEL_AGREEMENT_MIN = 0.99
COSINE_MEAN_MIN = 0.99
COSINE_MIN_MIN = 0.98


class AccuracyError(GeneratorError):
    """The optimised model lost more accuracy than the gate allows."""


GATES = ("labels", "cosine", "token_labels", "spans")
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

    @property
    def passed(self) -> bool:
        """Whether the figures are within the gate."""
        if self.gate != "cosine":
            return (self.label_agreement or 0.0) >= LABEL_AGREEMENT_MIN
        return (self.cosine_mean or 0.0) >= COSINE_MEAN_MIN and (self.cosine_min or 0.0) >= COSINE_MIN_MIN

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
        return f"{self.variant} vs FP32 PyTorch on {self.texts} validation texts: {figures}"

    def to_markdown(self, *, accepted: bool = False) -> str:
        """The figures for the model card."""
        verdict = "PASSED" if self.passed else "FAILED"
        if not self.passed and accepted:
            verdict += " (accepted with --accept-accuracy-loss)"
        return f"Accuracy gate: **{verdict}** — {self.summary()}.\n"


def read_texts(path: Path | None, which: str) -> list[str]:
    """Texts of a user file (one per line), or the built-in ``calibration``/``validation`` sample."""
    if path is None:
        return default_texts(which)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GeneratorError(f"cannot read {which} texts `{path}`: {exc.__class__.__name__}") from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise GeneratorError(f"{which} file `{path}` has no texts (one per line)")
    return texts


def default_texts(which: str) -> list[str]:
    """The built-in sample the package carries: tweets and BBC news paragraphs."""
    text = resources.files("generator").joinpath("data", f"{which}.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def _chunks(texts: Sequence[str], pairs: Sequence[str] | None, size: int = 32):
    for start in range(0, len(texts), size):
        yield list(texts[start : start + size]), (list(pairs[start : start + size]) if pairs else None)


def measure_accuracy(
    module: Any,
    hf_tokenizer: Any,
    encoder: Any,
    onnx_path: Path,
    *,
    gate: str,
    texts: Sequence[str],
    max_length: int,
    variant: str,
    function: str = "softmax",
    pairs: Sequence[str] | None = None,
) -> AccuracyReport:
    """Compare ``onnx_path`` (served path) with ``module`` (FP32 PyTorch) on ``texts``.

    ``gate``: ``labels`` (argmax per text of ``function``-activated outputs), ``cosine`` (embeddings),
    ``token_labels`` (softmax argmax per real token) or ``spans`` (argmax start and end token per text).
    """
    import onnxruntime as ort
    import torch

    if gate not in GATES:
        raise GeneratorError(f"accuracy gate `{gate}` is unknown; expected one of {', '.join(GATES)}")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    agree: list[np.ndarray] = []
    diffs: list[float] = []
    cosines: list[np.ndarray] = []
    for chunk, pair_chunk in _chunks(texts, pairs):
        segments = [chunk] + ([pair_chunk] if pair_chunk else [])
        batch = hf_tokenizer(*segments, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        with torch.no_grad():
            reference = module(**{n: batch[n] for n in encoder.input_names}).numpy().astype(np.float32)
        candidate = session.run(None, encoder(chunk, pair_chunk))[0].astype(np.float32)
        mask = batch["attention_mask"].numpy().astype(bool)
        if gate == "cosine":
            norms = np.linalg.norm(reference, axis=-1) * np.linalg.norm(candidate, axis=-1)
            cosines.append((reference * candidate).sum(-1) / np.maximum(norms, 1e-12))
            continue
        if gate == "labels":
            ref_p, cand_p = activate(reference, function), activate(candidate, function)
            agree.append(ref_p.argmax(-1) == cand_p.argmax(-1))
        elif gate == "token_labels":  # real tokens only; the candidate is padded to a length bucket
            ref_p = activate(reference, "softmax")[mask]
            cand_p = activate(candidate[:, : mask.shape[1]], "softmax")[mask]
            agree.append(ref_p.argmax(-1) == cand_p.argmax(-1))
        else:  # spans: [batch, seq, 2] start/end logits, softmax over the real tokens of each text
            ref_p = _token_softmax(reference, mask)
            cand_p = _token_softmax(candidate[:, : mask.shape[1]], mask)
            agree.append((ref_p.argmax(1) == cand_p.argmax(1)).all(-1))
        diffs.append(float(np.abs(ref_p - cand_p).max()))
    if gate == "cosine":
        cosine = np.concatenate(cosines)
        return AccuracyReport(
            variant=variant,
            gate=gate,
            texts=len(texts),
            cosine_mean=float(cosine.mean()),
            cosine_min=float(cosine.min()),
        )
    return AccuracyReport(
        variant=variant,
        gate=gate,
        texts=len(texts),
        label_agreement=float(np.concatenate(agree).mean()),
        max_probability_diff=max(diffs),
    )


def _token_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Softmax over the sequence axis (1) of ``logits`` [batch, seq, k], padding excluded."""
    masked = np.where(mask[..., None], logits, -np.inf)
    exp = np.exp(masked - masked.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def require_accuracy(report: AccuracyReport, *, accept_loss: bool) -> None:
    """Raise :class:`AccuracyError` with the figures unless the gate passed or loss is accepted."""
    if not report.passed and not accept_loss:
        raise AccuracyError(f"accuracy gate failed: {report.summary()}; nothing was published")
