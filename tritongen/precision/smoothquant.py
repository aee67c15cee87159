"""SmoothQuant-style activation balancing: move the activations' outlier channels into the weights.

int8 activations get one scale per tensor, so a few channels with large values (transformers have
them, notably in LayerNorm and GELU outputs) leave few levels for all the others. Dividing each input
channel ``j`` of a weight MatMul by ``s_j`` and multiplying row ``j`` of its weight by ``s_j`` leaves
the product unchanged in float, while ``s_j = max|x_j|^alpha / max|W_j|^(1 - alpha)`` evens out the
ranges both sides have to hold (Xiao et al., 2022, "SmoothQuant"). ONNX Runtime offers SmoothQuant only
through Intel Neural Compressor, which this project does not install; this is the same transformation,
with the division an explicit ``Mul`` per input (a BERT-style LayerNorm output is also the residual
stream, so the scales cannot be folded into it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SMOOTHING_TEXTS", "smooth_activations"]

SMOOTHING_TEXTS = 64  # activation ranges from a bounded sample: one float pass, reduced batch by batch


def smooth_activations(
    source: Path, target: Path, *, nodes: Sequence[str], encoder: Any, texts: Sequence[str], alpha: float = 0.5
) -> int:
    """Write ``source`` with the inputs of the weight MatMuls ``nodes`` balanced to ``target``.

    Activation ranges are measured on (at most :data:`SMOOTHING_TEXTS` of) ``texts``; MatMuls reading
    the same activation share its scales. Returns how many activations were balanced.
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    weights = {init.name: init for init in model.graph.initializer}
    chosen = set(nodes)
    readers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        if node.name in chosen and node.op_type == "MatMul" and node.input[1] in weights:
            readers.setdefault(node.input[0], []).append(node)
    ranges = _activation_ranges(source, list(readers), encoder, texts)
    for x, matmuls in readers.items():
        rows = [numpy_helper.to_array(weights[m.input[1]]) for m in matmuls]
        if rows[0].ndim != 2 or x not in ranges:
            continue
        weight_range = np.max([np.abs(w).max(axis=1) for w in rows], axis=0)
        scales = ranges[x] ** alpha / np.maximum(weight_range, 1e-5) ** (1 - alpha)
        scales = np.where(np.isfinite(scales) & (scales > 1e-5), scales, 1.0).astype(np.float32)
        inverse, smoothed = f"{x}_smoothing", f"{x}_smoothed"
        model.graph.initializer.append(numpy_helper.from_array((1.0 / scales).astype(np.float32), inverse))
        for matmul, weight in zip(matmuls, rows, strict=True):
            weights[matmul.input[1]].CopyFrom(
                numpy_helper.from_array((weight * scales[:, None]).astype(np.float32), matmul.input[1])
            )
            matmul.input[0] = smoothed
        first = min(list(model.graph.node).index(m) for m in matmuls)
        model.graph.node.insert(first, helper.make_node("Mul", [x, inverse], [smoothed], name=f"{x}_Smooth"))
    onnx.save_model(model, str(target))
    return len(ranges)


def _activation_ranges(source: Path, tensors: Sequence[str], encoder: Any, texts: Sequence[str]) -> dict[str, Any]:
    """The largest absolute value of each channel (last axis) of ``tensors`` over ``texts``, in float."""
    import onnx
    import onnxruntime as ort

    if not tensors or not texts:
        return {}
    model = onnx.load(str(source))
    outputs = {o.name for o in model.graph.output}
    for name in tensors:
        if name not in outputs:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    encodings = sorted(encoder.encode(list(texts[:SMOOTHING_TEXTS])), key=lambda e: len(e.ids))
    ranges: dict[str, Any] = {}
    for start in range(0, len(encodings), 16):
        values = session.run(list(tensors), encoder.pack(encodings[start : start + 16]))
        for name, value in zip(tensors, values, strict=True):
            channel_max = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            ranges[name] = channel_max if name not in ranges else np.maximum(ranges[name], channel_max)
    return ranges
