"""The INT8 search's parts on a tiny BERT: layer ranking, the greedy walk, the switch model, balancing, the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tritongen.encoding import TextEncoder
from tritongen.gates.accuracy import AccuracyReport, GateReference
from tritongen.gates.parity import ReferenceModel
from tritongen.precision.fusion import FLOAT_TOLERANCE, QUANTIZED_TOLERANCE, fuse_attention, fuse_attention_blocks
from tritongen.precision.int8_report import Candidate, SearchReport, Trial
from tritongen.precision.int8_search import SearchFeedback, SearchSettings, ServedGate, search_int8, smallest_passing
from tritongen.precision.optimize import (
    Int8Recipe,
    WeightMatMul,
    carry_dimension_names,
    prepare_for_quantization,
    quantize_int8,
    weight_matmuls,
)
from tritongen.precision.sensitivity import LayerSensitivity, build_switch_model, measure_sensitivity, rank_layers
from tritongen.precision.smoothquant import smooth_activations

TEXTS = [f"review {i}: {'great' if i % 3 else 'awful'} product, would {'' if i % 2 else 'not '}buy" for i in range(40)]
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


@pytest.fixture(scope="module")
def tiny(tiny_factory, tmp_path_factory):
    """A tiny BERT classifier exported to ONNX and prepared for quantisation, with its encoder and module."""
    from transformers import AutoTokenizer

    from tritongen.model.checkpoint import inspect_checkpoint
    from tritongen.model.export import export_onnx
    from tritongen.tasks import get_task

    path = tiny_factory("bert")
    work = tmp_path_factory.mktemp("int8")
    module = get_task("classification").load_module(inspect_checkpoint(str(path)))
    encoder = TextEncoder(str(path / "tokenizer.json"), 64, [16, 32, 64], input_names=INPUTS)
    export_onnx(module, encoder(["a b", "a longer text here"]), "logits", work / "fp32.onnx")
    prepared = prepare_for_quantization(work / "fp32.onnx", work)
    return {
        "work": work, "fp32": work / "fp32.onnx", "prepared": prepared, "encoder": encoder, "module": module,
        "hf_tokenizer": AutoTokenizer.from_pretrained(str(path)), "layers": weight_matmuls(prepared),
    }  # fmt: skip


def _dims(model, name):
    tensors = [*model.graph.input, *model.graph.value_info, *model.graph.output]
    return next([d.dim_param or d.dim_value for d in t.type.tensor_type.shape.dim] for t in tensors if t.name == name)


def test_carry_dimension_names_renames_a_symbol_only_where_the_exporter_names_it_one_way():
    from onnx import TensorProto, helper

    def graph(value_info):
        nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
        nodes += [helper.make_node("Relu", ["b"], ["c"])]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 4])
        c = helper.make_tensor_value_info("c", TensorProto.FLOAT, None)
        infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n, dims in value_info.items()]
        return helper.make_model(helper.make_graph(nodes, "g", [x], [c], value_info=infos))

    exported = graph({"a": ["batch", "sequence", 4], "b": ["batch", "sequence", 4]})
    # unk__1 reads as "sequence" in a and b; unk__2 as "batch" in a and "sequence" in b: ambiguous, kept
    inferred = graph({"a": ["unk__2", "unk__1", 4], "b": ["unk__2", "unk__1", 4], "c": ["unk__2", "unk__3", 4]})
    inferred.graph.value_info[1].type.tensor_type.shape.dim[0].dim_param = "unk__2"
    exported.graph.value_info[1].type.tensor_type.shape.dim[0].dim_param = "sequence"

    assert carry_dimension_names(exported.graph, inferred.graph) == 2
    assert _dims(inferred, "a") == ["unk__2", "sequence", 4] and _dims(inferred, "b") == ["unk__2", "sequence", 4]
    assert _dims(inferred, "c") == ["unk__2", "unk__3", 4]  # a symbol the exporter never named stays
    assert carry_dimension_names(exported.graph, inferred.graph) == 0


def test_prepared_model_keeps_the_exporters_dimension_names_on_the_residual_stream(tiny):
    """ONNX's inference names unknown dimensions afresh; the prepared model reads them as the exporter did."""
    exported, prepared = onnx.load(str(tiny["fp32"])), onnx.load(str(tiny["prepared"]))
    produced = {output: node for node in prepared.graph.node for output in node.output}
    adds = [
        produced[n.input[0]]
        for n in prepared.graph.node
        if n.op_type == "LayerNormalization"
        and produced.get(n.input[0]) is not None
        and produced[n.input[0]].op_type == "Add"
    ]
    symbols = {d for t in exported.graph.input for d in _dims(exported, t.name) if isinstance(d, str)}
    residual = [add for add in adds if _dims(prepared, add.input[0]) == _dims(prepared, add.input[1])]
    assert len(residual) >= len(adds) - 1 >= 1
    assert all(set(_dims(prepared, add.input[0])[:2]) <= symbols for add in residual)


