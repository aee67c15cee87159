"""TensorRT: profile and flag choices (unit), configs, and the real engine build when a GPU is present."""

from __future__ import annotations

import pytest

from tests.configs.test_render import INPUTS, _checkpoint
from tritongen.builder.ensemble import step_configs
from tritongen.builder.spec import check_spec
from tritongen.buildspec import BuildSpec, InstanceGroup
from tritongen.cli import main
from tritongen.configs.render import render_all
from tritongen.errors import EngineError, SpecError
from tritongen.runtimes.tensorrt.engine import (
    EnginePlan,
    Profile,
    build_engine,
    builder_flags,
    cc_model_filenames,
    gpu_compute_capability,
    plan_profiles,
)
from tritongen.tasks import get_task


def test_plan_profiles_cover_each_bucket_without_gaps():
    profiles = plan_profiles([16, 64, 128], max_batch_size=32)
    assert profiles == [
        Profile(min=(1, 1), opt=(16, 16), max=(32, 16)),
        Profile(min=(1, 17), opt=(16, 64), max=(32, 64)),
        Profile(min=(1, 65), opt=(16, 128), max=(32, 128)),
    ]


def test_plan_profiles_refuse_when_batching_off():
    with pytest.raises(EngineError, match="max_batch_size >= 1"):
        plan_profiles([16], max_batch_size=0)


@pytest.mark.parametrize(("precision", "flags"), [("fp32", []), ("fp16", ["FP16"]), ("int8", ["INT8", "FP16"])])
def test_builder_flags_per_precision(precision, flags):
    assert builder_flags(precision) == flags


def test_cc_model_filenames_name_one_plan_per_architecture():
    assert cc_model_filenames(["8.0", "9.0"]) == {"8.0": "model.sm80.plan", "9.0": "model.sm90.plan"}


def test_engine_plan_round_trips_through_json():
    plan = EnginePlan(["input_ids"], plan_profiles([16], 4), ["FP16"], 1 << 30, cc_model_filenames())
    assert EnginePlan.from_json(plan.to_json()) == plan


def test_tensorrt_runtime_renders_plan_config_with_profiles():
    spec = BuildSpec(
        model="m", name="t", runtime="tensorrt", buckets=(16, 64), model_instances=InstanceGroup(kind="KIND_GPU")
    )
    plan = get_task("classification").bind(spec, _checkpoint(), inputs=INPUTS, row_length=128)
    rendered = render_all(step_configs(spec, plan))
    model = rendered["model"][1]
    assert model.platform == "tensorrt_plan"
    assert dict(model.cc_model_filenames)["9.0"] == "model.sm90.plan"
    assert list(model.instance_group[0].profile) == ["0", "1", "2"]
    assert not model.backend


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"optimize": True}, "ONNX Runtime-only operators"),
        ({"precision": "int8", "quantization": "dynamic"}, "static QDQ"),
        ({"model_instances": InstanceGroup(kind="KIND_CPU")}, "KIND_GPU"),
    ],
)
def test_tensorrt_spec_refuses_impossible_combinations(changes, message):
    base = {"model": "m", "runtime": "tensorrt", "model_instances": InstanceGroup(kind="KIND_GPU")}
    with pytest.raises(SpecError, match=message):
        check_spec(BuildSpec(**{**base, **changes}))  # the runtime's own checks


@pytest.mark.skipif(gpu_compute_capability() is not None, reason="this machine has a GPU")
def test_engine_build_says_clearly_when_no_gpu(tmp_path, capsys):
    with pytest.raises(EngineError, match="no NVIDIA GPU found"):
        build_engine(tmp_path)


def test_engine_command_exits_2_without_a_tensorrt_build(tmp_path, capsys):
    assert main(["engine", "--name", "x", "--repository", str(tmp_path)]) == 2
    assert "has no TensorRT build plan" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(gpu_compute_capability() is None, reason="needs an NVIDIA GPU")
def test_engine_builds_on_gpu(tmp_path, tiny_factory):
    pytest.importorskip("tensorrt")
    from tritongen.builder.pipeline import build_repository

    repo = tmp_path / "repo"
    build_repository(
        BuildSpec(
            model=str(tiny_factory("bert")),
            name="t",
            repository=repo,
            runtime="tensorrt",
            precision="fp16",
            model_instances=InstanceGroup(kind="KIND_GPU"),
        )
    )
    plan = build_engine(repo / "t_model" / "1")
    assert plan.stat().st_size > 0
