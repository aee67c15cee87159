"""The CPU side of an ensemble measured apart from its model, sized for a GPU node, and made cheaper per request."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import os
import signal
import subprocess
import time

import numpy as np
import onnxruntime as ort
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tests.builds import native_backend
from tritongen.bench.cpu_use import FRONTEND, cpu_snapshot
from tritongen.bench.free_step import FREE_STEP_INSTANCES, free_graph, free_repository
from tritongen.builder.spec import load_spec
from tritongen.configs.model_config import Kind
from tritongen.configs.parser import read_config
from tritongen.deploy.plan import CpuSideBound, plan_capacity, read_cpu_side
from tritongen.encoding import PARALLEL_TEXTS, pack_encodings, serial
from tritongen.repository.contents import built_sizing
from tritongen.sizing.cpu_side import REFERENCE_CPU_SIDE, CpuSideFigures


def _config(max_batch_size: int, inputs: list[tuple[str, list[int]]], outputs: list[tuple[str, int, list[int]]]):
    config = mc.ModelConfig(name="m_model", backend="onnxruntime", max_batch_size=max_batch_size)
    for name, dims in inputs:
        config.input.add(name=name, data_type=mc.TYPE_INT64, dims=dims)
    for name, kind, dims in outputs:
        config.output.add(name=name, data_type=kind, dims=dims)
    return config


@pytest.mark.parametrize(
    ("max_batch_size", "outputs", "shapes"),
    [
        (64, [("sentence_embedding", mc.TYPE_FP32, [384])], {"sentence_embedding": (3, 384)}),  # pooled rows
        (64, [("logits", mc.TYPE_FP16, [-1, 5])], {"logits": (3, 17, 5)}),  # per token, half precision
        (  # folded: the raw output and the postprocess step's beside it
            64,
            [("logits", mc.TYPE_FP32, [3]), ("PROBABILITIES", mc.TYPE_FP32, [3])],
            {"logits": (3, 3), "PROBABILITIES": (3, 3)},
        ),
        (0, [("start_logits", mc.TYPE_FP32, [-1, -1])], {"start_logits": (3, 17)}),  # whole requests: windows
    ],
    ids=["pooled", "tokens", "folded", "windows"],
)
def test_the_free_graph_has_the_model_steps_tensors_and_computes_only_shapes(max_batch_size, outputs, shapes):
    dims = [-1] if max_batch_size else [-1, -1]
    config = _config(max_batch_size, [("input_ids", dims), ("attention_mask", dims), ("token_type_ids", dims)], outputs)
    model = free_graph(config)
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert {n.op_type for n in model.graph.node} <= {"Shape", "Constant", "Slice", "Concat", "ConstantOfShape"}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {name: np.ones((3, 17), np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))
    assert {name: array.shape for name, array in got.items()} == shapes
    assert all(not array.any() for array in got.values())
    assert got[outputs[0][0]].dtype == (np.float16 if outputs[0][1] == mc.TYPE_FP16 else np.float32)


def test_a_free_repository_serves_the_newest_versions_with_onnx_runtime_on_the_cpu(tiny_factory, builds, tmp_path):
    built = builds(tiny_factory("bert", "embedding"), "emb_gpu", device="gpu", versions=2)
    free = free_repository(built.repository, "emb_gpu", tmp_path / "free")
    assert sorted(p.name for p in free.iterdir()) == sorted(p.name for p in built.folders)  # folded: no postprocess
    model = read_config(free / "emb_gpu_model" / "config.pbtxt")
    assert model.backend == "onnxruntime" and not model.parameters and model.optimization is None
    assert (model.instance_group.kind, model.instance_group.count) == (Kind.CPU, FREE_STEP_INSTANCES)
    assert [p.name for p in (free / "emb_gpu_model").iterdir() if p.is_dir()] == ["2"]
    assert (free / "emb_gpu_model" / "2" / "model.onnx").stat().st_size < 10_000
    tokenizer = read_config(free / "emb_gpu_tokenizer" / "config.pbtxt")
    built_tokenizer = read_config(built.repository / "emb_gpu_tokenizer" / "config.pbtxt")
    assert tokenizer == dataclasses.replace(built_tokenizer, comment="")  # the copy is written without a header


def test_the_server_cpu_is_read_process_by_process_and_named_by_the_model_each_stub_serves(tmp_path):
    import shutil

    stub = tmp_path / "triton_python_backend_stub"  # named as the Python backend's stub, with its argument layout
    shutil.copy2(shutil.which("yes"), stub)  # busy: it writes its arguments to /dev/null until stopped
    stubs = " ".join(
        f"{stub} model.py shm 1 1 0 lib 1 {name}_0_{i} backend >/dev/null &"
        for name in ("m_tok", "m_post")
        for i in (0, 1)
    )
    leader = subprocess.Popen(["sh", "-c", f"{stubs} sleep 60"], start_new_session=True)
    try:
        time.sleep(0.5)
        before = cpu_snapshot(leader.pid)
        # Until each model's stubs have run at all since `before`: however loaded the machine, busy processes get
        # the CPU within a few scheduler periods; the deadline only stops a hang.
        deadline = time.monotonic() + 120
        while True:
            time.sleep(0.2)
            spent = cpu_snapshot(leader.pid).since(before)
            if min(spent.get("m_tok", 0), spent.get("m_post", 0)) > 0 or time.monotonic() > deadline:
                break
    finally:
        os.killpg(leader.pid, signal.SIGKILL)  # the group: the shell and every stub
        leader.wait(timeout=30)
    assert set(spent) == {FRONTEND, "m_tok", "m_post"}
    assert spent["m_tok"] > 0 and spent["m_post"] > 0  # the two busy stubs of each model, summed under its name


@pytest.mark.e2e
@pytest.mark.bench
def test_the_cpu_side_bench_measures_each_protocol_and_batch_beside_the_ceiling(tiny_factory, builds, tmp_path):
    """The real server with the model step free, perf_analyzer, the server's CPU and the tokenizer's ceiling.

    A smoke run (about 16 requests a point, no stability judged) proves the harness on any machine; the tuning
    settings are applied to the running server through the load API.
    """
    from rich.console import Console

    from tritongen.bench.cpu_side import measure_cpu_side
    from tritongen.bench.perf import Sweep
    from tritongen.bench.tune import TuneGrid

    built = builds(tiny_factory("bert", "embedding"), "emb_gpu", device="gpu", versions=2)
    texts = ["a short text", "another one, a little longer than that", "Zoë 🎉", ""] * 16
    report = measure_cpu_side(
        built.repository, "emb_gpu", sweep=Sweep(concurrency=(2,), fixed_requests=16), texts=texts,
        output=tmp_path / "out", console=Console(file=open(os.devnull, "w")),
        tune=TuneGrid(tokenizer=(2,)),
    )  # fmt: skip
    assert [(p.target, p.protocol, p.batch) for p in report.points[:6]] == [
        ("ensemble", protocol, batch) for protocol in ("grpc", "http") for batch in (1, 32)
    ] + [("tokenizer step", "grpc", 1), ("tokenizer step", "grpc", 32)]
    assert [p.target for p in report.points[6:]] == [
        "ensemble, tokenizer 1 · model 2 · threads default · postprocess folded"
    ] * 2 + ["ensemble, tokenizer 2 · model 2 · threads default · postprocess folded"] * 2
    for point in report.points:
        assert point.requests > 0 and point.texts == point.requests * point.batch, point
        assert point.cpu[FRONTEND] > 0 and point.cpu["tokenizer"] > 0 and point.per_core() > 0
    ensemble = [p for p in report.points if p.target == "ensemble"]
    assert "postprocess" not in ensemble[0].cpu  # folded
    if native_backend():  # the free step runs inside tritonserver: its CPU is the frontend's
        assert all("model" not in p.cpu and p.per_core(without=("model",)) == p.per_core() for p in ensemble)
        assert "native" in report.model_step
    else:  # the stand-in's stub, apart
        assert all(p.cpu["model"] > 0 for p in ensemble)
        assert all(p.per_core(without=("model",)) > p.per_core() for p in ensemble)
        assert "stand-in" in report.model_step
    assert report.ceiling.limit > 0 and report.ceiling.one_thread["step_body_1"] > 0
    with open(tmp_path / "out" / "cpu_side.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 10 and rows[0]["vs_ceiling"]
    figures = read_cpu_side(tmp_path / "out" / "cpu_side.csv")
    assert figures.one_text_per_core > 0 and figures.batch_per_core > figures.one_text_per_core
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "In-process ceiling of the same `tokenizer.json`" in summary and "| tokenizer step | grpc | 32 |" in summary


def test_a_gpu_build_sizes_its_python_steps_for_the_node_and_folds_by_default():
    spec = load_spec(model="m", device="gpu", cpu_cores=16)
    assert (spec.tokenizer_instances.count, spec.postprocess_instances.count, spec.fold) == (8, 4, True)
    small = load_spec(model="m", device="gpu", cpu_cores=2)
    assert (small.tokenizer_instances.count, small.postprocess_instances.count) == (1, 1)
    assert load_spec(model="m", device="gpu").cpu_cores is not None  # this machine's, recorded
    given = load_spec(model="m", device="gpu", cpu_cores=16, tokenizer_instances={"count": 3}, fold=False)
    assert (given.tokenizer_instances.count, given.postprocess_instances.count, given.fold) == (3, 4, False)
    cpu = load_spec(model="m", cpu_cores=16)  # a CPU build keeps one of each, and no fold
    assert (cpu.tokenizer_instances.count, cpu.postprocess_instances.count, cpu.fold) == (1, 1, False)


def test_a_16_core_gpu_node_carries_8000_one_text_requests_by_the_reference_figures():
    spec = load_spec(model="m", device="gpu", cpu_cores=16)
    one_text, batch = REFERENCE_CPU_SIDE.capacity(16, spec.tokenizer_instances.count)
    assert one_text >= 8000 and batch > one_text
    # one tokenizer instance is one process: it bounds a big node whatever its cores
    assert REFERENCE_CPU_SIDE.capacity(64, 1)[0] == pytest.approx(1000 / REFERENCE_CPU_SIDE.tokenizer_ms)


def test_the_plan_says_whether_the_model_step_or_the_cpu_side_bounds_a_replica(tmp_path):
    results = tmp_path / "results.csv"
    results.write_text("config,concurrency,throughput,p99_ms\nensemble,16,20000,40\n")
    figures = CpuSideFigures(one_text_per_core=1000, batch_per_core=5000, tokenizer_ms=0.25, source="test")
    small = plan_capacity(results, qps=40000, p99_ms=100, cpu_side=CpuSideBound(figures, 8, 4))
    assert small.bound_by == "the CPU side" and small.per_replica_qps == pytest.approx(8000 * 0.7)
    assert small.replicas == 8 and "bounded by the CPU side (20000.0 vs 8000" in small.to_text()
    big = plan_capacity(results, qps=40000, p99_ms=100, cpu_side=CpuSideBound(figures, 32, 16))
    assert big.bound_by == "the model step" and big.replicas == 3
    assert "was not set beside it" in plan_capacity(results, qps=1, p99_ms=100).to_text()


def test_the_plan_reads_what_a_build_was_sized_for(tmp_path):
    import json

    (tmp_path / "e" / "2").mkdir(parents=True)
    spec = {"cpu_cores": 16, "tokenizer_instances": {"count": 8}, "device": "gpu"}
    (tmp_path / "e" / "2" / "build.json").write_text(json.dumps({"spec": spec}))
    assert built_sizing(tmp_path, "e") == {"cpu_cores": 16, "tokenizer_instances": 8, "gpu": 1}
    assert built_sizing(tmp_path, "missing") == {}


class _Encoding:
    def __init__(self, ids: list[int], types: list[int]) -> None:
        self.ids, self.type_ids, self.attention_mask = ids, types, [1] * len(ids)


@pytest.mark.parametrize("side", ["right", "left"])
def test_packing_places_every_row_as_a_row_by_row_copy_would(side):
    rng = np.random.default_rng(0)
    encodings = [_Encoding(list(rng.integers(1, 999, n)), list(rng.integers(0, 2, n))) for n in (5, 0, 12, 1, 12, 7)]
    packed = pack_encodings(encodings, 16, pad_id=3, pad_type_id=1, side=side)
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        span = slice(16 - n, 16) if side == "left" else slice(0, n)
        pad = [i for i in range(16) if i not in range(16)[span]]
        assert packed["input_ids"][row, span].tolist() == enc.ids and set(packed["input_ids"][row, pad]) <= {3}
        assert packed["token_type_ids"][row, span].tolist() == enc.type_ids
        assert set(packed["token_type_ids"][row, pad]) <= {1}
        assert packed["attention_mask"][row].sum() == n and packed["attention_mask"][row, span].all()
    assert all(a.dtype == np.int64 and a.shape == (6, 16) for a in packed.values())


def test_the_tokenizer_step_encodes_on_its_own_thread_below_a_client_batch(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    for texts, expected in ((1, "false"), (PARALLEL_TEXTS - 1, "false"), (PARALLEL_TEXTS, "true"), (1, "false")):
        serial(texts)
        assert os.environ["TOKENIZERS_PARALLELISM"] == expected


def test_fast_encodings_give_the_same_model_inputs_and_truncation(minilm_path):
    """The step encodes without offsets where it packs none: ids, types, masks and TRUNCATED stay the same."""
    from tritongen.steps.tokenizer import TextEncoder, truncated

    texts = ["I love this movie!", "", "Café au lait — naïve façade", "word " * 400, "🎉 " * 30]
    fast = TextEncoder(str(minilm_path / "tokenizer.json"), 64, (16, 32), input_names=("input_ids", "token_type_ids"))
    full = TextEncoder(str(minilm_path / "tokenizer.json"), 64, (16, 32), input_names=("input_ids", "offsets"))
    assert fast._encode_batch.__name__ == "encode_batch_fast" and full._encode_batch.__name__ == "encode_batch"
    a, b = fast.encode(texts), full.encode(texts)
    assert [e.ids for e in a] == [e.ids for e in b] and truncated(a).tolist() == truncated(b).tolist()
    pairs = list(itertools.islice(itertools.cycle(["a pair", ""]), len(texts)))
    assert [e.type_ids for e in fast.encode(texts, pairs)] == [e.type_ids for e in full.encode(texts, pairs)]
