"""``cls-vector`` postprocess step: ``cls_vector`` -> ``VECTOR`` and ``NORM``."""

from __future__ import annotations

import numpy as np

from _tritongen_step.postprocess import BatchedPostprocess


class TritonPythonModel(BatchedPostprocess):
    """The vector as the model gave it, times the build's scale, and its length."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        self.scale = float(params["scale"])

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        vectors = values.astype(np.float32) * self.scale
        return {"VECTOR": vectors, "NORM": np.linalg.norm(vectors, axis=-1, keepdims=True).astype(np.float32)}