def _logits(path_or_session, encoder, feeds=None):
    session = path_or_session if hasattr(path_or_session, "run") else ort.InferenceSession(str(path_or_session))
    return session.run(None, {**encoder(TEXTS[:8]), **(feeds or {})})[0]


def test_smallest_passing_doubles_then_bisects_when_more_layers_help():
    calls = []

    def passes(count):
        calls.append(count)
        return count >= 5

    assert smallest_passing(35, passes) == 5
    assert calls == [1, 2, 4, 8, 6, 5]


def test_smallest_passing_stops_bisecting_within_a_quarter_of_the_count():
    calls = []

    def passes(count):
        calls.append(count)
        return count >= 17

    assert smallest_passing(35, passes) == 20  # 17 would pass too: two more builds to save 3 float layers
    assert calls == [1, 2, 4, 8, 16, 32, 24, 20]


def test_smallest_passing_is_none_when_even_all_but_one_layer_in_float_fails():
    calls = []
    assert smallest_passing(11, lambda count: calls.append(count) or False) is None
    assert calls == [1, 2, 4, 8, 11]
    assert smallest_passing(0, lambda count: True) is None  # one layer only: keeping it in float is not int8


def _report(label_agreement: float, loss: float, texts: int = 32, gate: str = "labels") -> AccuracyReport:
    return AccuracyReport(
        "x", gate, texts, label_agreement=label_agreement, max_probability_diff=loss * 3, loss=loss
    )  # fmt: skip


def test_rank_layers_puts_lost_labels_first_then_the_larger_difference():
    layers = [WeightMatMul(f"n{i}", f"layer{i}", False) for i in range(4)]
    found = [
        LayerSensitivity(layers[0], _report(1.0, 0.010)),
        LayerSensitivity(layers[1], _report(0.97, 0.002)),
        LayerSensitivity(layers[2], _report(1.0, 0.020)),
        LayerSensitivity(layers[3], _report(0.97, 0.004)),
    ]
    assert [item.layer.layer for item in rank_layers(found)] == ["layer3", "layer1", "layer2", "layer0"]


class _FakeGate:
    """A gate that passes only while the ``sensitive`` weight MatMuls stay in float.

    Whole models are judged by the nodes still float in the file; the switch model by its switches
    (one per weight MatMul, in graph order), each layer with its own designed difference.
    """

    def __init__(self, layers, sensitive):
        self.layers, self.sensitive = layers, set(sensitive)
        self.count = 40
        self.until_failed = []

    def subset(self, count):
        return self

    def measure(self, model, variant, *, batch_dependent=False, feeds=None, until_failed=False):
        self.until_failed.append((variant, until_failed))
        if feeds is not None:  # the switch model: one layer on
            on = [layer.node for i, layer in enumerate(self.layers) if feeds[f"int8_switch_{i}"]]
            loss = sum(0.05 if node in self.sensitive else 0.001 for node in on)
            return _report(1.0 - 10 * loss, loss, texts=self.count)
        graph = onnx.load(str(model), load_external_data=False).graph
        weights = {init.name for init in graph.initializer}
        float_nodes = {n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights}
        lost = len(self.sensitive - float_nodes)
        return _report(1.0 - 0.02 * lost, 0.01 * lost + 0.001, texts=self.count)


