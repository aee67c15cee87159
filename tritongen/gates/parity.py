"""The parity gate: the exported model must reproduce PyTorch before anything is published.

The served path (the tokenizer model's ``TextEncoder`` with bucket padding, then ONNX
Runtime on the exported file, batched) is compared with the reference path (the
checkpoint's own transformers tokenizer, then the PyTorch module, one unpadded text at a
time) on varied texts: short, long and truncated, non-ASCII, emoji, empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.contract import INPUT_IDS, TOKEN_TYPE_IDS
from tritongen.errors import ParityError

__all__ = [
    "PARITY_TEXTS",
    "ParityReport",
    "ParityRow",
    "ReferenceModel",
    "check_parity",
    "reference_encode",
    "require_parity",
]

PARITY_TEXTS: tuple[str, ...] = (
    "I love this movie!",
    "The service was slow and the food arrived cold.",
    "ok",
    "",
    "Café au lait, naïve façade, jalapeño, Ünïcödé — and a fiancée in Zürich.",
    "東京は日本の首都です。北京和上海也是大城市。",
    "Great job 🎉🔥👍 see you soon 🙂",
    "Ça ne marche pas du tout… 😡",
    "Привет, как дела? Всё хорошо.",
    "The quarterly report shows revenue growth of 12.5% (up from 9.8%) across all regions. " * 3,
    " ".join(f"word{i} is followed by a comma, a dash - and more text." for i in range(120)),
    "A" * 3000,
)


@dataclass(frozen=True)
class ParityRow:
    """The comparison for one text."""

    text: str
    tokens: int
    truncated: bool
    max_abs_diff: float
    argmax_reference: tuple[int, ...]
    argmax_exported: tuple[int, ...]


@dataclass(frozen=True)
class ParityReport:
    """All rows, and whether the gate passed."""

    rows: list[ParityRow]
    tolerance: float
    tokenizer_mismatches: list[str] = field(default_factory=list)
    inputs: str = "text"  # what the rows are: "text", or "image" (then the preprocessing is the image step's)

    @property
    def max_abs_diff(self) -> float:
        """Largest absolute difference over all texts and values."""
        return max(row.max_abs_diff for row in self.rows)

    @property
    def argmax_agrees(self) -> bool:
        """Whether every text's argmax is the same on both paths."""
        return all(row.argmax_reference == row.argmax_exported for row in self.rows)

    @property
    def passed(self) -> bool:
        """Whether the gate passed."""
        return not self.tokenizer_mismatches and self.max_abs_diff <= self.tolerance and self.argmax_agrees

    def to_markdown(self) -> str:
        """The comparison as a markdown table, for the model card."""
        lines = [
            f"Parity against PyTorch: **{'PASSED' if self.passed else 'FAILED'}** — "
            f"max abs diff {self.max_abs_diff:.2e} (tolerance {self.tolerance:.0e}), "
            f"argmax {'identical' if self.argmax_agrees else 'DIFFERS'}, "
            f"{self._preprocessing} {'identical' if not self.tokenizer_mismatches else 'DIFFERS'}.",
            "",
            f"| {self.inputs} | {'tokens' if self.inputs == 'text' else 'pixels'} | truncated | max abs diff | "
            "argmax (torch / onnx) |",
            "|---|---:|:---:|---:|:---:|",
        ]
        for row in self.rows:
            preview = _preview(row.text).replace("|", "\\|")
            lines.append(
                f"| {preview} | {row.tokens} | {'yes' if row.truncated else ''} | {row.max_abs_diff:.2e} | "
                f"{_argmax_cell(row)} |"
            )
        return "\n".join(lines) + "\n"

    @property
    def _preprocessing(self) -> str:
        return "tokenizer" if self.inputs == "text" else "pixel values"


def _argmax_cell(row: ParityRow) -> str:
    if len(row.argmax_reference) <= 2:
        return f"{', '.join(map(str, row.argmax_reference))} / {', '.join(map(str, row.argmax_exported))}"
    differ = sum(a != b for a, b in zip(row.argmax_reference, row.argmax_exported, strict=True))
    return f"{len(row.argmax_reference)} tokens, {differ} differ"


