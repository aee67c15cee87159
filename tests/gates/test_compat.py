"""The containers' ONNX Runtime and OpenVINO, run from here: the worker session, its errors, the versions it reports,
and every variant a build emits passing in every supported container's runtimes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import MINILM_VARIANTS, variant_containers, variant_kind
from tritongen.containers import CONTAINERS, DEFAULT_CONTAINER, container
from tritongen.errors import StageError
from tritongen.gates.compat import ContainerSession, container_python, max_relative_diff

PYTHON = container_python()
needs_venv = pytest.mark.skipif(PYTHON is None, reason="no container-runtime venv (make compat-venv)")


def _ort(release: str | None = None) -> str:
    """The ONNX Runtime release that container ``release``'s onnxruntime backend links."""
    return container(release).linked("onnxruntime")


def _python(release: str) -> Path:
    python = container_python(release)
    if python is None:
        pytest.skip(f"no runtime venv for the {release} container (make compat-venv; needs its Python)")
    return python


def _double(path: Path, opset: int = 17) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("release", list(CONTAINERS))
def test_container_session_runs_a_model_in_the_container_release(tmp_path, release):
    python = _python(release)
    with ContainerSession(_double(tmp_path / "m.onnx"), python) as session:
        assert session.version == _ort(release)
        (y,) = session.run(None, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    np.testing.assert_array_equal(y, 2 * np.arange(6, dtype=np.float32).reshape(2, 3))
    venv_python = subprocess.run(
        [str(python), "-c", "import sys, openvino; print(sys.version_info[:2], openvino.get_version().split('-')[0])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split(")")  # fmt: skip
    major, minor = container(release).python.split(".")
    openvino = container(release).linked("openvino")
    assert venv_python[0] + ")" == f"({major}, {minor})" and venv_python[1].strip() == openvino


@needs_venv
def test_container_session_errors_are_stage_errors(tmp_path):
    with ContainerSession(_double(tmp_path / "m.onnx"), PYTHON) as session:
        with pytest.raises(StageError, match="container runtime check"):
            session.run(None, {"x": np.zeros((2, 4), np.float32)})
    # an opset newer than the container's ONNX Runtime knows cannot load there
    with pytest.raises(StageError, match="did not load"):
        ContainerSession(_double(tmp_path / "new.onnx", opset=99), PYTHON)


@needs_venv
def test_each_runtime_opens_its_own_file_in_the_container_release_when_asked_for_a_session(tmp_path):
    from tritongen.runtimes import get_runtime
    from tritongen.runtimes.openvino.ir import convert_to_ir

    onnx_file = _double(tmp_path / "m.onnx")
    convert_to_ir(onnx_file, tmp_path / "model.xml")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # What build.json records as the runtime differs: ONNX Runtime's bare release, OpenVINO's with its name.
    for name, model, recorded in (("onnx", onnx_file, "{}"), ("openvino", tmp_path / "model.xml", "OpenVINO {}")):
        runtime = get_runtime(name)
        release = runtime.container_release(container())
        with runtime.container_session(model, PYTHON) as session:
            assert (session.label, session.version) == (f"{runtime.title} {release}", recorded.format(release))
            np.testing.assert_array_equal(session.run(None, {"x": x})[0], 2 * x)
    with pytest.raises(NotImplementedError, match="runtime `tensorrt` has no container check: the model step is a"):
        get_runtime("tensorrt").container_session(onnx_file, PYTHON)


def test_max_relative_diff_is_absolute_near_zero_and_relative_for_large_values():
    assert max_relative_diff(np.array([0.0]), np.array([1e-5])) == pytest.approx(1e-5)
    assert max_relative_diff(np.array([1000.0]), np.array([1001.0])) == pytest.approx(1 / 1001)
    assert max_relative_diff(np.array([]), np.array([])) == 0.0


@needs_venv
@pytest.mark.e2e
@pytest.mark.parametrize(
    ("name", "criterion"),
    [("emb", "parity"), ("fp32_opt", "parity"), ("fp16", "gate"), ("int8_static", "gate"), ("int8", "gate")],
    ids=["fp32", "optimized", "fp16", "int8-static", "int8-dynamic"],
)
def test_every_emitted_variant_passes_in_the_target_and_another_container_runtime(minilm_variant, name, criterion):
    """conftest's MINILM_VARIANTS, the builds the precision and e2e tests serve, each checked in the target container
    and one other (``variant_containers``: every container sees both kinds of variant)."""
    record = minilm_variant(name, container_check=True).record()
    assert (
        record["container"] == DEFAULT_CONTAINER
        and next(iter(record["container_runtimes"])) == DEFAULT_CONTAINER  # the target first
    )
    assert set(record["container_runtimes"]) == set(variant_containers(name))
    for release, check in record["container_runtimes"].items():
        if container_python(release) is None:
            assert "make compat-venv" in check["skipped"]
            continue
        assert check["runtime"] == _ort(release) and check["container"] == release, check
        assert check["criterion"] == criterion and check["passed"], check
    if name.startswith(
        "int8"
    ):  # the INT8 search gated its candidates in the target's runtime: the card says by how much
        assert f"; ONNX Runtime {_ort()}: mean +" in minilm_variant(name).card()


def test_the_variants_prove_every_container_on_both_kinds_of_variant():
    kinds = {"emb": "parity", "fp32_opt": "parity", "fp16": "gate", "int8_static": "gate", "int8": "gate"}
    assert {name: variant_kind(name) for name in MINILM_VARIANTS} == kinds
    proven = {(release, kinds[name]) for name in MINILM_VARIANTS for release in variant_containers(name)}
    assert proven == {(release, kind) for release in CONTAINERS for kind in ("parity", "gate")}
    assert all(variant_containers(name)[0] == DEFAULT_CONTAINER for name in MINILM_VARIANTS)


@needs_venv
def test_a_model_the_container_runtime_disagrees_with_is_refused_and_nothing_is_published(
    tiny_factory, tmp_path, monkeypatch
):
    from tritongen.builder.pipeline import build_repository
    from tritongen.buildspec import BuildSpec
    from tritongen.errors import ParityError
    from tritongen.gates import compat

    real_run = compat.ContainerSession.run
    monkeypatch.setattr(compat.ContainerSession, "run", lambda self, n, f: [o + 0.01 for o in real_run(self, n, f)])
    with pytest.raises(ParityError, match=rf"ONNX Runtime {_ort()} \(the {DEFAULT_CONTAINER} container's\) FAILS"):
        build_repository(BuildSpec(model=str(tiny_factory("bert")), name="m", repository=tmp_path / "repo"))
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_the_check_is_skipped_and_recorded_when_turned_off(tiny_factory, tmp_path):
    import json

    from tritongen.builder.pipeline import build_repository
    from tritongen.buildspec import BuildSpec

    spec = BuildSpec(model=str(tiny_factory("bert")), name="m", repository=tmp_path, container_check=False)
    build_repository(spec)
    record = json.loads((tmp_path / "m" / "1" / "build.json").read_text())["container_runtimes"][DEFAULT_CONTAINER]
    assert record == {"skipped": "turned off in the spec"}
