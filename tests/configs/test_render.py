"""Typed configs render into configs that Triton's schema accepts, and the wiring check catches mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.builder.ensemble import step_configs
from tritongen.buildspec import (
    BuildSpec,
    DynamicBatchingSettings,
    InstanceGroup,
    QueuePolicy,
    VersionPolicySettings,
)
from tritongen.configs.render import parse_config, render_all, validate_ensemble
from tritongen.errors import ConfigValidationError
from tritongen.model.checkpoint import Checkpoint, Pooling
from tritongen.repository.contents import step_names
from tritongen.runtimes.onnxruntime import TensorRTSettings
from tritongen.tasks import get_task

GOLDEN = Path(__file__).parents[1] / "assets" / "golden"
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def _checkpoint(**config) -> Checkpoint:
    base = {
        "model_type": "bert",
        "architectures": ["BertForSequenceClassification"],
        "id2label": {"0": "negative", "1": "positive"},
        "hidden_size": 32,
        "max_position_embeddings": 128,
    }
    base.update(config)
    return Checkpoint(path=Path("/ckpt"), config=base, pooling=Pooling())


def _render(spec: BuildSpec, task: str = "classification", checkpoint: Checkpoint | None = None):
    plan = get_task(task).bind(spec, checkpoint or _checkpoint(), inputs=INPUTS, row_length=128)
    configs = step_configs(spec, plan)
    return render_all(configs)


def _full_spec() -> BuildSpec:
    return BuildSpec(
        model="m",
        name="sentiment",
        max_batch_size=32,
        buckets=(16, 64),
        dynamic_batching=DynamicBatchingSettings(
            max_queue_delay_microseconds=500,
            preferred_batch_size=(8, 16),
            preserve_ordering=True,
            queue_policy=QueuePolicy(max_queue_size=64, timeout_action="REJECT", default_timeout_microseconds=10_000),
        ),
        model_instances=InstanceGroup(count=2, kind="KIND_GPU", gpus=(0, 1)),
        version_policy=VersionPolicySettings(policy="latest", latest=2),
        response_cache=True,
        runtime_settings={"tensorrt": TensorRTSettings(enabled=True, precision_mode="FP16")},
    )


@pytest.mark.parametrize("step", ["ensemble", "tokenizer", "model", "postprocess"])
def test_render_matches_golden_config_when_every_feature_is_on(step):
    rendered = _render(_full_spec())
    golden = text_format.Parse((GOLDEN / f"{step}.pbtxt").read_text(), mc.ModelConfig())
    assert rendered[step][1] == golden


def test_render_keeps_max_batch_size_zero_explicit_when_batching_off():
    spec = BuildSpec(model="m", name="plain", max_batch_size=0, dynamic_batching=DynamicBatchingSettings(enabled=False))
    rendered = _render(spec)
    for text, config in rendered.values():
        assert "max_batch_size: 0" in text
        assert not config.HasField("dynamic_batching")
    ensemble = rendered["ensemble"][1]
    assert list(ensemble.input[0].dims) == [-1, 1]
    model = rendered["model"][1]
    assert list(model.input[0].dims) == [-1, -1]
    assert list(model.model_warmup[0].inputs["input_ids"].dims) == [1, 16]


@pytest.mark.parametrize(
    ("instances", "threads", "batcher"),
    [
        (InstanceGroup(count=2), 1, True),
        (InstanceGroup(count=1), 1, True),
        (InstanceGroup(count=1), 2, False),  # one session of spinning threads: Triton 2.51's batcher stalls it
        (InstanceGroup(count=1), 0, False),  # ONNX Runtime's own thread count: every core
        (InstanceGroup(count=1, kind="KIND_GPU"), 0, True),
    ],
)
def test_render_drops_the_batcher_for_one_cpu_instance_of_several_threads(instances, threads, batcher):
    from tritongen.runtimes.onnxruntime import OnnxRuntimeSettings

    spec = BuildSpec(
        model="m", name="emb", model_instances=instances,
        runtime_settings={"onnxruntime": OnnxRuntimeSettings(intra_op_threads=threads)},
    )  # fmt: skip
    rendered = _render(spec, task="embedding", checkpoint=_checkpoint(architectures=["BertModel"]))
    assert rendered["model"][1].HasField("dynamic_batching") is batcher
    assert rendered["model"][1].max_batch_size == spec.max_batch_size  # batched calls (the gateway's) still fit
    assert rendered["tokenizer"][1].HasField("dynamic_batching")


def test_render_outputs_embedding_contract_when_task_is_embedding():
    checkpoint = _checkpoint(architectures=["BertModel"], hidden_size=48)
    rendered = _render(BuildSpec(model="m", name="emb"), task="embedding", checkpoint=checkpoint)
    output, truncated, tokens = rendered["ensemble"][1].output
    assert (output.name, output.data_type, list(output.dims)) == ("EMBEDDING", mc.TYPE_FP32, [48])
    assert (truncated.name, truncated.data_type, list(truncated.dims)) == ("TRUNCATED", mc.TYPE_BOOL, [1])
    assert (tokens.name, tokens.data_type, list(tokens.dims)) == ("TOKEN_COUNT", mc.TYPE_INT32, [1])
    assert [o.name for o in rendered["postprocess"][1].output] == ["EMBEDDING"]  # the tokenizer says it
    params = rendered["postprocess"][1].parameters
    assert params["task"].string_value == "embedding"


def test_render_sets_one_warmup_per_bucket_and_version_policy():
    rendered = _render(
        BuildSpec(model="m", name="s", buckets=(16, 32, 64, 512), version_policy=VersionPolicySettings("all"))
    )
    model = rendered["model"][1]
    assert [w.name for w in model.model_warmup] == ["bucket_16", "bucket_32", "bucket_64", "bucket_128"]
    assert model.version_policy.HasField("all")


def test_parse_config_raises_when_text_is_not_a_model_config():
    with pytest.raises(ConfigValidationError, match="not a valid Triton model config"):
        parse_config('name: "x"\nbackend: "python"\nmax_batch_size: "many"\n', "x")


def test_parse_config_refuses_batch_padding_which_is_broken_upstream():
    text = 'name: "x"\nbackend: "openvino"\nparameters { key: "ENABLE_BATCH_PADDING" value { string_value: "YES" } }\n'
    with pytest.raises(ConfigValidationError, match="sets parameter ENABLE_BATCH_PADDING: the openvino backend's"):
        parse_config(text, "x")


def test_validate_ensemble_accepts_a_step_that_takes_whole_requests_in_a_batched_ensemble():
    """The openvino model step: max_batch_size 0, the batch axis in its dims (Triton expands the others' shapes)."""
    configs = _configs()
    model = configs["model"]
    model.max_batch_size = 0
    for tensor in list(model.input) + list(model.output):
        tensor.dims.insert(0, -1)
    validate_ensemble(configs["ensemble"], {c.name: c for c in configs.values()})


def _configs():
    rendered = _render(BuildSpec(model="m", name="s"))
    return {step: config for step, (_, config) in rendered.items()}


def test_validate_ensemble_raises_when_step_input_missing():
    configs = _configs()
    configs["model"].input[2].name = "segment_ids"
    with pytest.raises(ConfigValidationError, match="has no input `token_type_ids`"):
        validate_ensemble(configs["ensemble"], {c.name: c for c in configs.values()})


def test_validate_ensemble_raises_when_dtype_disagrees():
    configs = _configs()
    configs["model"].input[0].data_type = mc.TYPE_INT32
    with pytest.raises(ConfigValidationError, match=r"is TYPE_INT64 from output `input_ids`.*expects TYPE_INT32"):
        validate_ensemble(configs["ensemble"], {c.name: c for c in configs.values()})


def test_validate_ensemble_raises_when_dims_disagree():
    configs = _configs()
    del configs["postprocess"].input[0].dims[:]
    configs["postprocess"].input[0].dims.extend([3])
    with pytest.raises(ConfigValidationError, match=r"has dims \[-1, 2\].*expects \[-1, 3\]"):
        validate_ensemble(configs["ensemble"], {c.name: c for c in configs.values()})


def test_validate_ensemble_raises_when_output_not_produced():
    configs = _configs()
    configs["ensemble"].output.add(name="EXTRA", data_type=mc.TYPE_FP32, dims=[1])
    with pytest.raises(ConfigValidationError, match="`EXTRA` is produced by no step"):
        validate_ensemble(configs["ensemble"], {c.name: c for c in configs.values()})


def test_validate_ensemble_raises_when_step_model_unknown():
    configs = _configs()
    del configs["postprocess"]
    with pytest.raises(ConfigValidationError, match="calls `s_postprocess`, which is not generated"):
        validate_ensemble(configs["ensemble"], {c.name: c for c in configs.values()})


def test_validate_ensemble_raises_when_step_batch_smaller_than_ensemble():
    configs = _configs()
    configs["tokenizer"].max_batch_size = 8
    with pytest.raises(ConfigValidationError, match="max_batch_size 8, below the ensemble's 64"):
        validate_ensemble(configs["ensemble"], {c.name: c for c in configs.values()})


def test_step_names_follow_the_ensemble_name():
    assert step_names("x") == {
        "ensemble": "x",
        "tokenizer": "x_tokenizer",
        "model": "x_model",
        "postprocess": "x_postprocess",
    }


def test_queue_limit_is_the_model_steps_alone_eight_batches_by_default_and_zero_lifts_it(tiny_factory):
    from rich.console import Console

    from tritongen.builder.pipeline import inspect, render

    console = Console(quiet=True)
    spec = BuildSpec(
        model=str(tiny_factory("bert")), name="q", max_batch_size=16, model_instances=InstanceGroup(count=2)
    )
    assert render(inspect(spec, console))["model"][1].dynamic_batching.default_queue_policy.max_queue_size == 128
    unbounded = spec.replace(dynamic_batching=DynamicBatchingSettings(queue_policy=QueuePolicy(max_queue_size=0)))
    assert render(inspect(unbounded, console))["model"][1].dynamic_batching.default_queue_policy.max_queue_size == 0
    limited = spec.replace(dynamic_batching=DynamicBatchingSettings(queue_policy=QueuePolicy(max_queue_size=32)))
    configs = render(inspect(limited, console))
    assert configs["model"][1].dynamic_batching.default_queue_policy.max_queue_size == 32
    for step in ("tokenizer", "postprocess"):
        assert not configs[step][1].dynamic_batching.HasField("default_queue_policy")
