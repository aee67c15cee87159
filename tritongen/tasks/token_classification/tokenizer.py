"""Token-classification tokenizer step: ``TEXT`` -> every window of every text, bucket-padded.

Long texts are split as the strided transformers pipeline splits them (``stride``), so nothing is
truncated; ``special_mask``, ``word_ids``, ``offsets`` (character offsets into the whole text) and
``window_example`` go to the postprocess step. Parameters: the plain tokenizer's, and ``stride`` and
``max_windows`` (the most windows one request may need: the model step's batch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from _tritongen_step import ner
from _tritongen_step.contract import TEXT, WINDOW_EXAMPLE
from _tritongen_step.tokenizer import WindowedTokenizer

__all__ = ["TritonPythonModel"]


class TritonPythonModel(WindowedTokenizer):
    """The token-classification tokenizer step of the ensemble."""

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """All windows of one request (long texts split with ``stride``), padded to a length bucket."""
        texts = self.texts(request, TEXT)
        windows, owners = self.windows(texts, self.stride)
        width = self.encoder.bucket(max((len(w.ids) for w in windows), default=1))
        arrays = ner.pack_encodings(windows, width, self.encoder.pad_id, self.encoder.pad_type_id)
        arrays[WINDOW_EXAMPLE] = owners.reshape(-1, 1)
        return {name: arrays[name] for name in self.output_names}
