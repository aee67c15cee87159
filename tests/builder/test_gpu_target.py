"""A GPU node as a target: `device: gpu` in the spec, the build it gives, and serving it where there is no GPU."""

from __future__ import annotations

import shutil

import pytest

from tritongen.builder.spec import check_spec, load_spec
from tritongen.cli import main
from tritongen.configs.parser import read_config
from tritongen.errors import SpecError
from tritongen.runtimes.onnxruntime import TensorRTSettings
from tritongen.serve.foreground import gpu_models, has_gpu


def test_device_gpu_fills_what_a_gpu_node_wants_where_the_spec_leaves_it_open():
    spec = load_spec(model="m", device="gpu")
    assert spec.model_instances.kind == "KIND_GPU"
    assert spec.precision == "fp16"
    trt = spec.section(TensorRTSettings)
    assert trt.enabled and trt.precision_mode == "FP16"
    # an explicit value wins
    assert load_spec(model="m", device="gpu", precision="fp32").precision == "fp32"
    assert load_spec(model="m", device="gpu", model_instances={"count": 2}).model_instances.count == 2


def test_device_conflicting_with_the_instance_kind_is_refused():
    with pytest.raises(SpecError, match="device gpu runs the model step on KIND_GPU"):
        load_spec(model="m", device="gpu", model_instances={"kind": "KIND_CPU"})
    with pytest.raises(SpecError, match="device cpu, but the spec puts instances on KIND_GPU"):
        load_spec(model="m", device="cpu", model_instances={"kind": "KIND_GPU"})


def test_device_gpu_build_serves_on_gpu_instances_and_is_refused_where_there_is_no_gpu(
    tiny_factory, builds, tmp_path, capsys
):
    built = builds(tiny_factory("bert", "classification"), "gpu_cls", device="gpu")
    model = read_config(built.repository / "gpu_cls_model" / "config.pbtxt")
    assert model.on_gpu
    assert model.optimization.tensorrt is not None
    assert "fp16" in built.record()["variant"].lower()
    repo = tmp_path / "repo"
    shutil.copytree(built.repository, repo)
    assert gpu_models(repo) == ["gpu_cls_model"]
    if has_gpu():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    capsys.readouterr()  # the build's own output
    assert main(["serve", "--repository", str(repo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`gpu_cls_model`" in err[0] and "built for a GPU node" in err[0], err
    assert "make repo DEVICE=cpu" in err[0]


def test_gpu_accelerator_cuda_drops_tensorrt_and_a_conflict_is_refused():
    spec = load_spec(model="m", device="gpu", gpu_accelerator="cuda")
    assert spec.model_instances.kind == "KIND_GPU" and spec.precision == "fp16"
    assert not spec.section(TensorRTSettings).enabled
    with pytest.raises(SpecError, match=r"gpu_accelerator cuda runs the CUDA provider alone, but tensorrt\.enabled"):
        check_spec(load_spec(model="m", device="gpu", gpu_accelerator="cuda", tensorrt={"enabled": True}))
    with pytest.raises(SpecError, match=r"gpu_accelerator must be tensorrt or cuda"):
        load_spec(model="m", device="gpu", gpu_accelerator="rocm")


def test_cuda_only_gpu_build_renders_no_accelerator_and_the_backend_serves_its_step_on_cpu(tiny_factory, builds):
    """The CUDA provider is the onnxruntime backend's own for KIND_GPU: the config names no accelerator. Here, with
    no GPU, the same step on KIND_CPU loads and answers (natively where ``TRITONGEN_BACKENDS`` has the backend)."""
    import numpy as np

    from tests.builds import step_alone

    built = builds(tiny_factory("bert", "embedding"), "gpu_cuda", device="gpu", gpu_accelerator="cuda")
    model = read_config(built.repository / "gpu_cuda_model" / "config.pbtxt")
    assert model.on_gpu
    assert model.optimization is None or model.optimization.tensorrt is None
    assert "CUDA provider" in built.card() and "CUDA provider" in built.record()["variant"]
    ids = np.array([[1, 20, 2, 0]], dtype=np.int64)  # the tiny checkpoint's vocabulary is small
    feeds = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64), "token_type_ids": np.zeros_like(ids)}
    outputs = step_alone(built.repository / "gpu_cuda_model", {k: v for k, v in feeds.items() if k in _inputs(model)})
    assert all(np.isfinite(value).all() for value in outputs.values())


def _inputs(config) -> set[str]:
    return {t.name for t in config.inputs}
