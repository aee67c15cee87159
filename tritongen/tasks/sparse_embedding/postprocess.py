"""Sparse-embedding postprocess step: ``sparse_weights`` (one vocabulary-sized row per text) -> indices and values.

Each text keeps its weights above ``threshold``, at most ``top_k`` of the largest (0: all), as ``SPARSE_INDICES``
(ascending) and ``SPARSE_VALUES``; the texts of one request are padded to the longest with index -1 and value 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from _tritongen_step._common import pb_utils
from _tritongen_step.contract import SPARSE_INDICES, SPARSE_VALUES
from _tritongen_step.parameters import SelectionParameters
from _tritongen_step.postprocess import TritonPythonModel as PostprocessBase
from _tritongen_step.postprocess import input_array
from _tritongen_step.sparse import pad_rows, vocabulary_rows

__all__ = ["TritonPythonModel"]


class TritonPythonModel(PostprocessBase):
    """The sparse-embedding postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read which weights to keep."""
        self.selection = SelectionParameters.from_parameters(params)

    def process(self, weights: np.ndarray, sizes: list[int]) -> list[dict[str, np.ndarray]]:
        """The padded (indices, values) of each request, ``sizes`` texts each, from all requests' rows."""
        rows = vocabulary_rows(weights, top_k=self.selection.top_k, threshold=self.selection.threshold)
        outputs, start = [], 0
        for size in sizes:
            indices, values = pad_rows(rows[start : start + size])
            outputs.append({SPARSE_INDICES: indices, SPARSE_VALUES: values})
            start += size
        return outputs

    def execute(self, requests: list[Any]) -> list[Any]:
        """All requests' rows at once, then each request padded to its own longest text."""
        arrays = [input_array(r, self.input_name) for r in requests]
        outputs = self.process(np.concatenate(arrays, axis=0), [len(a) for a in arrays])
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, out[name]) for name in self.output_names])
            for out in outputs
        ]