def test_search_keeps_exactly_the_sensitive_layers_in_float_when_the_gate_needs_them(tiny, tmp_path):
    layers = tiny["layers"]
    sensitive = [layers[5].node, layers[1].node, layers[9].node]
    gate = _FakeGate(layers, sensitive)
    target = tmp_path / "model.onnx"
    lines = []
    settings = SearchSettings(gate, tiny["encoder"], TEXTS, schemes=("dynamic",), speed_texts=TEXTS[:8])
    report = search_int8(tiny["fp32"], target, settings, SearchFeedback(announce=lines.append))
    labels = [trial.candidate.label for trial in report.trials]
    # one line as each candidate is decided, with its figures, after one saying what the search will do
    assert lines[0].startswith(f"INT8 search: {len(layers)} weight MatMuls;")
    assert any(line.startswith(f"INT8 search: {len(layers)} weight MatMuls ranked by sensitivity") for line in lines)
    decided = [line for line in lines if line.startswith("INT8 candidate ")]
    assert len(decided) == len(labels)
    for number, (line, trial) in enumerate(zip(decided, report.trials, strict=True), 1):
        assert line.startswith(f"INT8 candidate {number}: {trial.candidate.label} ")
        assert f"agreement {trial.accuracy.label_agreement:.2%}" in line
    # balancing does not help this gate, so the layer search starts from the plain model
    assert labels == [
        "dynamic", "dynamic, smoothed except down projections", "dynamic, smoothed", "dynamic, 1 float",
        "dynamic, 2 float", "dynamic, 4 float", "dynamic, 3 float",
    ]  # fmt: skip
    assert report.chosen is report.trials[-1] and report.chosen.passed
    # Only the layer search's candidates, judged by their verdict alone, may stop their gate early.
    asked = {variant: early for variant, early in gate.until_failed if variant.startswith("INT8")}
    assert asked == {f"INT8 {label}": "float" in label for label in labels}
    assert set(report.chosen.candidate.float_nodes) == set(sensitive)
    assert {item.layer.node for item in report.sensitivity[:3]} == set(sensitive)
    served = onnx.load(str(target)).graph
    assert {n.name for n in served.node if n.op_type == "MatMul"} >= set(sensitive)
    # the blocks whose query, key and value are all int8 serve them as one QAttention each
    fused = sum(n.op_type == "QAttention" for n in served.node)
    assert fused == report.chosen.fusion.blocks
    assert (
        sum(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for n in served.node) + 3 * fused == len(layers) - 3
    )
    assert all(trial.speedup[1] > 0 and trial.speedup[8] > 0 for trial in report.trials)
    json.dumps(report.to_dict())  # build.json takes it as it is
    # Where the time went, by phase: the layer ranking happened while finding the served candidate.
    assert {"prepare", "choose", "sensitivity", "timing"} <= set(report.seconds) <= {*report.seconds, "curve"}
    assert report.to_dict()["seconds"].keys() == report.seconds.keys()
    assert lines[-1] == report.time_line() and lines[-1].startswith("Search time: ")
    assert "; within those, ranking the layers" in report.to_markdown() or report.seconds["sensitivity"] < 0.5


def test_search_returns_the_most_accurate_and_writes_nothing_when_nothing_passes(tiny, tmp_path):
    gate = _FakeGate(tiny["layers"], [layer.node for layer in tiny["layers"]])  # every layer is needed in float
    target = tmp_path / "model.onnx"
    report = search_int8(tiny["fp32"], target, SearchSettings(gate, tiny["encoder"], TEXTS, schemes=("dynamic",)))
    assert report.chosen is not None and not report.chosen.passed
    assert len(report.chosen.candidate.float_nodes) == len(tiny["layers"]) - 1  # the most accurate one tried
    assert not target.exists()
    assert str(report.failure()).startswith("accuracy gate failed: no int8 candidate passed (")


@pytest.mark.parametrize("scheme", ["dynamic", "static"])
def test_switch_model_computes_what_the_int8_model_computes(tiny, scheme):
    """The switch model's round trip in float computes what the INT8 kernels compute, on every CPU.

    The INT8 products are exact integers on every CPU the quantiser targets (8-bit weights with VNNI, 7-bit
    without: ``tests/sizing/test_cpu.py``), so the two differ only by float rounding, far under the share of INT8's own
    loss asserted here.
    """
    encoder, layers = tiny["encoder"], tiny["layers"]
    quantized = tiny["work"] / f"{scheme}.onnx"
    nodes = [layer.node for layer in layers]
    quantize_int8(tiny["prepared"], quantized, Int8Recipe(scheme, nodes, encoder, TEXTS))
    switch = build_switch_model(tiny["prepared"], quantized, tiny["work"] / f"switch_{scheme}.onnx", scheme=scheme)
    assert set(switch.flags) == set(nodes)
    session = ort.InferenceSession(str(switch.path))
    real, float32 = _logits(quantized, encoder), _logits(tiny["prepared"], encoder)
    all_on, all_off = _logits(session, encoder, switch.feeds(nodes)), _logits(session, encoder, switch.feeds([]))
    np.testing.assert_allclose(all_off, float32, atol=1e-5)
    # The round trip computes in float what the int8 kernels compute in integers; ONNX Runtime's fused
    # dynamic kernel rounds the activations its own way, so there only most of the difference is the same.
    share = 0.05 if scheme == "static" else 0.25
    assert np.abs(all_on - real).max() < share * np.abs(real - float32).max() + 1e-4
    one = _logits(session, encoder, switch.feeds(nodes[:1]))
    # One flag switches one layer: the output moves off float32, and not to where all flags take it.
    assert np.abs(one - float32).max() > 0 and np.abs(one - all_on).max() > 0


