"""Zero-shot tokenizer step: ``TEXT`` + ``CANDIDATE_LABELS`` -> one (text, hypothesis) model row per label.

``CANDIDATE_LABELS`` holds one JSON list per text, or one list for all texts of the request. Each label becomes
the hypothesis ``hypothesis_template.format(label)``; the pair is encoded as the pipeline encodes it (only the
text is truncated, so the hypothesis stays whole) and padded to a length bucket. ``pair_text`` says which text
of the request each row belongs to. The pairs of all requests are encoded in one call. Parameters: the plain
tokenizer's, ``hypothesis_template`` and ``max_windows`` (the most rows one request may have).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from _tritongen_step import zero_shot
from _tritongen_step._common import input_error
from _tritongen_step.contract import CANDIDATE_LABELS, TEXT
from _tritongen_step.parameters import WindowsParameters, ZeroShotWindowParameters
from _tritongen_step.tokenizer import TritonPythonModel as TextTokenizer
from _tritongen_step.tokenizer import pb_utils

__all__ = ["TritonPythonModel", "request_pairs"]


def request_pairs(
    texts: list[str], label_rows: list[str], template: str, max_rows: int
) -> tuple[list[tuple[str, str]], list[int]]:
    """The (text, hypothesis) pairs of one request and the text index of each; ValueError for a bad request."""
    if len(label_rows) not in (1, len(texts)):
        raise ValueError(
            f"CANDIDATE_LABELS has {len(label_rows)} rows for {len(texts)} texts; send one per text, or one for all"
        )
    for row, text in enumerate(texts):
        if not text:  # the pipeline refuses an empty sequence too
            raise ValueError(f"TEXT[{row}] is empty; send a text to classify")
    parsed = [zero_shot.candidate_labels(raw, row) for row, raw in enumerate(label_rows)]
    per_text = parsed * len(texts) if len(parsed) == 1 else parsed
    count = sum(len(labels) for labels in per_text)
    if count > max_rows:
        raise ValueError(
            f"the request needs {count} (text, label) pairs, more than the {max_rows} the model step takes in one "
            "request: send fewer texts or labels, or rebuild with a larger max_batch_size"
        )
    pairs: list[tuple[str, str]] = []
    owners: list[int] = []
    for index, (text, labels) in enumerate(zip(texts, per_text, strict=True)):
        pairs += [(text, hypothesis) for hypothesis in zero_shot.hypotheses(template, labels)]
        owners += [index] * len(labels)
    return pairs, owners


class TritonPythonModel(TextTokenizer):
    """The zero-shot tokenizer step of the ensemble."""

    def setup(self, params: dict[str, str]) -> None:
        """Read the hypothesis template and the most rows per request; truncate only the text, as the pipeline."""
        self.template = ZeroShotWindowParameters.from_parameters(params).hypothesis_template
        self.max_rows = WindowsParameters.from_parameters(params).max_windows
        self.encoder.tokenizer.enable_truncation(self.encoder.max_length, strategy="only_first")

    def _pairs(self, request: Any) -> tuple[list[tuple[str, str]], list[int]]:
        texts = self.texts(request, TEXT)
        return request_pairs(texts, self.texts(request, CANDIDATE_LABELS), self.template, self.max_rows)

    def _encode(self, pairs: list[tuple[str, str]]) -> list[Any]:
        try:
            return self.encoder.tokenizer.encode_batch(pairs)
        except Exception as exc:  # tokenizers raises plain Exception: the hypothesis alone is too long
            raise ValueError(
                f"a hypothesis does not fit in the model's {self.encoder.max_length} tokens with its text: "
                f"{str(exc).splitlines()[0]}"
            ) from None

    def _response(self, encodings: list[Any], owners: list[int]) -> Any:
        arrays = self.encoder.pack(encodings)
        arrays["pair_text"] = np.array(owners, dtype=np.int64).reshape(-1, 1)
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, arrays[name]) for name in self.output_names]
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        """Encode the pairs of every request in one call (or one request at a time if that fails), then answer."""
        responses: list[Any] = [None] * len(requests)
        good: list[tuple[int, list[tuple[str, str]], list[int]]] = []
        for index, request in enumerate(requests):
            try:
                good.append((index, *self._pairs(request)))
            except ValueError as exc:
                responses[index] = pb_utils.InferenceResponse(error=input_error(pb_utils, str(exc)))
        try:
            encodings = self._encode([pair for _, pairs, _ in good for pair in pairs])
        except ValueError:
            encodings = None  # some request's hypothesis does not fit: find it, one request at a time
        start = 0
        for index, pairs, owners in good:
            try:
                chunk = encodings[start : start + len(pairs)] if encodings is not None else self._encode(pairs)
            except ValueError as exc:
                responses[index] = pb_utils.InferenceResponse(error=input_error(pb_utils, str(exc)))
                continue
            finally:
                start += len(pairs)
            responses[index] = self._response(chunk, owners)
        return responses
