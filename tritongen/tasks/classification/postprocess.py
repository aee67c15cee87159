"""Classification postprocess step: ``logits`` -> ``LABEL``, ``SCORE``, ``PROBABILITIES`` [, ``LABELS``].

The activation is the transformers pipeline's choice (``function``: softmax, or sigmoid for one label or
multi-label problems). Parameters: ``function``, ``labels_file``, and for multi-label models ``threshold``
and ``top_k`` (which labels go into ``LABELS``).
"""

from __future__ import annotations

import numpy as np

from _tritongen_step.postprocess import BatchedPostprocess, classify

__all__ = ["TritonPythonModel"]


class TritonPythonModel(BatchedPostprocess):
    """The classification postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read the activation, the labels and the multi-label selection."""
        self.function = params.get("function", "softmax")
        self.label_names = self.labels(params, args)
        self.threshold = float(params.get("threshold", "0.5"))
        self.top_k = int(params.get("top_k", "0"))

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Scores, best label and best score per row."""
        return classify(values, self.function, self.label_names, threshold=self.threshold, top_k=self.top_k)
