"""A runtime added from outside the package: one module (``tests/toy_runtime/single_thread.py``) and one line.

Its section and flag reach the spec and the CLI from its own declaration; it is validated by the spec, built
through every stage, served by the real tritonserver, and compared with the default runtime's answers on the
same checkpoint.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.toy_runtime.single_thread import MARKER, SingleThread, SingleThreadSettings
from tritongen.builder.spec import load_spec
from tritongen.cli import main
from tritongen.configs.parser import read_config
from tritongen.errors import SpecError
from tritongen.runtimes import RUNTIMES, get_runtime, register_runtime, runtime_names, runtime_of_backend
from tritongen.serve.client import infer

TEXTS = ["hello world", "Ünïcödé and emoji 🎉", "word " * 100, ""]


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
        load_spec(None, model="m", runtime="onnx-single-thread", precision="int8")
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


@pytest.mark.e2e
def test_toy_runtime_served_matches_default_runtime_when_registered(toy_runtime, tiny_factory, builds, shared_server):
    checkpoint = tiny_factory("bert", task="embedding")
    toy = builds(checkpoint, "toyrt", runtime="onnx-single-thread", toy_marker="one thread")
    default = builds(checkpoint, "toyrt_default")
    model = toy.repository / "toyrt_model"
    config = read_config(model / "config.pbtxt")
    assert config.backend == "onnxruntime"
    assert config.int_parameter("intra_op_thread_count") == 1
    assert (model / "1" / MARKER).read_text(encoding="utf-8") == "toyrt: one thread\n"
    record = toy.record()
    assert record["container_runtimes"] == {record["container"]: {"skipped": "the toy runtime is not in any container"}}
    assert record["fold"]["folded"] is False
    served = infer(TEXTS, name="toyrt", url=shared_server.serve(toy).grpc_url)
    reference = infer(TEXTS, name="toyrt_default", url=shared_server.serve(default).grpc_url)
    np.testing.assert_allclose([r["EMBEDDING"] for r in served], [r["EMBEDDING"] for r in reference], atol=1e-5)
