"""Question-answering tokenizer step: ``QUESTION`` + ``CONTEXT`` -> every window of every pair.

Long contexts are split as the transformers pipeline splits them (``qa.encode_windows``), with the
window metadata (``window_example``, ``sequence_ids``, ``p_mask``, ``word_ids``, ``offsets``) the
postprocess step needs to merge them back into one answer. Parameters: the plain tokenizer's, and
``max_seq_len``, ``doc_stride``, ``cls_id`` and ``max_windows``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from _tritongen_step import qa
from _tritongen_step.contract import CONTEXT, OFFSETS, QUESTION, WINDOW_EXAMPLE, WORD_IDS
from _tritongen_step.parameters import QaWindowParameters, WindowsParameters
from _tritongen_step.tokenizer import WindowedTokenizer, check_windows

__all__ = ["TritonPythonModel"]


class TritonPythonModel(WindowedTokenizer):
    """The question-answering tokenizer step of the ensemble."""

    def setup(self, params: dict[str, str]) -> None:
        """Read the window length and overlap, the CLS id and the most windows per request."""
        windows = QaWindowParameters.from_parameters(params)
        self.windowing = qa.WindowSettings(
            max_seq_len=windows.max_seq_len, doc_stride=windows.doc_stride,
            pad_id=self.encoder.pad_id, pad_type_id=self.encoder.pad_type_id, cls_id=windows.cls_id,
        )  # fmt: skip
        self.max_windows = WindowsParameters.from_parameters(params).max_windows

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """All windows of one request, padded to a length bucket."""
        questions = self.texts(request, QUESTION)
        contexts = self.texts(request, CONTEXT)
        encoder = self.encoder
        windows = qa.encode_windows(encoder.tokenizer, questions, contexts, self.windowing)
        check_windows(windows.num_windows, self.max_windows, windows.max_seq_len, "contexts")
        windows = qa.pad_windows(
            windows, encoder.bucket(windows.input_ids.shape[1]), pad_id=encoder.pad_id, pad_type_id=encoder.pad_type_id
        )
        arrays = {
            **windows.model_inputs(),
            WINDOW_EXAMPLE: windows.example_index.reshape(-1, 1),
            "sequence_ids": windows.sequence_ids,
            "p_mask": windows.p_mask,
            WORD_IDS: windows.word_ids,
            OFFSETS: windows.offsets,
        }
        return {name: arrays[name] for name in self.output_names}
