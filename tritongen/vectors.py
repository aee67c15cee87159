"""The vector maths every place that serves or checks outputs shares, with numpy alone.

The postprocess steps serve it (copied beside them as ``_tritongen_step/vectors.py``), the gateway applies it to
vectors it shortens or compares, the gates score with it, and ``tritongen.pooling.heads`` folds the same maths into
the graph as ONNX nodes. It imports nothing of tritongen: a served step has only its own folder.
"""

from __future__ import annotations

import numpy as np

__all__ = ["l2_normalize", "matryoshka_cut", "softmax"]


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax over ``axis``; float16/bfloat16 (and ints) go to float32, -inf entries to 0.

    The one softmax of the steps and the gate: classification scores, NER token scores, QA span scores.
    """
    logits = np.asarray(logits)
    if logits.dtype not in (np.float32, np.float64):
        logits = logits.astype(np.float32)
    exp = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return exp / exp.sum(axis=axis, keepdims=True)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows at unit length, as sentence-transformers' Normalize module scales them (an all-zero row stays zero).

    In float32 (float16 and bfloat16 outputs too), or in float64 where given float64 (cosines computed exactly).
    """
    vectors = vectors.astype(np.promote_types(vectors.dtype, np.float32), copy=False)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def matryoshka_cut(values: np.ndarray, dimensions: int, *, normalize: bool) -> np.ndarray:
    """The first ``dimensions`` values of each row (Matryoshka), renormalised when ``normalize``.

    Raises ValueError for a ``dimensions`` outside 1..width (the request's input error).
    """
    width = values.shape[-1]
    if not 1 <= dimensions <= width:
        raise ValueError(f"DIMENSIONS must be between 1 and {width}, got {dimensions}")
    cut = values[..., :dimensions]
    return l2_normalize(cut) if normalize else cut.astype(np.float32)