@pytest.mark.parametrize("scheme", ["dynamic", "static"])
def test_sensitivity_measured_from_each_segments_cut_equals_the_whole_switch_model(tiny, scheme, monkeypatch):
    """Each layer measured on the switch model from its segment's cut on, fed the float run's crossing tensors,
    gives the figures of the whole switch model: with one segment per layer, per two layers, and one for all."""
    import tritongen.precision.sensitivity as sensitivity

    encoder, layers = tiny["encoder"], tiny["layers"]
    quantized = tiny["work"] / f"{scheme}_segments.onnx"
    quantize_int8(tiny["prepared"], quantized, Int8Recipe(scheme, [layer.node for layer in layers], encoder, TEXTS))
    switch = build_switch_model(tiny["prepared"], quantized, tiny["work"] / f"segments_{scheme}.onnx", scheme=scheme)
    model = ReferenceModel(tiny["module"], tiny["hf_tokenizer"], tiny["encoder"], 64)
    gate = GateReference(model, gate="labels", texts=TEXTS).subset(16)
    session, alone = ort.InferenceSession(str(switch.path)), scheme == "dynamic"  # dynamic: texts alone as well
    whole = [
        gate.measure(session, layer.layer, batch_dependent=alone, feeds=switch.feeds([layer.node])).loss
        for layer in layers
    ]
    assert len(set(whole)) > 1  # the layers differ, so the comparison below can tell them apart
    for segments in (len(layers), len(layers) // 2, 1):
        monkeypatch.setattr(sensitivity, "SEGMENTS", segments)
        found = measure_sensitivity(switch, layers, gate, batch_dependent=alone)
        assert [item.layer for item in found] == list(layers)
        np.testing.assert_allclose([item.loss for item in found], whole, rtol=1e-4, atol=1e-7)
    assert not [path.name for path in switch.path.parent.iterdir() if "from_" in path.name or "prefix" in path.name]


def test_static_int8_keeps_products_and_the_residual_stream_float(tiny):
    quantized = tiny["work"] / "static_graph.onnx"
    nodes = [layer.node for layer in tiny["layers"]]
    quantize_int8(tiny["prepared"], quantized, Int8Recipe("static", nodes, tiny["encoder"], TEXTS))
    graph = onnx.load(str(quantized)).graph
    produced = {output: node for node in graph.node for output in node.output}
    readers = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    weights = {init.name for init in graph.initializer}
    for node in graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] in weights:
            continue
        assert {reader.name for reader in readers[node.output[0]]} <= set(nodes), "a float op reads an int8 copy"
        source = produced[produced[node.input[0]].input[0]]
        assert source.op_type != "MatMul", "a MatMul product is re-quantised"


def test_smoothing_leaves_the_float_model_unchanged_and_balances_every_input(tiny):
    smoothed = tiny["work"] / "smoothed.onnx"
    nodes = [layer.node for layer in tiny["layers"]]
    count = smooth_activations(tiny["prepared"], smoothed, nodes=nodes, encoder=tiny["encoder"], texts=TEXTS)
    graph = onnx.load(str(smoothed)).graph
    # every layer: query/key/value share one input, the three others have one each
    assert count == sum(n.name.endswith("_Smooth") for n in graph.node) == 4 * 2
    np.testing.assert_allclose(
        _logits(smoothed, tiny["encoder"]), _logits(tiny["prepared"], tiny["encoder"]), rtol=1e-4, atol=1e-4
    )


