"""Embedding postprocess step: ``sentence_embedding`` [, ``DIMENSIONS``] -> ``EMBEDDING``.

L2-normalised when the checkpoint's sentence-transformers files ask for it (parameter ``normalize``). Where
the build offers ``DIMENSIONS`` (Matryoshka-trained families), a request may ask for the first N values of
its embeddings, renormalised (when the checkpoint normalises), as sentence-transformers' ``truncate_dim``
does; an N outside 1..width is that request's INVALID_ARG error.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # outside the server: importable for tests and build-time checks
    pb_utils = None

try:  # in the server: the shared modules are copied next to this model.py
    from _common import input_error
    from postprocess import BatchedPostprocess, input_array, l2_normalize, truncate
except ImportError:
    from tritongen.steps._common import input_error
    from tritongen.steps.postprocess import BatchedPostprocess, input_array, l2_normalize, truncate

__all__ = ["TritonPythonModel", "truncate"]


def requested_dimensions(array: np.ndarray | None) -> int | None:
    """The one N a request asks for (None: the whole embedding); rows of one request must agree."""
    if array is None:
        return None
    values = {int(v) for v in np.asarray(array).reshape(-1)}
    if len(values) != 1:
        raise ValueError(f"DIMENSIONS must be the same for every row of a request, got {sorted(values)}")
    return values.pop()


class TritonPythonModel(BatchedPostprocess):
    """The embedding postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read whether to normalise, and whether requests may carry ``DIMENSIONS``."""
        self.normalize = params.get("normalize", "false") == "true"
        self.dimensions = "DIMENSIONS" in getattr(self, "input_names", ())  # the fold proof calls setup alone

    def initialize(self, args: dict[str, str]) -> None:
        """Read the inputs the step takes, then the base's settings."""
        self.input_names = [inp["name"] for inp in json.loads(args["model_config"])["input"]]
        super().initialize(args)

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """The pooled vectors, normalised when asked."""
        return {"EMBEDDING": l2_normalize(values) if self.normalize else values.astype(np.float32)}

    def execute(self, requests: list[Any]) -> list[Any]:
        """Without ``DIMENSIONS`` all requests as one array; with it, each request cut to its own width."""
        if not self.dimensions:
            return super().execute(requests)
        arrays = [input_array(r, self.input_name) for r in requests]
        merged = self.process(np.concatenate(arrays, axis=0))["EMBEDDING"]
        responses = []
        start = 0
        for request, array in zip(requests, arrays):
            rows = merged[start : start + array.shape[0]]
            start += array.shape[0]
            try:
                dims = requested_dimensions(_optional_input(request, "DIMENSIONS"))
                vectors = rows if dims is None else truncate(array, dims, normalize=self.normalize)
            except ValueError as exc:
                responses.append(pb_utils.InferenceResponse(error=input_error(pb_utils, str(exc))))
                continue
            tensor = pb_utils.Tensor("EMBEDDING", np.ascontiguousarray(vectors, dtype=np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses


def _optional_input(request: Any, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()
