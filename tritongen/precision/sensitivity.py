"""How much each weight MatMul loses when it alone is int8: the ranking the INT8 layer search keeps in float.

Quantising and loading one model per layer would take minutes. Instead one *switch model* holds every
weight MatMul twice over: each one's input and weight pass through a ``Where`` that picks either the
float tensor or its int8 round trip (quantise, then dequantise: the values an int8 kernel computes
with), chosen by a boolean input per layer. One session then measures any set of layers in int8. The
round trips copy the real quantised model's numbers: its int8 weights and scales, and for static
quantisation its calibrated activation scales; dynamic quantisation's per-batch activation scales are
computed by the same ``DynamicQuantizeLinear`` its kernels use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.errors import ExportError
from tritongen.gates.accuracy import AccuracyReport, GateReference
from tritongen.precision.optimize import WeightMatMul

__all__ = ["LayerSensitivity", "SwitchModel", "build_switch_model", "measure_sensitivity", "rank_layers"]


@dataclass(frozen=True)
class LayerSensitivity:
    """The gate's figures with ``layer`` alone in int8 (on a subset of the validation texts)."""

    layer: WeightMatMul
    accuracy: AccuracyReport

    @property
    def loss(self) -> float:
        """The continuous difference from FP32 (larger: more sensitive)."""
        return self.accuracy.loss or 0.0


@dataclass(frozen=True)
class SwitchModel:
    """A model where a boolean input per weight MatMul (``flags[node]``) turns its int8 round trip on."""

    path: Path
    flags: dict[str, str]  # MatMul node -> boolean input name

    def feeds(self, int8_nodes: Sequence[str]) -> dict[str, np.ndarray]:
        """The switch inputs for exactly ``int8_nodes`` in int8."""
        chosen = set(int8_nodes)
        return {flag: np.array(node in chosen) for node, flag in self.flags.items()}


def build_switch_model(float_model: Path, quantized: Path, target: Path, *, scheme: str) -> SwitchModel:
    """Write the switch model of ``float_model`` to ``target``, with the int8 numbers of ``quantized``.

    ``quantized`` is ``float_model`` with every weight MatMul quantised by ``scheme`` (``dynamic`` or
    ``static``), per channel, by ONNX Runtime: its ``<weight>_quantized``/``_scale``/``_zero_point``
    initializers give the weights' round trip, and (static) the ``QuantizeLinear`` of each activation
    gives its calibrated scale.
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(float_model))
    int8 = onnx.load(str(quantized))
    numbers = {init.name: init for init in int8.graph.initializer}
    quantizers = {node.input[0]: node for node in int8.graph.node if node.op_type == "QuantizeLinear"}
    weights = {init.name for init in model.graph.initializer}
    nodes: list[Any] = []
    flags: dict[str, str] = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and len(node.input) == 2 and node.input[1] in weights:
            x, w = node.input
            if f"{w}_quantized" not in numbers:
                raise ExportError(f"the int8 model has no quantised weight for `{w}` ({node.name})")
            flag = flags[node.name] = f"int8_switch_{len(flags)}"
            model.graph.input.append(helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []))
            model.graph.initializer.append(numpy_helper.from_array(_dequantized_weight(numbers, w), f"{w}_int8"))
            # An If runs only the branch its flag picks: the round trips of the layers left in float cost nothing
            # (a Where computed every layer's on every run, about 40% more per measurement).
            then = _activation_round_trip(x, scheme, quantizers, numbers, model, prefix=f"{flag}_")
            nodes.append(_switch(flag, then, [f"{flag}_{x}_int8", f"{w}_int8"], [x, w], [f"{x}_{flag}", f"{w}_{flag}"]))
            node.input[:] = [f"{x}_{flag}", f"{w}_{flag}"]
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save_model(model, str(target))
    return SwitchModel(target, flags)


def _switch(flag: str, then: list, chosen: list[str], otherwise: list[str], outputs: list[str]) -> Any:
    """``If(flag)``: ``then``'s nodes and their ``chosen`` outputs, else the tensors ``otherwise`` as they are."""
    from onnx import helper

    def branch(name: str, body: list, values: list[str]) -> Any:
        out = [f"{name}_{i}" for i in range(len(values))]
        identities = [helper.make_node("Identity", [v], [o]) for v, o in zip(values, out)]
        return helper.make_graph(
            body + identities, name, [], [helper.make_value_info(o, helper.TypeProto()) for o in out]
        )

    return helper.make_node(
        "If", [flag], outputs, then_branch=branch(f"{flag}_int8", then, chosen),
        else_branch=branch(f"{flag}_float", [], otherwise),
    )  # fmt: skip


