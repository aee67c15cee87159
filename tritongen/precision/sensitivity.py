"""How much each weight MatMul loses when it alone is int8: the ranking the INT8 layer search keeps in float.

Quantising and loading one model per layer would take minutes. Instead one *switch model* holds every
weight MatMul twice over: each one's input and weight pass through a ``Where`` that picks either the
float tensor or its int8 round trip (quantise, then dequantise: the values an int8 kernel computes
with), chosen by a boolean input per layer. One session then measures any set of layers in int8. The
round trips copy the real quantised model's numbers: its int8 weights and scales, and for static
quantisation its calibrated activation scales; dynamic quantisation's per-batch activation scales are
computed by the same ``DynamicQuantizeLinear`` its kernels use.

Everything before a layer's switch computes in float while that layer is measured, so it need not be computed
again for each layer: the layers are measured in up to :data:`SEGMENTS` groups in graph order, each on the part
of the switch model from its group's first switch on, fed the tensors that cross that cut as one float run of
the whole model computed them (once per batch of texts). A layer then costs the rest of the model after it,
about half the model on average, and its figures are the whole switch model's up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.errors import ExportError
from tritongen.gates.accuracy import AccuracyReport, GateReference
from tritongen.precision.optimize import WeightMatMul

__all__ = ["LayerSensitivity", "SwitchModel", "build_switch_model", "measure_sensitivity", "rank_layers"]

# At most this many groups of layers, each measured on the switch model from its first switch on. More groups cut
# less off each layer's run on average ((1 + 1/groups) / 2 of the model), but each holds one more set of cut
# tensors per batch of texts in memory and loads one more session.
SEGMENTS = 8


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
        identities = [helper.make_node("Identity", [v], [o]) for v, o in zip(values, out, strict=True)]
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
    found: dict[str, LayerSensitivity] = {}
    for session, group in _segments(switch, layers):
        for layer in group:
            progress(f"sensitivity of weight MatMul {len(found) + 1}/{len(layers)} ({layer.layer})")
            accuracy = subset.measure(
                session, layer.layer, batch_dependent=batch_dependent, feeds=switch.feeds([layer.node])
            )
            found[layer.node] = LayerSensitivity(layer, accuracy)
    return [found[layer.node] for layer in layers]


def _segments(switch: SwitchModel, layers: Sequence[WeightMatMul]) -> Iterator[tuple[Any, list[WeightMatMul]]]:
    """(a runner with ``run(outputs, feeds)``, the layers it measures), one segment at a time, in graph order."""
    import onnx

    model = onnx.load(str(switch.path))
    nodes = list(model.graph.node)
    at = {node.input[0]: index for index, node in enumerate(nodes) if node.op_type == "If"}
    ordered = sorted(layers, key=lambda layer: at[switch.flags[layer.node]])
    size = -(-len(ordered) // max(1, min(SEGMENTS, len(ordered))))
    groups = [ordered[start : start + size] for start in range(0, len(ordered), size)]
    cuts = [at[switch.flags[group[0].node]] for group in groups]
    initializers = {init.name for init in model.graph.initializer}
    inputs = {value.name for value in model.graph.input}
    reads = [_consumed(node) for node in nodes]
    read = {cut: set().union(*reads[cut:]) for cut in cuts}  # what the nodes from each cut on read
    crossing = {cut: _crossing(nodes, cut, inputs, read[cut], model.graph.output) - initializers for cut in cuts}
    prefix = _Prefix(model, sorted(set().union(*crossing.values()) - inputs), switch)
    for cut, group in zip(cuts, groups, strict=True):
        path = switch.path.with_name(f"from_{cut}.onnx")
        suffix = _Suffix(model, nodes[cut:], sorted(crossing[cut]), read[cut], prefix, path)
        yield suffix, group
        suffix.session = None  # one segment's session at a time


def _consumed(node: Any) -> set[str]:
    """Every tensor ``node`` reads: its inputs, and the outer tensors its subgraphs (``If`` branches) read."""
    names = {name for name in node.input if name}
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            made = {output for inner in graph.node for output in inner.output}
            names |= {name for inner in graph.node for name in _consumed(inner)} - made
    return names


def _crossing(nodes: Sequence[Any], cut: int, inputs: set[str], read: set[str], outputs: Sequence[Any]) -> set[str]:
    """Of what the nodes from ``cut`` on ``read`` (and the graph's outputs), what the inputs or earlier nodes give."""
    given = inputs | {output for node in nodes[:cut] for output in node.output}
    return (read | {value.name for value in outputs}) & given


class _Prefix:
    """One float run of the whole switch model (every switch off) per batch of texts, giving every cut's tensors."""

    def __init__(self, model: Any, names: Sequence[str], switch: SwitchModel) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import helper

        self.names, self.off = list(names), switch.feeds([])
        outputs = len(model.graph.output)
        model.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in self.names)
        path = switch.path.with_name(f"{switch.path.stem}_prefix.onnx")
        try:
            onnx.save_model(model, str(path))
            self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        finally:
            del model.graph.output[outputs:]
            path.unlink(missing_ok=True)
        self._cache: dict[bytes, dict[str, np.ndarray]] = {}

    def tensors(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The cut tensors of the texts in ``feeds`` (their own inputs; the switches are ignored)."""
        own = {name: value for name, value in feeds.items() if name not in self.off}
        key = b"".join(name.encode() + repr(v.shape).encode() + v.tobytes() for name, v in sorted(own.items()))
        if key not in self._cache:
            values = self.session.run(self.names, {**own, **self.off})
            self._cache[key] = dict(zip(self.names, values, strict=True))
        return self._cache[key]


class _Suffix:
    """The switch model from one cut on, fed the tensors that cross the cut from the prefix run of the same texts.

    Its session is made at its first run, from the crossing tensors' types as that run gives them.
    """

    def __init__(
        self, model: Any, nodes: Sequence[Any], crossing: Sequence[str], read: set[str], prefix: _Prefix, path: Path
    ) -> None:
        self.model, self.nodes, self.crossing, self.read, self.prefix, self.path = (
            model, nodes, crossing, read, prefix, path,
        )  # fmt: skip
        self.session: Any = None

    def run(self, outputs: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        given = {**feeds, **self.prefix.tensors(feeds)}
        fed = {name: given[name] for name in self.crossing}
        if self.session is None:
            self.session = self._load(fed)
        return self.session.run(outputs, fed)

    def _load(self, fed: dict[str, np.ndarray]) -> Any:
        import onnx
        import onnxruntime as ort
        from onnx import helper

        graph = self.model.graph
        originals = {value.name: value for value in graph.input}
        inputs = [
            originals[name] if name in originals else helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(fed[name].dtype), [f"{name}_{i}" for i in range(fed[name].ndim)]
            )
            for name in self.crossing
        ]  # fmt: skip
        initializers = [init for init in graph.initializer if init.name in self.read]
        suffix = helper.make_model(
            helper.make_graph(self.nodes, f"{graph.name}_suffix", inputs, graph.output, initializers),
            opset_imports=self.model.opset_import, ir_version=self.model.ir_version,
        )  # fmt: skip
        suffix.functions.extend(self.model.functions)
        onnx.save_model(suffix, str(self.path))
        try:
            return ort.InferenceSession(str(self.path), providers=["CPUExecutionProvider"])
        finally:
            self.path.unlink(missing_ok=True)


def rank_layers(sensitivities: Sequence[LayerSensitivity]) -> list[LayerSensitivity]:
    """The most sensitive first: the most labels lost alone, then the largest continuous difference."""
    return sorted(sensitivities, key=lambda s: (_agreement(s.accuracy), -s.loss))


def _agreement(accuracy: AccuracyReport) -> float:
    value = accuracy.label_agreement if accuracy.gate != "cosine" else accuracy.cosine_min
    return 1.0 if value is None else value
