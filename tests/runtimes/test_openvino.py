"""runtime openvino: the IR, its gate at every precision the CPU gives, the config, and the local backend serving it."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.tiny_variants import make_bf16_tied_classifier
from tritongen.builder.pipeline import build_repository
from tritongen.builder.spec import check_spec, load_spec
from tritongen.buildspec import BuildSpec
from tritongen.containers import CONTAINERS, DEFAULT_CONTAINER
from tritongen.containers import container as container_of
from tritongen.cpu import CPU_FLAGS_ENV
from tritongen.data.datasets import bench_texts
from tritongen.errors import AccuracyError, SpecError
from tritongen.gates import accuracy
from tritongen.gates.compat import container_python
from tritongen.runtimes.onnxruntime.backend import TritonPythonModel as OnnxRuntimeModel
from tritongen.runtimes.openvino.backend import TritonPythonModel as OpenVinoModel
from tritongen.runtimes.openvino.int8 import CANDIDATES
from tritongen.runtimes.openvino.ir import backend_properties, cpu_precisions
from tritongen.serve.client import infer

# The IR is checked in every supported container's OpenVINO, the target first (build.json's `container`).
EVERY_CONTAINER = (DEFAULT_CONTAINER, *(c for c in CONTAINERS if c != DEFAULT_CONTAINER))

TEXTS = ["I love it", "Terrible, awful, bad.", "Ünïcödé and emoji 🎉", "", "word " * 200]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"precision": "fp16"}, "drop precision fp16 and optimize"),
        ({"optimize": True}, "drop precision fp16 and optimize"),
        ({"precision": "int8", "quantization": "dynamic"}, "quantises statically"),
        ({"model_instances": {"kind": "KIND_GPU"}}, "KIND_CPU"),
        ({"openvino": {"performance_hint": "FAST"}}, "LATENCY or THROUGHPUT"),
        ({"openvino": {"num_streams": -1}}, ">= 0"),
    ],
)
def test_spec_refuses_what_the_openvino_runtime_cannot_serve(overrides, message):
    with pytest.raises(SpecError, match=message):
        check_spec(load_spec(model="m", runtime="openvino", **overrides))  # the section's own, or the runtime's


def test_backend_properties_read_the_native_backends_parameters_and_ignore_the_rest():
    properties = backend_properties({"PERFORMANCE_HINT": "latency", "NUM_STREAMS": "auto", "HINT_BF16": "YES"})
    assert properties == {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "AUTO", "INFERENCE_PRECISION_HINT": "bf16"}
    assert backend_properties({"NUM_STREAMS": "2", "INFERENCE_NUM_THREADS": "1"}) == {
        "NUM_STREAMS": 2, "INFERENCE_NUM_THREADS": 1,
    }  # fmt: skip
    with pytest.raises(ValueError, match="HINT_BF16' to be YES"):
        backend_properties({"HINT_BF16": "NO"})
    with pytest.raises(ValueError, match="NUM_STREAMS' to be either AUTO/NUMA"):
        backend_properties({"NUM_STREAMS": "many"})
    # As the native backend: a key it does not read is ignored, ours included
    # (tests/runtimes/test_backend_conformance.py).
    assert backend_properties({"intra_op_thread_count": "1", "INFERENCE_PRECISION_HINT": "f32"}) == {}


def test_the_local_backend_batches_as_the_onnxruntime_one():
    assert issubclass(OpenVinoModel, OnnxRuntimeModel) and OpenVinoModel.execute is OnnxRuntimeModel.execute
    assert OpenVinoModel.default_model_filename == "model.xml"


@pytest.fixture(scope="module")
def built(tiny_factory, builds):
    model = tiny_factory("bert", "embedding")
    # the container check on: the IR is read, run and gated again in the container's OpenVINO
    ov = builds(model, "emb_ov", runtime="openvino", container_check=True, containers=EVERY_CONTAINER)
    return ov, builds(model, "bert_emb")


@pytest.fixture(scope="module")
def repo(built, builds, tmp_path_factory):
    return builds.repository(*built, into=tmp_path_factory.mktemp("openvino") / "repo")


def test_the_native_backend_computes_in_the_precision_the_card_names(repo, tmp_path):
    """On a CPU with BF16 the 24.10 backend runs an FP32 IR in BF16 (OpenVINO 2024.4's default), elsewhere in FP32.

    The model step alone through the native backend, against OpenVINO 2024.4 itself (the 24.10 container's venv)
    at each precision: it must equal the precision the card names for this CPU, and not the other one.
    """
    from tests.builds import native_backend, step_alone
    from tritongen.encoding import TextEncoder
    from tritongen.runtimes import get_runtime

    if not native_backend("openvino") or container_python("24.10") is None:
        pytest.skip("needs the native openvino backend (TRITONGEN_BACKENDS) and the 24.10 venv (make compat-venv)")
    texts = ["a short text", "the native backend's precision, measured on a longer text than the first"] * 4
    tokenizer = repo / "emb_ov_tokenizer" / "1" / "tokenizer.json"
    feeds = TextEncoder(str(tokenizer), 64, [64], input_names=["input_ids", "attention_mask", "token_type_ids"])(texts)
    served = step_alone(repo / "emb_ov_model", feeds)
    output = next(iter(served))
    diffs, ir, python = {}, repo / "emb_ov_model" / "1" / "model.xml", container_python("24.10")
    for precision in ("f32", "bf16"):
        with get_runtime("openvino").container_session(ir, python, precision) as run:
            (expected,) = run.run([output], feeds)
        diffs[precision] = float(np.abs(served[output] - expected).max())
    runs = "bf16" if "bf16" in cpu_precisions() else "f32"
    other = "f32" if runs == "bf16" else "bf16"
    assert diffs[runs] <= 1e-5, diffs
    if runs == "bf16":  # where the CPU has no BF16, both hints run FP32
        assert diffs[other] > 10 * max(diffs[runs], 1e-7), diffs
    card = (repo / "emb_ov" / "1" / "model_card.md").read_text()
    assert "runs in BF16 on a node whose CPU has AVX512_BF16 or AMX" in card


def test_the_build_serves_ir_with_the_native_backends_config_and_gates_each_precision(repo):
    """The FP32 IR passes at FP32 and, on a CPU with BF16, at BF16, here and in every container's OpenVINO.

    Those verdicts hold on every CPU without resting on its kernels: at FP32 the IR computes what PyTorch does
    (cosine 1.0000), and BF16 keeps 8 bits of every product's inputs with FP32 sums, which moves this two-layer
    model's embeddings to a cosine of 0.9997 at worst (AMD EPYC with AVX512_BF16): the gate's floor (0.98) is 70
    times that loss away.
    """
    version = repo / "emb_ov_model" / "1"
    assert sorted(p.name for p in version.iterdir()) == ["model.bin", "model.xml"]
    config = (repo / "emb_ov_model" / "config.pbtxt").read_text()
    assert 'backend: "openvino"' in config and 'default_model_filename: "model.xml"' in config
    assert 'key: "PERFORMANCE_HINT"' in config and 'key: "NUM_STREAMS"' in config
    card = (repo / "emb_ov" / "1" / "model_card.md").read_text()
    for precision in cpu_precisions():
        assert f"gated at OpenVINO {precision.upper()}: passed, OpenVINO {precision.upper()} vs FP32" in card
    record = json.loads((repo / "emb_ov" / "1" / "build.json").read_text())
    assert not record["fold"]["folded"]
    container = record["container_runtimes"][record["container"]]
    if container_python() is None:  # no venv for the default container (make compat-venv creates it)
        assert "make compat-venv" in container["skipped"]
    else:  # the IR of our OpenVINO read, run and gated again by every container's release
        assert record["container_runtimes"][DEFAULT_CONTAINER] == container
        for release, check in record["container_runtimes"].items():
            if container_python(release) is None:
                assert "make compat-venv" in check["skipped"]
                continue
            openvino = container_of(release).linked("openvino")
            assert check["runtime"] == f"OpenVINO {openvino}" and check["criterion"] == "gate"
            assert check["passed"] and check["accuracy"]["cosine_min"] >= 0.98, (release, check)


def test_int8_that_loses_too_much_is_refused_with_the_way_out(tiny_factory, tmp_path, monkeypatch):
    """An INT8 IR below the gate's floor is refused by INT8's name, with the way out, and nothing is written.

    The test sets the floor itself, above what any INT8 model reaches (a cosine to FP32 above 1): whether the tiny
    random embedder's own INT8 falls below the real floor depends on the kernels NNCF's IR runs on (it does on an
    AMD EPYC with BF16, not on an Intel Xeon without), so the refusal is made certain rather than found.
    """
    monkeypatch.setattr(accuracy, "COSINE_MIN_MIN", 1.0001)
    spec = BuildSpec(
        model=str(tiny_factory("bert", "embedding")), name="emb", repository=tmp_path / "repo", runtime="openvino",
        precision="int8",
    )  # fmt: skip
    with pytest.raises(AccuracyError, match=r"OpenVINO INT8\+F32 .* build with --precision fp32, or accept it"):
        build_repository(spec)
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


@pytest.mark.e2e
def test_minilm_int8_ir_is_quantised_by_nncf_gated_and_served(minilm_path, builds, shared_server):
    """NNCF's INT8 IR of MiniLM, gated at every CPU precision and served.

    Every verdict here rests on the CPU's INT8 and BF16 kernels, so none is asserted; each is checked against its
    own figures, on every CPU. With every MatMul in INT8 the IR keeps the gate's mean, but its minimum may fall
    below 0.98 on single words (0.977 on a 2-core AVX-512 machine), where the search tries the next candidate (the
    down projections in float: 0.988 there); where none passes the loss is accepted here, and the card must say
    which it was. At BF16: on an Intel CPU with AMX, OpenVINO 2026.4 computes a text sent alone far off
    (cosine 0.64) while batches stay close, and the gate refuses it; on AVX512_BF16 without AMX it held the FP32
    figures. The bounds that remain (mean cosine 0.9) are far below every figure seen on any CPU and far above a
    broken quantisation's (a wrong scale or a skipped layer gives 0.5 or less): they prove the IR is INT8 that works.
    """
    ov8 = builds(
        minilm_path,
        "ov8",
        runtime="openvino",
        precision="int8",
        container_check=True,
        accept_accuracy_loss=True,
        containers=(DEFAULT_CONTAINER,),  # every container's OpenVINO reads IR: the FP32 build proves that
    )
    fp32 = builds(minilm_path, "emb")  # the default build, as tests/serve/test_e2e.py serves it
    repo = ov8.repository
    xml = (repo / "ov8_model" / "1" / "model.xml").read_text()
    assert xml.count('type="FakeQuantize"') >= 24  # 6 layers: the attention and feed-forward MatMuls in INT8
    card = (repo / "ov8" / "1" / "model_card.md").read_text()
    assert "int8 by NNCF" in card and "the built-in calibration sample" in card
    labels = "|".join(candidate.label for candidate in CANDIDATES)
    assert re.search(rf"(passed the gate at every precision|no candidate passed .*the most accurate): ({labels})", card)
    record = json.loads((repo / "ov8" / "1" / "build.json").read_text())
    gated = {}
    for precision in cpu_precisions():
        line = re.search(
            rf"gated at OpenVINO INT8\+{precision.upper()}: (\w+), .*cosine mean ([\d.]+) .*min ([\d.]+)", card
        )
        assert line, f"no gate line for {precision}"
        verdict, mean, low = line.group(1), float(line.group(2)), float(line.group(3))
        assert verdict == ("passed" if mean >= 0.99 and low >= 0.98 else "FAILED"), line.group(0)
        gated[precision] = (mean, low)
    assert all(mean >= 0.9 for mean, _ in gated.values()), gated
    recorded = (round(record["accuracy"]["cosine_mean"], 4), round(record["accuracy"]["cosine_min"], 4))
    assert recorded == tuple(min(figures) for figures in zip(*gated.values(), strict=True))  # each figure's worst
    assert record["variant"].startswith("INT8 IR (NNCF); runs in BF16 on a node whose CPU has AVX512_BF16 or AMX")
    assert record["variant"].endswith(f"gated at {'/'.join(cpu_precisions()).upper()} on the build machine")
    if container_python() is not None:  # the INT8 IR read and gated again in the target container's OpenVINO
        assert record["container_runtimes"][record["container"]]["runtime"].startswith("OpenVINO")
    realistic = bench_texts(48)  # tweets and news, the kind of text the gate measures
    server = shared_server.serve(ov8, fp32)
    int8, exact = (infer(TEXTS + realistic, name=name, url=server.grpc_url) for name in ("ov8", "emb"))
    cosines = [_cosine(a["EMBEDDING"], b["EMBEDDING"]) for a, b in zip(int8, exact, strict=True)]
    assert [a["TRUNCATED"] for a in int8] == [b["TRUNCATED"] for b in exact]
    # One batched request, in the precision OpenVINO picks on this CPU: INT8 that works, not the gate's verdict
    # (the gate's texts and batches decided that, above). Edge texts ("", one word repeated 200 times) lose more in
    # INT8 than the gate's texts: docs/precision.md says so.
    assert float(np.mean(cosines)) >= 0.9, cosines


def test_the_bf16_tied_classifier_splits_texts_in_fp32_and_ties_them_in_bf16(checkpoint_cache):
    """The premise of the BF16 refusal below, on any CPU: its two weight rows are one row in BF16, two in FP32."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = checkpoint_cache(make_bf16_tied_classifier)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    weights = model.classifier.weight.detach()
    assert not torch.equal(weights[0], weights[1])
    nearest = weights.to(torch.bfloat16)
    truncated = (weights.view(torch.int32) & -(1 << 16)).view(torch.float32)  # BF16 by dropping the low 16 bits
    assert torch.equal(nearest[0], nearest[1]) and torch.equal(truncated[0], truncated[1])
    tokenizer = AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        logits = model(**tokenizer(bench_texts(64), padding=True, truncation=True, return_tensors="pt")).logits
    second = float((logits.argmax(-1) == 1).float().mean())
    assert 0.2 <= second <= 0.8, f"FP32 gives the second label to {second:.0%} of the texts"


@pytest.mark.skipif("bf16" not in cpu_precisions(), reason="this CPU has no BF16: the branch below runs instead")
def test_bf16_that_flips_labels_is_refused_where_the_cpu_computes_it(checkpoint_cache, tmp_path):
    """A classifier whose labels BF16 cannot tell apart: where this CPU has BF16 (and OpenVINO uses it), the gate
    refuses the build by that precision's name.

    The checkpoint is made so (``make_bf16_tied_classifier``, its premise checked above): in BF16 every text gets one
    label, in FP32 about half get each, whatever BF16 kernels the CPU has.
    """
    spec = BuildSpec(
        model=str(checkpoint_cache(make_bf16_tied_classifier)), name="clf", repository=tmp_path / "repo",
        runtime="openvino",
    )  # fmt: skip
    with pytest.raises(AccuracyError, match=r"OpenVINO BF16 vs FP32 .* build with --runtime onnx"):
        build_repository(spec)
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_the_same_classifier_is_gated_at_fp32_alone_and_says_so_where_the_cpu_has_no_bf16(
    tiny_factory, tmp_path, monkeypatch
):
    """The other branch, on any CPU (flags without BF16): FP32 is all OpenVINO runs, the build passes, and the
    card says that BF16 was not gated."""
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx2 fma avx512f")
    spec = BuildSpec(model=str(tiny_factory("bert")), name="clf", repository=tmp_path / "repo", runtime="openvino")
    assert build_repository(spec).version == 1
    card = (tmp_path / "repo" / "clf" / "1" / "model_card.md").read_text()
    assert "gated at OpenVINO F32: passed" in card and "BF16 not gated: this CPU has no BF16" in card


@pytest.mark.e2e
def test_served_openvino_answers_as_onnx_runtime_within_the_gate(built, shared_server):
    """Served, the IR answers as ONNX Runtime does: to 0.999 where OpenVINO computes in FP32, and within the gate's
    per-text floor where it computes in BF16 (the test above says why that holds on every CPU with BF16)."""
    server = shared_server.serve(*built)
    ov, ort = (infer(TEXTS, name=name, url=server.grpc_url) for name in ("emb_ov", "bert_emb"))
    floor = 0.98 if "bf16" in cpu_precisions() else 0.999
    for a, b in zip(ov, ort, strict=True):
        assert _cosine(a["EMBEDDING"], b["EMBEDDING"]) >= floor and a["TRUNCATED"] == b["TRUNCATED"]
