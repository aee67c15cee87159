"""Embedding postprocess step: ``sentence_embedding`` -> ``EMBEDDING``.

L2-normalised when the checkpoint's sentence-transformers files ask for it (parameter ``normalize``).
"""

from __future__ import annotations

import numpy as np

try:  # in the server: the shared modules are copied next to this model.py
    from postprocess import BatchedPostprocess, l2_normalize
except ImportError:
    from tritongen.triton_models.postprocess import BatchedPostprocess, l2_normalize

__all__ = ["TritonPythonModel"]


class TritonPythonModel(BatchedPostprocess):
    """The embedding postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read whether to normalise."""
        self.normalize = params.get("normalize", "false") == "true"

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """The pooled vectors, normalised when asked."""
        return {"EMBEDDING": l2_normalize(values) if self.normalize else values.astype(np.float32)}
