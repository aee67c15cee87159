"""A runtime added from outside the package: one module (``tests/toy_runtime/single_thread.py``) and one line.

Its section and flag reach the spec and the CLI from its own declaration; it is validated by the spec, finds its
release in every container's row (by its pip package) and so in the container venvs' requirements, opens its model
in a container's release for the compat gate and in process for the bench's ceiling; it is built through every
stage, served by the real tritonserver, and compared with the default runtime's answers on the same checkpoint.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tokenizers import Tokenizer, models, pre_tokenizers

from tests.toy_runtime.single_thread import MARKER, SingleThread, SingleThreadSettings
from tritongen.bench.ceiling import ceiling_session, measure_ceiling
from tritongen.builder.spec import check_spec, load_spec
from tritongen.cli import main
from tritongen.configs.parser import read_config
from tritongen.containers import CONTAINERS, DEFAULT_CONTAINER, container
from tritongen.errors import SpecError
from tritongen.gates.compat import ContainerCheck, check_in_container, container_python
from tritongen.runtimes import (
    RUNTIMES,
    container_requirements,
    get_runtime,
    register_runtime,
    runtime_names,
    runtime_of_backend,
)
from tritongen.serve.client import infer

TEXTS = ["hello world", "Ünïcödé and emoji 🎉", "word " * 100, ""]
INPUTS = ("input_ids", "attention_mask")


@pytest.fixture
def toy_runtime():
    register_runtime(SingleThread)  # the one registry line a new runtime needs
    yield RUNTIMES[SingleThread.name]
    RUNTIMES.pop(SingleThread.name)


def test_spec_accepts_toy_runtime_only_while_registered(toy_runtime):
    assert get_runtime("onnx-single-thread") is toy_runtime
    assert "onnx-single-thread" in runtime_names()
    assert load_spec(None, model="m", runtime="onnx-single-thread").runtime == "onnx-single-thread"
    with pytest.raises(SpecError, match="serves the FP32 export as it is"):
        check_spec(load_spec(None, model="m", runtime="onnx-single-thread", precision="int8"))
    RUNTIMES.pop(SingleThread.name)
    with pytest.raises(SpecError, match="runtime must be one of onnx, openvino, tensorrt, got onnx-single-thread"):
        load_spec(None, model="m", runtime="onnx-single-thread")
    register_runtime(SingleThread)


def test_toy_runtime_section_and_flag_come_from_its_declaration_while_registered(toy_runtime, capsys):
    spec = load_spec(None, model="m", runtime="onnx-single-thread", toy_marker="two words")
    assert spec.section(SingleThreadSettings).marker == "two words"
    nested = load_spec(None, model="m", single_thread={"marker": "nested"})
    assert nested.section(SingleThreadSettings).marker == "nested"
    with pytest.raises(SpecError, match="marker must not be empty"):
        load_spec(None, model="m", single_thread={"marker": ""})
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "--toy-marker TOY_MARKER" in capsys.readouterr().out
    RUNTIMES.pop(SingleThread.name)
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "--toy-marker" not in capsys.readouterr().out
    with pytest.raises(SpecError, match=r"unknown setting\(s\) \['toy_marker'\]"):
        load_spec(None, model="m", toy_marker="x")
    register_runtime(SingleThread)


def test_registry_refuses_a_second_runtime_of_one_name_or_owning_a_taken_backend(toy_runtime):
    class Impostor(SingleThread):
        pass

    with pytest.raises(ValueError, match="runtime `onnx-single-thread` is registered already"):
        register_runtime(Impostor)

    class Owner(SingleThread):
        name = "onnx-owner"
        owns_backend = True

    with pytest.raises(ValueError, match="would own backend `onnxruntime`, which `onnx` owns"):
        register_runtime(Owner)
    assert runtime_of_backend("onnxruntime") is get_runtime("onnx")  # the toy serves through it, not owns it


@pytest.mark.parametrize(
    ("flat", "holder"),
    [
        ({"toy_marker": "marker"}, "section `single_thread` (SingleThreadSettings)"),
        ({"qa_doc_stride": "marker"}, "section `question_answering` (QuestionAnsweringSettings)"),
        ({"runtime": "marker"}, "the spec itself"),
    ],
    ids=["another-runtimes-flat-key", "a-tasks-flat-key", "a-spec-setting"],
)
def test_registry_refuses_a_runtime_whose_section_takes_a_spec_key_already_held(toy_runtime, flat, holder):
    settings = type("GreedySettings", (SingleThreadSettings,), {"section": "greedy", "flat_names": flat})
    greedy = type("Greedy", (SingleThread,), {"name": "onnx-greedy", "settings": (settings,)})
    expected = f"section `greedy` (GreedySettings) declares the spec key `{next(iter(flat))}`, which {holder}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        register_runtime(greedy)
    assert "onnx-greedy" not in runtime_names()


def _id_sum(path: Path) -> Path:
    """A model over token ids: ``input_ids + attention_mask`` as floats, saved at ``path``."""
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["n", "s"]) for name in INPUTS]
    output = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", "s"])
    nodes = [
        helper.make_node("Add", list(INPUTS), ["sum"]),
        helper.make_node("Cast", ["sum"], ["out"], to=TensorProto.FLOAT),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "id_sum", inputs, [output]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def _word_tokenizer(path: Path) -> Path:
    """A word-level ``tokenizer.json`` over a few words (the rest unknown), saved at ``path``."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "hello": 2, "world": 3, "word": 4}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path))
    return path


