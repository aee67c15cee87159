"""Reranking postprocess step: the [no, yes] logits of the last token -> ``SCORE`` = P(yes).

The model card's score: a softmax over the two logits, the share of ``yes``.
"""

from __future__ import annotations

import numpy as np

try:  # in the server: the shared modules are copied next to this model.py
    from _common import softmax
    from postprocess import BatchedPostprocess
except ImportError:
    from tritongen.steps._common import softmax
    from tritongen.steps.postprocess import BatchedPostprocess

try:  # in the server: the contract is copied next to this model.py
    from contract import SCORE
except ImportError:
    from tritongen.contract import SCORE

__all__ = ["TritonPythonModel"]


class TritonPythonModel(BatchedPostprocess):
    """The reranking postprocess step of the ensemble."""

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """P(yes) per row."""
        return {SCORE: softmax(values.astype(np.float32))[:, 1:2].astype(np.float32)}
