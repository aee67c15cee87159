"""What follows the pooling method: L2 normalisation and the Matryoshka cut, in each place they run.

The numpy of both is ``tritongen.steps._common``'s (``l2_normalize``, ``matryoshka_cut``), which the postprocess
step serves (copied into the repository) and the gateway applies; a build that folds the postprocess into the
graph serves the same math as ONNX nodes (:func:`embedding_tail`), proven equal to the numpy before it is served.
"""

from __future__ import annotations

import numpy as np

from tritongen.contract import EMBEDDING
from tritongen.model.fold import GraphTail, float_input, last_axis

__all__ = ["embedding_tail"]


def embedding_tail(source: str, width: int, *, normalize: bool) -> GraphTail:
    """``EMBEDDING``: the pooled vector, divided by max(L2 norm, 1e-12) when the checkpoint normalises."""
    from onnx import TensorProto, helper, numpy_helper

    x, nodes = float_input(source)
    initializers = []
    if normalize:
        eps = numpy_helper.from_array(np.array(1e-12, dtype=np.float32), "fold_eps")
        initializers = [last_axis(), eps]
        nodes += [
            helper.make_node("ReduceL2", [x, "fold_last_axis"], ["fold_norm"], keepdims=1, name="fold_norm"),
            helper.make_node("Max", ["fold_norm", "fold_eps"], ["fold_norm_safe"], name="fold_norm_safe"),
            helper.make_node("Div", [x, "fold_norm_safe"], [EMBEDDING], name="fold_normalize"),
        ]
    else:
        nodes.append(helper.make_node("Identity", [x], [EMBEDDING], name="fold_identity"))
    return GraphTail(tuple(nodes), {EMBEDDING: (TensorProto.FLOAT, width)}, tuple(initializers))
