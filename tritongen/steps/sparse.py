"""Sparse embeddings as (indices, values): the rows' selection and their padding within one request.

Shared by the postprocess steps of ``sparse-embedding`` (a vocabulary-sized row per text) and ``multi-embedding``
(one weight per token, merged per token id). Per text, indices ascend; the texts of one request are padded to the
longest with index -1 and value 0 (at least one entry, so no tensor is empty).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["PAD_INDEX", "SparseRow", "keep", "pad_rows", "token_weights", "vocabulary_rows"]

PAD_INDEX = -1
SparseRow = tuple[np.ndarray, np.ndarray]  # (indices int64, values float32), indices ascending


def keep(indices: np.ndarray, values: np.ndarray, *, top_k: int = 0, threshold: float = 0.0) -> SparseRow:
    """The entries above ``threshold``, at most ``top_k`` of the largest (0: all), sorted by index."""
    chosen = values > threshold
    indices, values = indices[chosen], values[chosen]
    if top_k and len(values) > top_k:
        best = np.argsort(-values, kind="stable")[:top_k]
        indices, values = indices[best], values[best]
    order = np.argsort(indices, kind="stable")
    return indices[order].astype(np.int64), values[order].astype(np.float32)


def vocabulary_rows(weights: np.ndarray, *, top_k: int = 0, threshold: float = 0.0) -> list[SparseRow]:
    """One sparse row per vocabulary-sized row of ``weights`` ([texts, vocabulary])."""
    columns = np.arange(weights.shape[-1], dtype=np.int64)
    return [keep(columns, np.asarray(row, dtype=np.float32), top_k=top_k, threshold=threshold) for row in weights]


def token_weights(
    weights: np.ndarray, ids: np.ndarray, unused: Iterable[int], *, top_k: int = 0, threshold: float = 0.0
) -> SparseRow:
    """One text's token weights merged per token id by their max, as FlagEmbedding's ``_process_token_weights``.

    ``weights`` and ``ids`` are the text's real tokens; ids in ``unused`` (its cls, eos, pad and unk tokens) and
    weights of 0 are left out.
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    weights = np.asarray(weights, dtype=np.float32).reshape(-1)
    wanted = ~np.isin(ids, np.fromiter(unused, dtype=np.int64)) & (weights > 0)
    ids, weights = ids[wanted], weights[wanted]
    unique, where = np.unique(ids, return_inverse=True)
    merged = np.zeros(len(unique), dtype=np.float32)
    np.maximum.at(merged, where, weights)
    return keep(unique, merged, top_k=top_k, threshold=threshold)


def pad_rows(rows: Sequence[SparseRow]) -> tuple[np.ndarray, np.ndarray]:
    """``SPARSE_INDICES`` [texts, longest] (int64, -1 as padding) and ``SPARSE_VALUES`` (float32, 0 as padding)."""
    width = max([1, *(len(indices) for indices, _ in rows)])
    indices = np.full((len(rows), width), PAD_INDEX, dtype=np.int64)
    values = np.zeros((len(rows), width), dtype=np.float32)
    for row, (row_indices, row_values) in enumerate(rows):
        indices[row, : len(row_indices)] = row_indices
        values[row, : len(row_values)] = row_values
    return indices, values
