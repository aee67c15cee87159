"""Chunked-embedding tokenizer step (``long_text: chunk``): ``TEXT`` -> every window of every text, bucket-padded.

A text longer than the model becomes overlapping windows of the model's length (``stride`` tokens shared by
neighbours), each with the special tokens the model expects; a short text is one window, the same row plain
truncation gives. ``window_example`` (the text of each window) and ``window_tokens`` (its text tokens, special
tokens not counted: its weight) go to the postprocess step, which combines them; ``TRUNCATED`` is all false, and
``TOKEN_COUNT`` counts each text's tokens once, as if it were read whole (:func:`whole_counts`).
Prompts (``PROMPT_NAME``) go in front of the text, so they begin its first window. Parameters: the plain
tokenizer's, ``stride`` and ``max_windows`` (the most windows one request may need: the model step's batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from _tritongen_step.contract import TOKEN_COUNT, TRUNCATED, WINDOW_EXAMPLE, WINDOW_TOKENS
from _tritongen_step.tokenizer import WindowedTokenizer

__all__ = ["TritonPythonModel", "text_tokens", "whole_counts"]


def text_tokens(windows: Sequence[Any]) -> np.ndarray:
    """[W, 1] int64: the tokens of each window that are not special tokens (``[CLS]``, ``[SEP]``)."""
    counts = [len(w.special_tokens_mask) - sum(w.special_tokens_mask) for w in windows]
    return np.asarray(counts, dtype=np.int64).reshape(-1, 1)


def whole_counts(windows: Sequence[Any], owners: np.ndarray, texts: int, *, stride: int, specials: int) -> np.ndarray:
    """[N, 1] int32: the tokens of each text encoded whole, special tokens once, from its windows.

    A text's first window counts whole; each later one adds its text tokens less the ``stride`` it shares with
    the one before (``specials``: the special tokens around each window). That is the length of the text's
    untruncated encoding, without encoding it again.
    """
    owners = np.asarray(owners).reshape(-1)
    lengths = np.fromiter((len(w.ids) for w in windows), dtype=np.int64, count=len(windows))
    first = np.ones(len(owners), dtype=bool)
    first[1:] = owners[1:] != owners[:-1]
    added = np.where(first, lengths, lengths - specials - stride)
    return np.bincount(owners, weights=added, minlength=texts).astype(np.int32).reshape(-1, 1)


class TritonPythonModel(WindowedTokenizer):
    """The chunked-embedding tokenizer step of the ensemble."""

    def setup(self, params: dict[str, str]) -> None:
        """Read the window overlap and the most windows per request, and count the tokens around each window."""
        super().setup(params)
        self.specials = self.encoder.tokenizer.num_special_tokens_to_add(False)  # around each window

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """All windows of one request's (prompted) texts, padded to a length bucket."""
        texts = self.read(request).texts
        windows, owners = self.windows(texts, self.stride)
        arrays = self.encoder.pack(windows)
        arrays[WINDOW_EXAMPLE] = owners.reshape(-1, 1)
        arrays[WINDOW_TOKENS] = text_tokens(windows)
        arrays[TRUNCATED] = np.zeros((len(texts), 1), dtype=bool)
        arrays[TOKEN_COUNT] = whole_counts(windows, owners, len(texts), stride=self.stride, specials=self.specials)
        return {name: arrays[name] for name in self.output_names}