def test_gate_subset_holds_the_texts_nearest_the_decision_boundary(tiny):
    model = ReferenceModel(tiny["module"], tiny["hf_tokenizer"], tiny["encoder"], 64)
    reference = GateReference(model, gate="labels", texts=TEXTS)
    margins = {}
    for chunk in reference.chunks:
        top = np.sort(np.exp(chunk.reference) / np.exp(chunk.reference).sum(-1, keepdims=True), axis=-1)
        margins.update(zip(chunk.texts, top[:, -1] - top[:, -2], strict=True))
    subset = reference.subset(8)
    assert subset.count == 8
    assert {t for c in subset.chunks for t in c.texts} == set(sorted(margins, key=margins.get)[:8])
    full, part = reference.measure(tiny["fp32"], "fp32"), subset.measure(tiny["fp32"], "fp32")
    assert full.texts == 40 and part.texts == 8 and full.label_agreement == part.label_agreement == 1.0


class _Flipping:
    """The FP32 model, with its logits negated (every label flipped) on the calls whose texts ``flip`` picks."""

    def __init__(self, path, flip):
        import onnxruntime as ort

        self.session, self.flip, self.calls = ort.InferenceSession(str(path)), flip, []

    def run(self, names, feeds):
        outputs = self.session.run(names, feeds)
        self.calls.append(len(feeds["input_ids"]))
        return [-outputs[0], *outputs[1:]] if self.flip(len(feeds["input_ids"])) else outputs


def test_a_gate_run_until_failed_stops_once_it_cannot_pass_and_starts_where_the_last_model_did_worst(tiny):
    model = ReferenceModel(tiny["module"], tiny["hf_tokenizer"], tiny["encoder"], 64)
    reference = GateReference(model, gate="labels", texts=TEXTS, batch_size=8)  # 5 chunks of 8 texts
    # Every label flipped: the full measurement fails, and the early one after one chunk (8 of 40 texts wrong
    # can no longer give 99% agreement), with the same verdict.
    full = reference.measure(_Flipping(tiny["fp32"], lambda rows: True), "flipped")
    early = _Flipping(tiny["fp32"], lambda rows: True)
    stopped = reference.measure(early, "flipped", until_failed=True)
    assert not full.passed and not stopped.passed and full.of_texts is None
    assert (stopped.texts, stopped.of_texts, early.calls) == (8, 40, [8])
    assert "8 of 40 validation texts (stopped" in stopped.summary()
    # A model that passes is measured in full; until_failed changes nothing for it.
    passing = reference.measure(tiny["fp32"], "fp32", until_failed=True)
    assert passing.passed and (passing.texts, passing.of_texts) == (40, None)
    # The chunk the last model did worst on goes first: here the fourth, the only one flipped.
    fourth = _Flipping(tiny["fp32"], lambda rows: len(fourth.calls) == 4)
    reference.measure(fourth, "one chunk flipped")
    assert min(reference.worst, key=reference.worst.get) == 3
    again = _Flipping(tiny["fp32"], lambda rows: len(again.calls) == 1)
    assert not reference.measure(again, "flipped first", until_failed=True).passed
    assert again.calls == [8] and reference.worst[3] == 0.0


def _cosine(mean: float, low: float, variant: str = "x") -> AccuracyReport:
    return AccuracyReport(variant, "cosine", 170, cosine_mean=mean, cosine_min=low, loss=1.0 - mean)


def _cosine_search() -> SearchReport:
    """MiniLM's case: a candidate with the higher mean fails on its minimum; the served one passes both runtimes."""
    layers = [WeightMatMul(f"n{i}", f"bert.layer.{i}", False) for i in range(4)]
    speeds = ({1: 20.0, 8: 40.0}, {1: 2.0, 8: 2.0})
    trials = [
        Trial(Candidate("dynamic", ("n1",)), _cosine(0.9935, 0.9768), Path("a"), *speeds, seconds=12.0),
        Trial(Candidate("dynamic"), _cosine(0.9919, 0.9840), Path("b"), *speeds, container=_cosine(0.9902, 0.9830)),
    ]
    return SearchReport(
        layers, trials, fp32_texts_per_s={1: 10.0, 8: 20.0}, chosen=trials[1], runtime="ONNX Runtime 1.31.1",
        served_runtime="ONNX Runtime 1.19.2",
    )  # fmt: skip


