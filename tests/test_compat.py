"""The container's ONNX Runtime, run from here: the worker session, its errors and the version it reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tritongen.compat import CONTAINER_ORT, ContainerSession, container_python, max_relative_diff
from tritongen.errors import StageError

PYTHON = container_python()
needs_venv = pytest.mark.skipif(PYTHON is None, reason="no container-runtime venv (make compat-venv)")


def _double(path: Path, opset: int = 17) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@needs_venv
def test_container_session_runs_a_model_in_the_container_release(tmp_path):
    with ContainerSession(_double(tmp_path / "m.onnx"), PYTHON) as session:
        assert session.version == CONTAINER_ORT
        (y,) = session.run(None, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    np.testing.assert_array_equal(y, 2 * np.arange(6, dtype=np.float32).reshape(2, 3))


@needs_venv
def test_container_session_errors_are_stage_errors(tmp_path):
    with ContainerSession(_double(tmp_path / "m.onnx"), PYTHON) as session:
        with pytest.raises(StageError, match="container runtime check"):
            session.run(None, {"x": np.zeros((2, 4), np.float32)})
    # an opset newer than the container's ONNX Runtime knows cannot load there
    with pytest.raises(StageError, match="did not load"):
        ContainerSession(_double(tmp_path / "new.onnx", opset=99), PYTHON)


def test_max_relative_diff_is_absolute_near_zero_and_relative_for_large_values():
    assert max_relative_diff(np.array([0.0]), np.array([1e-5])) == pytest.approx(1e-5)
    assert max_relative_diff(np.array([1000.0]), np.array([1001.0])) == pytest.approx(1 / 1001)
    assert max_relative_diff(np.array([]), np.array([])) == 0.0
