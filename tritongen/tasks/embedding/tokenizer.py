"""Chunked-embedding tokenizer step (``long_text: chunk``): ``TEXT`` -> every window of every text, bucket-padded.

A text longer than the model becomes overlapping windows of the model's length (``stride`` tokens shared by
neighbours), each with the special tokens the model expects; a short text is one window, the same row plain
truncation gives. ``window_example`` (the text of each window) and ``window_tokens`` (its text tokens, special
tokens not counted: its weight) go to the postprocess step, which combines them; ``TRUNCATED`` is all false.
Prompts (``PROMPT_NAME``) go in front of the text, so they begin its first window. Parameters: the plain
tokenizer's, ``stride`` and ``max_windows`` (the most windows one request may need: the model step's batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

try:  # in the server: the shared modules are copied next to this model.py
    from tokenizer import WindowedTokenizer
except ImportError:
    from tritongen.steps.tokenizer import WindowedTokenizer

try:  # in the server: the contract is copied next to this model.py
    from contract import STRIDE, TRUNCATED, WINDOW_EXAMPLE, WINDOW_TOKENS
except ImportError:
    from tritongen.contract import STRIDE, TRUNCATED, WINDOW_EXAMPLE, WINDOW_TOKENS

__all__ = ["TritonPythonModel", "text_tokens"]


def text_tokens(windows: Sequence[Any]) -> np.ndarray:
    """[W, 1] int64: the tokens of each window that are not special tokens (``[CLS]``, ``[SEP]``)."""
    counts = [len(w.special_tokens_mask) - sum(w.special_tokens_mask) for w in windows]
    return np.asarray(counts, dtype=np.int64).reshape(-1, 1)


class TritonPythonModel(WindowedTokenizer):
    """The chunked-embedding tokenizer step of the ensemble."""

    def setup(self, params: dict[str, str]) -> None:
        """Read the window overlap and the most windows per request."""
        self.stride = int(params[STRIDE])
        self.max_windows = int(params["max_windows"])

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """All windows of one request's (prompted) texts, padded to a length bucket."""
        texts, _ = self.read(request)
        windows, owners = self.windows(texts, self.stride)
        arrays = self.encoder.pack(windows)
        arrays[WINDOW_EXAMPLE] = owners.reshape(-1, 1)
        arrays[WINDOW_TOKENS] = text_tokens(windows)
        arrays[TRUNCATED] = np.zeros((len(texts), 1), dtype=bool)
        return {name: arrays[name] for name in self.output_names}
