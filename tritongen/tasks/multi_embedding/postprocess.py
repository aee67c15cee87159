"""Multi-embedding postprocess step: the packed token rows -> dense, sparse and ColBERT outputs (BGE-M3).

Reads ``token_vectors`` ([texts, tokens, 1 + width]: each token's sparse weight, then token 0's hidden state or
another token's ColBERT vector), with ``input_ids`` and ``attention_mask``. Per text, as FlagEmbedding's
``BGEM3FlagModel``:

- ``EMBEDDING``: the first token's hidden state, L2-normalised;
- ``SPARSE_INDICES``/``SPARSE_VALUES``: the real tokens' weights, the max per token id, leaving out the ids in
  ``unused_token_ids`` (cls, eos, pad, unk) and zeros, then the ``top_k``/``threshold`` settings; padded within
  the request with index -1 and value 0;
- ``COLBERT``: the ColBERT vectors of the real tokens after the first, each L2-normalised, padded with zero rows to
  the request's longest; ``COLBERT_LENGTH``: how many are real.

A client may ask the ensemble for any of these outputs (Triton's requested outputs). The step computes only those
its own request names; Triton's ensemble names every output it maps, so there it computes them all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from _tritongen_step._common import pb_utils, respond_per_request
from _tritongen_step.contract import (
    ATTENTION_MASK,
    COLBERT,
    COLBERT_LENGTH,
    EMBEDDING,
    INPUT_IDS,
    SPARSE_INDICES,
    SPARSE_VALUES,
)
from _tritongen_step.parameters import MultiVectorParameters, SelectionParameters
from _tritongen_step.postprocess import TritonPythonModel as PostprocessBase
from _tritongen_step.postprocess import input_array
from _tritongen_step.sparse import pad_rows, token_weights
from _tritongen_step.vectors import l2_normalize

__all__ = ["TritonPythonModel"]

SPARSE = (SPARSE_INDICES, SPARSE_VALUES)
COLBERTS = (COLBERT, COLBERT_LENGTH)


class TritonPythonModel(PostprocessBase):
    """The multi-embedding postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read the widths, the token ids the sparse side leaves out, and which weights to keep."""
        heads = MultiVectorParameters.from_parameters(params)
        self.hidden, self.colbert_dim, self.unused = heads.hidden_size, heads.colbert_dim, tuple(heads.unused_token_ids)
        self.selection = SelectionParameters.from_parameters(params)

    def process(self, packed: np.ndarray, ids: np.ndarray, mask: np.ndarray, wanted: set[str]) -> dict[str, np.ndarray]:
        """The ``wanted`` outputs of one request's texts."""
        packed = np.asarray(packed, dtype=np.float32)
        tokens = packed.shape[1]
        real = np.asarray(mask)[:, :tokens] > 0
        outputs: dict[str, np.ndarray] = {}
        if EMBEDDING in wanted:
            outputs[EMBEDDING] = l2_normalize(packed[:, 0, 1 : 1 + self.hidden])
        if wanted & set(SPARSE):
            ids = np.asarray(ids)[:, :tokens]
            rows = [
                token_weights(packed[i, real[i], 0], ids[i, real[i]], self.unused, top_k=self.selection.top_k,
                              threshold=self.selection.threshold)
                for i in range(len(packed))
            ]  # fmt: skip
            outputs[SPARSE_INDICES], outputs[SPARSE_VALUES] = pad_rows(rows)
        if wanted & set(COLBERTS):
            outputs[COLBERT], outputs[COLBERT_LENGTH] = self.colbert(packed, real)
        return outputs

    def colbert(self, packed: np.ndarray, real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each text's normalised ColBERT vectors (its real tokens after the first), zero rows to the longest."""
        vectors = [l2_normalize(packed[i, 1:, 1 : 1 + self.colbert_dim][real[i, 1:]]) for i in range(len(packed))]
        lengths = np.array([[len(v)] for v in vectors], dtype=np.int32).reshape(-1, 1)
        padded = np.zeros((len(vectors), max([1, *lengths.reshape(-1)]), self.colbert_dim), dtype=np.float32)
        for i, rows in enumerate(vectors):
            padded[i, : len(rows)] = rows
        return padded, lengths

    def execute(self, requests: list[Any]) -> list[Any]:
        """One response per request, with the outputs it asked for."""

        def process(request: Any) -> dict[str, np.ndarray]:
            asked = set(request.requested_output_names())
            names = [n for n in self.output_names if n in asked] or self.output_names
            arrays = [input_array(request, name) for name in (self.input_name, INPUT_IDS, ATTENTION_MASK)]
            outputs = self.process(*arrays, set(names))
            return {name: outputs[name] for name in names}

        return respond_per_request(pb_utils, requests, None, process)