def test_trial_line_gives_the_candidate_its_mean_min_and_verdict_in_each_runtime():
    report = _cosine_search()
    failed, served = report.trials
    assert report.trial_line(failed) == (
        "INT8 candidate 1: dynamic, 1 float fails (min 0.9768 < 0.98); "
        "ONNX Runtime 1.31.1: mean 0.9935, min 0.9768, FAIL; 12 s"
    )
    line = report.trial_line(served)
    assert line.startswith("INT8 candidate 2: dynamic passes (mean 0.9902 >= 0.99 in ONNX Runtime 1.19.2); ")
    assert (
        "ONNX Runtime 1.31.1: mean 0.9919, min 0.9840, pass; ONNX Runtime 1.19.2: mean 0.9902, min 0.9830, pass" in line
    )


def test_search_table_shows_mean_min_and_the_deciding_criterion_in_both_runtimes():
    card = _cosine_search().to_markdown()
    assert (
        "| candidate | int8 / float layers | mean cosine | min cosine | mean cosine, container | min cosine, container "
        "| speed, batch 1 | speed, batch 8 | gate | decided by |"
    ) in card
    assert "| dynamic, 1 float | 3 / 1 | 0.9935 | 0.9768 | – | – | 2.00x | 2.00x | fail | min 0.9768 < 0.98 |" in card
    assert (
        "| dynamic **(served)** | 4 / 0 | 0.9919 | 0.9840 | 0.9902 | 0.9830 | 2.00x | 2.00x | pass "
        "| mean 0.9902 >= 0.99 in ONNX Runtime 1.19.2 |"
    ) in card
    assert "in ONNX Runtime 1.31.1. Each candidate that passed there was gated again in ONNX Runtime 1.19.2" in card


def test_search_card_states_the_served_models_margin_to_the_gate_in_both_runtimes():
    report = _cosine_search()
    card = report.to_markdown()
    assert (
        "Margin to the gate (each figure minus its floor): ONNX Runtime 1.31.1: mean +0.0019, min +0.0040; "
        "ONNX Runtime 1.19.2: mean +0.0002, min +0.0030."
    ) in card
    # speeds are timed in our runtime, which the card names: releases differ in which fused operators are fast
    assert "in process in ONNX Runtime 1.31.1 it runs at" in card
    assert "Speed: the served path in process (tokenizer and ONNX Runtime 1.31.1) on this machine" in card
    record = json.loads(json.dumps(report.to_dict()))
    assert record["margins"]["ONNX Runtime 1.19.2"]["mean"] == pytest.approx(0.0002)
    assert (
        record["trials"][0]["decided_by"] == "min 0.9768 < 0.98" and record["trials"][0]["container_accuracy"] is None
    )
    # Where the container's runtime was not measured, the card says so instead of implying a margin there.
    report.trials[1].container = None
    assert "ONNX Runtime 1.31.1: mean +0.0019, min +0.0040; ONNX Runtime 1.19.2: not measured." in report.to_markdown()


