"""Classification postprocess step: ``logits`` -> ``LABEL``, ``SCORE``, ``PROBABILITIES`` [, ``LABELS``].

The activation is the transformers pipeline's choice (``function``: softmax, or sigmoid for one label or
multi-label problems). Parameters: ``function``, ``labels_file``, and for multi-label models ``threshold``
and ``top_k`` (which labels go into ``LABELS``).
"""

from __future__ import annotations

import numpy as np

from _tritongen_step.parameters import ClassifierParameters, SelectionParameters
from _tritongen_step.postprocess import BatchedPostprocess, classify

__all__ = ["TritonPythonModel"]


class TritonPythonModel(BatchedPostprocess):
    """The classification postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read the activation, the labels and the multi-label selection."""
        self.function = ClassifierParameters.from_parameters(params).function
        self.label_names = self.labels(params, args)
        self.selection = SelectionParameters.from_parameters(params)

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Scores, best label and best score per row."""
        selection = self.selection
        return classify(values, self.function, self.label_names, threshold=selection.threshold, top_k=selection.top_k)
