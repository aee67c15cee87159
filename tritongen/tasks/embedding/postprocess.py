"""Embedding postprocess step: ``sentence_embedding`` [, ``DIMENSIONS``] -> ``EMBEDDING``.

L2-normalised when the checkpoint's sentence-transformers files ask for it (parameter ``normalize``). Where
the build offers ``DIMENSIONS`` (Matryoshka-trained families), a request may ask for the first N values of
its embeddings, renormalised (when the checkpoint normalises), as sentence-transformers' ``truncate_dim``
does; an N outside 1..width is that request's INVALID_ARG error.

A chunked build (``long_text: chunk``) also takes ``window_example`` and ``window_tokens``: each text's
pooled window embeddings are first combined into one (:func:`combine_windows`), then normalised and cut.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from _tritongen_step._common import pb_utils, respond_per_request
from _tritongen_step.contract import DIMENSIONS, EMBEDDING, WINDOW_EXAMPLE, WINDOW_TOKENS
from _tritongen_step.parameters import EmbeddingParameters
from _tritongen_step.postprocess import BatchedPostprocess, input_array
from _tritongen_step.vectors import l2_normalize, matryoshka_cut

__all__ = ["TritonPythonModel", "combine_windows"]


def combine_windows(vectors: np.ndarray, owners: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """One vector per text: the mean of its windows' ``vectors`` weighted by their text ``tokens``.

    ``owners`` [W] is the text of each window (0..N-1, every text has at least one), ``tokens`` [W] the tokens
    of each window that are not special tokens (tokens two windows share count in both). A window weighs at
    least 1 (an empty text's one window), and a text of one window keeps its vector exactly. Computed in
    float64, returned as float32 [N, D]; normalising is the caller's.
    """
    owners = np.asarray(owners).reshape(-1)
    weights = np.maximum(np.asarray(tokens).reshape(-1), 1).astype(np.float64)
    count = int(owners.max()) + 1 if owners.size else 0
    sums = np.zeros((count, vectors.shape[-1]), dtype=np.float64)
    np.add.at(sums, owners, weights[:, None] * vectors.astype(np.float64))
    totals = np.bincount(owners, weights=weights, minlength=count)
    return (sums / totals[:, None]).astype(np.float32)


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
        """Read whether to normalise, whether requests may carry ``DIMENSIONS``, and whether texts come in windows."""
        self.normalize = EmbeddingParameters.from_parameters(params).normalize
        names = getattr(self, "input_names", ())  # the fold proof calls setup alone
        self.dimensions = DIMENSIONS in names
        self.windowed = WINDOW_EXAMPLE in names

    def initialize(self, args: dict[str, str]) -> None:
        """Read the inputs the step takes, then the base's settings."""
        self.input_names = [inp["name"] for inp in json.loads(args["model_config"])["input"]]
        super().initialize(args)

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """The pooled vectors, normalised when asked."""
        return {EMBEDDING: l2_normalize(values) if self.normalize else values.astype(np.float32)}

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """One request's embeddings: its windows combined (chunked builds), then cut to its ``DIMENSIONS``."""
        values = input_array(request, self.input_name)
        if self.windowed:
            owners, tokens = input_array(request, WINDOW_EXAMPLE), input_array(request, WINDOW_TOKENS)
            values = combine_windows(values, owners, tokens)
        dims = requested_dimensions(_optional_input(request, DIMENSIONS)) if self.dimensions else None
        if dims is not None:
            return {EMBEDDING: np.ascontiguousarray(matryoshka_cut(values, dims, normalize=self.normalize))}
        return self.process(values)

    def execute(self, requests: list[Any]) -> list[Any]:
        """All requests as one array; with ``DIMENSIONS`` or windows, each request on its own."""
        if not (self.dimensions or self.windowed):
            return super().execute(requests)
        return respond_per_request(pb_utils, requests, self.output_names, self.process_request)


def _optional_input(request: Any, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()