def test_search_report_shows_the_choice_the_float_layers_and_the_trade_off(tmp_path):
    layers = [WeightMatMul(f"n{i}", f"bert.layer.{i}", False) for i in range(4)]
    trials = [
        Trial(Candidate("dynamic"), _report(0.98, 0.02), Path("a"), {1: 20.0, 8: 40.0}, {1: 2.0, 8: 2.0}),
        Trial(Candidate("dynamic", ("n2",), why="the 1 most sensitive weight MatMuls in float"),
              _report(0.995, 0.01), Path("b"), {1: 18.0, 8: 36.0}, {1: 1.8, 8: 1.8}),
    ]  # fmt: skip
    report = SearchReport(layers, trials, fp32_texts_per_s={1: 10.0, 8: 20.0}, chosen=trials[1])
    card = report.to_markdown("int8_search.png")
    assert "Served: **dynamic, 1 float**" in card and "Kept in float: `bert.layer.2`." in card
    assert "Cost of the float layers: 1.80x instead of 2.00x FP32 (dynamic, which failed the gate)" in card
    assert "| candidate | int8 / float layers | agreement | mean difference | speed, batch 1 | speed, batch 8 |" in card
    assert "| dynamic, 1 float **(served)** | 3 / 1 | 0.9950 | 0.0100 | 1.80x | 1.80x | pass |" in card
    assert "| dynamic | 4 / 0 | 0.9800 | 0.0200 | 2.00x | 2.00x | fail | agreement 98.00% < 99% |" in card
    assert "![accuracy against speed](int8_search.png)" in card
    report.plot(tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads(json.dumps(report.to_dict()))["float_layers"] == ["bert.layer.2"]


def test_a_candidate_the_serving_runtime_fails_is_not_chosen(tiny, tmp_path):
    gate = _FakeGate(tiny["layers"], [])  # every candidate passes here
    there = []

    def served_gate(path, label, batch_dependent):  # the serving runtime fails the plain model only
        there.append(label)
        return _report(0.9 if label == "INT8 dynamic" else 1.0, 0.05)

    settings = SearchSettings(
        gate, tiny["encoder"], TEXTS, schemes=("dynamic",), curve=False, served=ServedGate(served_gate)
    )
    report = search_int8(tiny["fp32"], tmp_path / "model.onnx", settings)
    assert there[:2] == ["INT8 dynamic", "INT8 dynamic, smoothed except down projections"]
    first = report.trials[0]
    assert not first.passed and first.gated.label_agreement == 0.9  # the verdict stands on the worse runtime
    assert first.accuracy.label_agreement == 1.0 and first.container.label_agreement == 0.9  # each kept
    assert report.chosen is report.trials[1] and report.chosen.passed
    assert any("1 passed here and failed there" in note for note in report.notes)
    assert report.decided_by(first) == "agreement 90.00% < 99% in the serving runtime"


def test_the_trade_off_curve_adds_every_schemes_whole_model_and_more_layers_in_float_after_the_choice(tiny, tmp_path):
    """The curve measures what the choice skipped (the other scheme, layers in float) and leaves the choice alone.

    The first whole model passes here, so the curve is all that tries the static scheme and ranks the layers.
    """
    gate = _FakeGate(tiny["layers"], [])
    settings = SearchSettings(gate, tiny["encoder"], TEXTS, schemes=("dynamic", "static"), curve=True)
    report = search_int8(tiny["fp32"], tmp_path / "model.onnx", settings)
    labels = [trial.candidate.label for trial in report.trials]
    assert labels == ["dynamic", "static", "dynamic, 1 float", "dynamic, 2 float", "dynamic, 4 float"]
    assert report.chosen is report.trials[0] and report.chosen.candidate.label == "dynamic"
    assert len(report.sensitivity) == len(tiny["layers"]) and "curve" in report.seconds
    # the curve's candidates are figures for the card: each gated on every text, never stopped early
    assert all(not early for variant, early in gate.until_failed if variant.startswith("INT8"))
    ranked = [item.layer.node for item in report.sensitivity]
    assert [trial.candidate.float_nodes for trial in report.trials[2:]] == [tuple(ranked[:n]) for n in (1, 2, 4)]


def test_the_trade_off_curve_is_measured_by_default_only_for_small_models_and_the_card_says_so(tmp_path):
    from tritongen.precision.int8_search import CURVE_AUTO_BYTES, _wants_curve

    small, big = tmp_path / "small.onnx", tmp_path / "big.onnx"
    for path, size in ((small, CURVE_AUTO_BYTES), (big, CURVE_AUTO_BYTES + 1)):
        with path.open("wb") as file:
            file.truncate(size)  # sparse: the size without the bytes
    report = SearchReport(layers=[])
    assert _wants_curve(None, small, report) and report.notes == []
    assert not _wants_curve(None, big, report)
    assert report.notes == [
        "The trade-off curve was not measured: the model has 200 MB of FP32 weights (over 200 MB), where its extra "
        "candidates cost more than the search; `--int8-curve` measures it."
    ]
    assert _wants_curve(True, big, SearchReport(layers=[])) and not _wants_curve(False, small, SearchReport(layers=[]))


class _BalancedGate:
    """A gate that passes only a model whose activations are balanced (a ``_Smooth`` Mul in the graph)."""

    count = 32

    def measure(self, model, variant, *, batch_dependent=False, feeds=None, until_failed=False):
        graph = onnx.load(str(model), load_external_data=False).graph
        balanced = any(n.op_type == "Mul" and n.name.endswith("_Smooth") for n in graph.node)
        return _report(1.0 if balanced else 0.9, 0.001 if balanced else 0.05, texts=self.count)

    def subset(self, count):
        return self


def test_the_cheaper_balancing_leaves_the_down_projections_inputs_and_is_tried_first(tiny, tmp_path):
    layers = tiny["layers"]
    assert {layer.down_projection for layer in layers} == {True, False}  # the premise: both kinds are here
    settings = SearchSettings(_BalancedGate(), tiny["encoder"], TEXTS, schemes=("dynamic",), curve=False)
    report = search_int8(tiny["fp32"], tmp_path / "model.onnx", settings)
    assert [t.candidate.label for t in report.trials] == ["dynamic", "dynamic, smoothed except down projections"]
    assert report.chosen is report.trials[1]
    graph = onnx.load(str(tiny["prepared"])).graph
    inputs = {n.name: n.input[0] for n in graph.node}
    narrow = {inputs[layer.node] for layer in layers if not layer.down_projection}
    wide = {inputs[layer.node] for layer in layers if layer.down_projection}
    served = onnx.load(str(tmp_path / "model.onnx")).graph
    balanced = {n.input[0] for n in served.node if n.op_type == "Mul" and n.name.endswith("_Smooth")}
    assert balanced == narrow and not balanced & wide


def _padded_feeds(encoder):
    """One padded batch (a short text beside a long one) and one text alone."""
    long = " ".join(TEXTS[:6])
    return [encoder([TEXTS[0], long, TEXTS[1]]), encoder([TEXTS[2]])]


def _quantized(tiny, tmp_path):
    path = tmp_path / "int8.onnx"
    quantize_int8(tiny["prepared"], path, Int8Recipe("dynamic", [layer.node for layer in tiny["layers"]]))
    return path


def test_fuse_attention_blocks_rewrites_each_quantised_block_as_one_qattention_when_every_node_matches(tiny, tmp_path):
    path = _quantized(tiny, tmp_path)
    model = onnx.load(str(path))
    blocks = sum(n.op_type == "Softmax" for n in model.graph.node)
    assert fuse_attention_blocks(model) == ["QAttention"] * blocks and blocks >= 2
    onnx.checker.check_model(model)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QAttention") == blocks and "Softmax" not in ops and "Transpose" not in ops
    assert ops.count("MatMulInteger") == len(tiny["layers"]) - 3 * blocks
    fused = tmp_path / "fused.onnx"
    onnx.save_model(model, str(fused))
    # The same int8 numbers, attention in float either way: only float rounding may differ (none here).
    for feeds in _padded_feeds(tiny["encoder"]):
        before, after = (ort.InferenceSession(str(p)).run(None, feeds)[0] for p in (path, fused))
        assert np.linalg.norm(after - before) <= 0.02 * np.linalg.norm(before)


def test_fuse_attention_writes_the_graph_unchanged_when_the_rewrite_moves_the_outputs(tiny, tmp_path, monkeypatch):
    import tritongen.precision.fusion as fusion

    real = fusion.fuse_attention_blocks

    def maskless(model, operators):  # a wrong rewrite: the padding of a short text beside a long one is attended to
        blocks = real(model, operators)
        for node in model.graph.node:
            if node.op_type == "QAttention":
                node.input[5] = ""
        return blocks

    monkeypatch.setattr(fusion, "fuse_attention_blocks", maskless)
    path = _quantized(tiny, tmp_path)
    result = fuse_attention(path, tmp_path / "served.onnx", _padded_feeds(tiny["encoder"]))
    assert result.blocks == 0 and result.worst > QUANTIZED_TOLERANCE
    assert result.note().startswith("Attention left unfused: its outputs moved by ")
    assert (tmp_path / "served.onnx").read_bytes() == path.read_bytes()


def test_fuse_attention_writes_each_float_block_as_one_attention_when_every_node_matches(tiny, tmp_path):
    """The float graph (an FP32 build with ``--optimize``): the same attention as one ``Attention`` per block."""
    target = tmp_path / "fused.onnx"
    result = fuse_attention(tiny["fp32"], target, _padded_feeds(tiny["encoder"]))
    blocks = sum(n.op_type == "Softmax" for n in onnx.load(str(tiny["fp32"])).graph.node)
    ops = [n.op_type for n in onnx.load(str(target)).graph.node]
    assert result.blocks == ops.count("Attention") == blocks >= 2 and result.operators == ("Attention",)
    assert "Softmax" not in ops and result.worst <= FLOAT_TOLERANCE
    assert result.note().startswith(
        f"Attention fused: each of the {blocks} self-attention blocks runs as one `Attention`"
    )