def _preview(text: str, width: int = 48) -> str:
    flat = " ".join(text.split()) or "(empty)"
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@dataclass(frozen=True)
class ReferenceModel:
    """FP32 PyTorch as the gates run it: the module, the checkpoint's own tokenizer, and the served encoder.

    The gates compare the served path with this one, so it is bound once per build. The reference asks
    ``hf_tokenizer`` for exactly the inputs ``encoder`` feeds the exported model, cut at ``max_length``.
    """

    module: Any
    hf_tokenizer: Any
    encoder: Any
    max_length: int

    def encode(self, segments: Sequence[Any], **kwargs: Any) -> Any:
        """The checkpoint's own tokenizer on ``segments`` (:func:`reference_encode`), cut at ``max_length``."""
        return reference_encode(self.hf_tokenizer, self.encoder, segments, max_length=self.max_length, **kwargs)

    def run(self, inputs: Any) -> np.ndarray:
        """The module's output on ``inputs`` (those the served encoder feeds), without autograd."""
        import torch

        with torch.no_grad():
            return self.module(**{name: inputs[name] for name in self.encoder.input_names}).numpy()


def check_parity(
    model: ReferenceModel,
    onnx_path: Path,
    *,
    tolerance: float,
    texts: Sequence[str] = PARITY_TEXTS,
    pairs: Sequence[str] | None = None,
    argmax_axis: int = -1,
    pad_to_max: bool = False,
) -> ParityReport:
    """Compare the served path with PyTorch (``model``) on ``texts``; return the report (never raises).

    Per-token outputs ([seq, ...] per text) are compared on the real tokens only; the argmax is
    taken along ``argmax_axis`` of one text's output (-1: per token for token labels; 0: the most
    likely token of each column, e.g. the answer's start and end). ``pad_to_max``: the model reads no attention
    mask, so both paths pad every text to ``max_length`` (the reference as ``padding=PaddingStrategy.MAX_LENGTH``).
    """
    import onnxruntime as ort
    from transformers.utils import PaddingStrategy

    encoder = model.encoder
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    encodings = encoder.encode(list(texts), None if pairs is None else list(pairs))
    exported = session.run(None, encoder.pack(encodings))[0]
    mismatches = []
    rows = []
    second = list(pairs) if pairs is not None else [None] * len(texts)
    for text, pair, encoding, exported_row in zip(texts, second, encodings, exported, strict=True):
        segments = (text,) if pair is None else (text, pair)
        reference_inputs = model.encode(segments, **({"padding": PaddingStrategy.MAX_LENGTH} if pad_to_max else {}))
        served_ids = encoder.pack([encoding])[INPUT_IDS][0].tolist() if pad_to_max else list(encoding.ids)
        if reference_inputs[INPUT_IDS][0].tolist() != served_ids:
            mismatches.append(text)
        reference = model.run(reference_inputs)[0]
        if reference.ndim >= 2:  # per-token output: the export ran on a bucket-padded batch
            exported_row = exported_row[: reference.shape[0]]
        full_length = len(model.hf_tokenizer(*segments, truncation=False)[INPUT_IDS])
        rows.append(
            ParityRow(
                text=text,
                tokens=len(encoding.ids),
                truncated=full_length > model.max_length,
                max_abs_diff=float(np.abs(reference - exported_row).max()),
                argmax_reference=tuple(int(i) for i in np.atleast_1d(reference.argmax(axis=argmax_axis))),
                argmax_exported=tuple(int(i) for i in np.atleast_1d(exported_row.argmax(axis=argmax_axis))),
            )
        )
    return ParityReport(rows=rows, tolerance=tolerance, tokenizer_mismatches=mismatches)


def reference_encode(hf_tokenizer: Any, encoder: Any, segments: Sequence[Any], **kwargs: Any) -> Any:
    """The checkpoint's own tokenizer on ``segments``, returning every input the model takes (as tensors).

    Type ids are asked for explicitly: transformers 5 returns them only when the tokenizer config lists
    them in ``model_input_names``, which tokenizers it saved often do not, although the model embeds them.
    """
    return hf_tokenizer(
        *segments,
        truncation=True,
        return_tensors="pt",
        return_token_type_ids=TOKEN_TYPE_IDS in encoder.input_names,
        **kwargs,
    )


def require_parity(report: ParityReport) -> None:
    """Raise :class:`ParityError` with the figures when ``report`` failed."""
    if report.passed:
        return
    problems = []
    if report.tokenizer_mismatches:
        count = len(report.tokenizer_mismatches)
        problems.append(
            f"tokenizer.json disagrees with the transformers tokenizer on {count} text(s)"
            if report.inputs == "text"
            else f"the image step's pixel values disagree with the transformers image processor on {count} image(s)"
        )
    if report.max_abs_diff > report.tolerance:
        problems.append(f"max abs diff {report.max_abs_diff:.2e} > tolerance {report.tolerance:.0e}")
    if not report.argmax_agrees:
        problems.append("argmax differs")
    raise ParityError("exported model failed the parity check against PyTorch: " + "; ".join(problems))