def _dequantized_weight(numbers: dict[str, Any], weight: str) -> np.ndarray:
    """The float values the int8 weight stands for: (q - zero point) * scale, per output channel."""
    from onnx import numpy_helper

    q, scale, zero = (numpy_helper.to_array(numbers[f"{weight}{s}"]) for s in ("_quantized", "_scale", "_zero_point"))
    return ((q.astype(np.float32) - zero.astype(np.float32)) * scale.astype(np.float32)).astype(np.float32)


def _activation_round_trip(
    x: str, scheme: str, quantizers: dict[str, Any], numbers: dict[str, Any], model: Any, *, prefix: str
) -> list:
    """Nodes that quantise and dequantise activation ``x`` as the int8 model does, into ``{prefix}{x}_int8``."""
    from onnx import helper

    out = f"{prefix}{x}_int8"
    if scheme == "dynamic":  # the scale of each run's whole tensor, as DynamicQuantizeLinear computes it
        q, scale, zero = f"{prefix}{x}_dq", f"{prefix}{x}_dq_scale", f"{prefix}{x}_dq_zero_point"
        return [
            helper.make_node("DynamicQuantizeLinear", [x], [q, scale, zero]),
            helper.make_node("DequantizeLinear", [q, scale, zero], [out]),
        ]
    quantizer = quantizers.get(x)
    if quantizer is None:
        raise ExportError(f"the static int8 model has no QuantizeLinear for activation `{x}`")
    for name in quantizer.input[1:]:
        if all(init.name != name for init in model.graph.initializer):
            model.graph.initializer.append(numbers[name])
    return [
        helper.make_node("QuantizeLinear", [x, *quantizer.input[1:]], [f"{prefix}{x}_q"]),
        helper.make_node("DequantizeLinear", [f"{prefix}{x}_q", *quantizer.input[1:]], [out]),
    ]


def measure_sensitivity(
    switch: SwitchModel,
    layers: Sequence[WeightMatMul],
    subset: GateReference,
    *,
    batch_dependent: bool,
    progress: Callable[[str], None] = lambda message: None,
) -> list[LayerSensitivity]:
    """Each of ``layers`` alone in int8, measured on ``subset``; in graph order."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(switch.path), providers=["CPUExecutionProvider"])
    found = []
    for index, layer in enumerate(layers, 1):
        progress(f"sensitivity of weight MatMul {index}/{len(layers)} ({layer.layer})")
        accuracy = subset.measure(
            session, layer.layer, batch_dependent=batch_dependent, feeds=switch.feeds([layer.node])
        )
        found.append(LayerSensitivity(layer, accuracy))
    return found


def rank_layers(sensitivities: Sequence[LayerSensitivity]) -> list[LayerSensitivity]:
    """The most sensitive first: the most labels lost alone, then the largest continuous difference."""
    return sorted(sensitivities, key=lambda s: (_agreement(s.accuracy), -s.loss))


def _agreement(accuracy: AccuracyReport) -> float:
    value = accuracy.label_agreement if accuracy.gate != "cosine" else accuracy.cosine_min
    return 1.0 if value is None else value
