"""``cls-vector`` postprocess step: ``cls_vector`` -> ``VECTOR`` and ``NORM``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from _tritongen_step.parameters import StepParameters
from _tritongen_step.postprocess import BatchedPostprocess


@dataclass(frozen=True)
class ScaleParameters(StepParameters):
    """The step's one parameter, declared beside the step that reads it: what the vector is multiplied by."""

    scale: float


class TritonPythonModel(BatchedPostprocess):
    """The vector as the model gave it, times the build's scale, and its length."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        self.scale = ScaleParameters.from_parameters(params).scale

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        vectors = values.astype(np.float32) * self.scale
        return {"VECTOR": vectors, "NORM": np.linalg.norm(vectors, axis=-1, keepdims=True).astype(np.float32)}
