"""Reranking postprocess step: the [no, yes] logits of the last token -> ``SCORE`` = P(yes).

The model card's score: a softmax over the two logits, the share of ``yes``.
"""

from __future__ import annotations

import numpy as np

from _tritongen_step.contract import SCORE
from _tritongen_step.postprocess import BatchedPostprocess
from _tritongen_step.vectors import softmax

__all__ = ["TritonPythonModel"]


class TritonPythonModel(BatchedPostprocess):
    """The reranking postprocess step of the ensemble."""

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """P(yes) per row."""
        return {SCORE: softmax(values.astype(np.float32))[:, 1:2].astype(np.float32)}
