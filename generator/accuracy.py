"""The accuracy gate: an optimised or quantised model must stay close to FP32 PyTorch.

The candidate runs the served path (the tokenizer model's ``TextEncoder`` with bucket
padding, then ONNX Runtime, batched) on validation texts; the reference is the FP32
PyTorch module on the checkpoint's own tokenizer output. Classification needs >= 99% label
agreement (the largest probability difference is reported); embeddings need a mean cosine
>= 0.99 and a minimum >= 0.98.
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


@dataclass(frozen=True)
class AccuracyReport:
    """Figures of one comparison against FP32 PyTorch."""

    variant: str
    task: str
    texts: int
    label_agreement: float | None = None
    max_probability_diff: float | None = None
    cosine_mean: float | None = None
    cosine_min: float | None = None

    @property
    def passed(self) -> bool:
        """Whether the figures are within the gate."""
        if self.task == "classification":
            return (self.label_agreement or 0.0) >= LABEL_AGREEMENT_MIN
        return (self.cosine_mean or 0.0) >= COSINE_MEAN_MIN and (self.cosine_min or 0.0) >= COSINE_MIN_MIN

    def summary(self) -> str:
        """One line with the figures and the thresholds."""
        if self.task == "classification":
            figures = (
                f"label agreement {self.label_agreement:.2%} (gate >= {LABEL_AGREEMENT_MIN:.0%}), "
                f"max probability diff {self.max_probability_diff:.4f}"
            )
        else:
            figures = (
                f"cosine mean {self.cosine_mean:.4f} (gate >= {COSINE_MEAN_MIN}), "
                f"min {self.cosine_min:.4f} (gate >= {COSINE_MIN_MIN})"
            )
        return f"{self.variant} vs FP32 PyTorch on {self.texts} validation texts: {figures}"

    def to_markdown(self) -> str:
        """The figures for the model card."""
        verdict = "PASSED" if self.passed else "FAILED (accepted with --accept-accuracy-loss)"
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


def _reference(
    module: Any,
    hf_tokenizer: Any,
    texts: Sequence[str],
    pairs: Sequence[str] | None,
    names: Sequence[str],
    max_length: int,
) -> np.ndarray:
    import torch

    outputs = []
    for start in range(0, len(texts), 32):
        segments = [list(texts[start : start + 32])] + ([list(pairs[start : start + 32])] if pairs else [])
        batch = hf_tokenizer(*segments, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        with torch.no_grad():
            outputs.append(module(**{n: batch[n] for n in names}).numpy())
    return np.concatenate(outputs)


def _candidate(onnx_path: Path, encoder: Any, texts: Sequence[str], pairs: Sequence[str] | None) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    outputs = [
        session.run(None, encoder(list(texts[i : i + 32]), list(pairs[i : i + 32]) if pairs else None))[0]
        for i in range(0, len(texts), 32)
    ]
    return np.concatenate(outputs).astype(np.float32)


def measure_accuracy(
    module: Any,
    hf_tokenizer: Any,
    encoder: Any,
    onnx_path: Path,
    *,
    task: str,
    texts: Sequence[str],
    max_length: int,
    variant: str,
    function: str = "softmax",
    pairs: Sequence[str] | None = None,
) -> AccuracyReport:
    """Compare ``onnx_path`` (served path) with ``module`` (FP32 PyTorch) on ``texts``."""
    reference = _reference(module, hf_tokenizer, texts, pairs, encoder.input_names, max_length)
    candidate = _candidate(onnx_path, encoder, texts, pairs)
    if task != "embedding":
        ref_p, cand_p = activate(reference, function), activate(candidate, function)
        return AccuracyReport(
            variant=variant,
            task=task,
            texts=len(texts),
            label_agreement=float((ref_p.argmax(-1) == cand_p.argmax(-1)).mean()),
            max_probability_diff=float(np.abs(ref_p - cand_p).max()),
        )
    norms = np.linalg.norm(reference, axis=-1) * np.linalg.norm(candidate, axis=-1)
    cosine = (reference * candidate).sum(-1) / np.maximum(norms, 1e-12)
    return AccuracyReport(
        variant=variant, task=task, texts=len(texts), cosine_mean=float(cosine.mean()), cosine_min=float(cosine.min())
    )


def require_accuracy(report: AccuracyReport, *, accept_loss: bool) -> None:
    """Raise :class:`AccuracyError` with the figures unless the gate passed or loss is accepted."""
    if not report.passed and not accept_loss:
        raise AccuracyError(f"accuracy gate failed: {report.summary()}; nothing was published")