def test_toy_runtime_finds_its_release_in_every_container_and_one_pin_per_package_when_registered(toy_runtime):
    with_toy = {release: container_requirements(target) for release, target in CONTAINERS.items()}
    for release, target in CONTAINERS.items():
        assert toy_runtime.container_release(target) == target.linked("onnxruntime") != ""
        assert toy_runtime.container_requirement(target) == f"onnxruntime=={target.linked('onnxruntime')}"
        assert toy_runtime.container_requirement(target) in with_toy[release]  # what `make compat-venv` installs
    RUNTIMES.pop(SingleThread.name)
    assert {release: container_requirements(target) for release, target in CONTAINERS.items()} == with_toy
    register_runtime(SingleThread)

    class OwnPackage(SingleThread):  # a package no container's backend links: no release, nothing to install
        name = "onnx-own-package"
        package = "toy-runtime"

    register_runtime(OwnPackage)
    try:
        assert get_runtime("onnx-own-package").container_release(container()) == ""
        assert container_requirements(container()) == with_toy[DEFAULT_CONTAINER]
    finally:
        RUNTIMES.pop(OwnPackage.name)


def test_toy_runtime_opens_its_model_in_the_container_release_for_the_compat_gate_when_registered(
    toy_runtime, tmp_path
):
    python = container_python()
    if python is None:
        pytest.skip("no container-runtime venv (make compat-venv)")
    model = _id_sum(tmp_path / "model.onnx")
    feeds = {name: np.array([[2, 3, 0], [4, 1, 1]], np.int64) for name in INPUTS}
    release = get_runtime("onnx-single-thread").container_release(container())
    with get_runtime("onnx-single-thread").container_session(model, python) as session:
        assert (session.version, session.label) == (release, f"ONNX Runtime {release} on one thread")
        report = check_in_container(session, ContainerCheck([feeds], 1e-6, container=DEFAULT_CONTAINER))
    assert report.passed and report.to_dict()["runtime"] == release and "label" not in report.to_dict()
    assert report.summary().startswith(
        f"ONNX Runtime {release} on one thread (the {DEFAULT_CONTAINER} container's) passes"
    )


def test_toy_runtime_opens_its_served_file_for_the_ceiling_when_registered(toy_runtime, tmp_path):
    _id_sum(tmp_path / "toyrt_model" / "1" / toy_runtime.model_file)
    session = ceiling_session(get_runtime("onnx-single-thread"), tmp_path / "toyrt_model" / "1")
    assert session is not None and session.func.__self__.get_session_options().intra_op_num_threads == 1
    tokenizer = _word_tokenizer(tmp_path / "tokenizer.json")
    points = measure_ceiling(session, tokenizer, INPUTS, 16, TEXTS, batch_sizes=(1, 2))
    assert [p.batch_size for p in points] == [1, 2] and all(p.throughput > 0 for p in points)
    RUNTIMES.pop(SingleThread.name)
    with pytest.raises(SpecError, match="got onnx-single-thread"):
        get_runtime("onnx-single-thread")  # the bench names the build's runtime; it opens nothing unregistered
    register_runtime(SingleThread)


@pytest.mark.e2e
def test_toy_runtime_served_matches_default_runtime_when_registered(toy_runtime, tiny_factory, builds, shared_server):
    checkpoint = tiny_factory("bert", task="embedding")
    toy = builds(checkpoint, "toyrt", runtime="onnx-single-thread", toy_marker="one thread", container_check=True)
    default = builds(checkpoint, "toyrt_default")
    model = toy.repository / "toyrt_model"
    config = read_config(model / "config.pbtxt")
    assert config.backend == "onnxruntime"
    assert config.int_parameter("intra_op_thread_count") == 1
    assert (model / "1" / MARKER).read_text(encoding="utf-8") == "toyrt: one thread\n"
    record = toy.record()
    check = record["container_runtimes"][record["container"]]
    if container_python(record["container"]) is None:
        assert "make compat-venv" in check["skipped"]
    else:  # stage 5 ran the served file in the container's release, through the toy's own opening
        assert check["runtime"] == container(record["container"]).linked("onnxruntime") and check["passed"], check
        assert check["criterion"] == "parity"
    assert record["fold"]["folded"] is False
    tokenizer = toy.repository / "toyrt_tokenizer" / "1" / "tokenizer.json"
    ceiling = measure_ceiling(ceiling_session(toy_runtime, model / "1"), tokenizer, record["inputs"], 16, TEXTS, (1, 4))
    assert [p.batch_size for p in ceiling] == [1, 4] and all(p.throughput > 0 for p in ceiling)
    served = infer(TEXTS, name="toyrt", url=shared_server.serve(toy).grpc_url)
    reference = infer(TEXTS, name="toyrt_default", url=shared_server.serve(default).grpc_url)
    np.testing.assert_allclose([r["EMBEDDING"] for r in served], [r["EMBEDDING"] for r in reference], atol=1e-5)
