"""A rendered config.pbtxt reads back into the typed config it was written from; the typed reads say what it sets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.configs.test_render import _checkpoint, _full_spec, _render
from tritongen.buildspec import BuildSpec, DynamicBatchingSettings, VersionPolicySettings
from tritongen.configs import model_config as typed
from tritongen.configs.model_config import Kind, to_proto, to_text
from tritongen.configs.parser import from_proto, read_config
from tritongen.errors import RepositoryError
from tritongen.parameters import EmbeddingParameters, TokenizerFileParameters, TokenizerParameters

GOLDEN = Path(__file__).parents[1] / "assets" / "golden"
STEPS = ("ensemble", "tokenizer", "model", "postprocess")
# Builds that render every section the generator writes, each as the build renders it: (spec, task, architecture).
BUILDS = {
    "every feature": (_full_spec(), "classification", "BertForSequenceClassification"),
    "whole requests": (
        BuildSpec(model="m", name="plain", max_batch_size=0, dynamic_batching=DynamicBatchingSettings(enabled=False)),
        "classification",
        "BertForSequenceClassification",
    ),
    "embedding": (
        BuildSpec(model="m", name="emb", version_policy=VersionPolicySettings("all")),
        "embedding",
        "BertModel",
    ),
    "pinned": (
        BuildSpec(model="m", name="pin", version_policy=VersionPolicySettings("specific", versions=(1, 3))),
        "classification",
        "BertForSequenceClassification",
    ),
    "openvino": (
        BuildSpec(model="m", name="ov", runtime="openvino"),
        "classification",
        "BertForSequenceClassification",
    ),
    "windows": (BuildSpec(model="m", name="ner"), "token-classification", "BertForTokenClassification"),
}


def _rendered(build: str, folder: Path) -> dict[str, tuple[Path, mc.ModelConfig]]:
    """Each step's config of ``build``, rendered as the build renders it and written to ``folder``."""
    spec, task, architecture = BUILDS[build]
    written = {}
    for step, (text, message) in _render(spec, task, _checkpoint(architectures=[architecture])).items():
        path = folder / f"{step}.pbtxt"
        path.write_text(text, encoding="utf-8")
        written[step] = (path, message)
    return written


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_read_config_gives_back_the_rendered_config_when_a_build_renders_it(build, tmp_path):
    for step, (path, message) in _rendered(build, tmp_path).items():
        config = read_config(path)
        assert to_proto(config) == message, step
        assert to_text(config) == path.read_text(encoding="utf-8"), step  # the header line comes back too


@pytest.mark.parametrize("step", STEPS)
def test_read_config_gives_back_the_golden_message_when_read_from_disk(step):
    path = GOLDEN / f"{step}.pbtxt"
    assert to_proto(read_config(path)) == text_format.Parse(path.read_text(), mc.ModelConfig())


def test_read_config_answers_what_readers_ask_when_a_build_renders_every_feature(tmp_path):
    configs = {step: read_config(path) for step, (path, _) in _rendered("every feature", tmp_path).items()}
    ensemble, tokenizer, model = configs["ensemble"], configs["tokenizer"], configs["model"]
    assert ensemble.step_models == ("sentiment_tokenizer", "sentiment_model", "sentiment_postprocess")
    assert ensemble.instances == 1 and not ensemble.on_gpu
    assert (model.instances, model.on_gpu, model.instance_group.kind) == (2, True, Kind.GPU)
    assert model.version_policy.latest == 2
    assert model.dynamic_batching.queue_policy.timeout_action == "REJECT"
    assert tokenizer.read(TokenizerParameters).max_length == 128
    assert tokenizer.read(TokenizerFileParameters).tokenizer_file == "tokenizer.json"
    assert tokenizer.parameter("no such key") is None and tokenizer.int_parameter("no such key") is None
    assert not model.sets(TokenizerParameters) and not tokenizer.sets(EmbeddingParameters)
    assert [(t.name, t.data_type, t.dims) for t in ensemble.inputs] == [
        ("TEXT", "TYPE_STRING", (1,)), ("TRUNCATE_LEFT", "TYPE_BOOL", (1,)),
    ]  # fmt: skip


def test_read_config_gives_dims_without_the_batch_axis_when_the_model_takes_whole_requests(tmp_path):
    rendered = _rendered("whole requests", tmp_path)
    path, message = rendered["ensemble"]
    assert list(message.input[0].dims) == [-1, 1]
    assert read_config(path).inputs[0].dims == (1,)


def test_read_gives_a_switch_as_the_step_reads_it_when_a_step_sets_it(tmp_path):
    path, _ = _rendered("embedding", tmp_path)["postprocess"]
    config = read_config(path)
    assert config.sets(EmbeddingParameters) and config.read(EmbeddingParameters).normalize is False
    on = dataclasses.replace(config, parameters={**config.parameters, "normalize": "true"})
    assert on.read(EmbeddingParameters).normalize is True


def test_read_raises_naming_the_model_and_key_when_a_value_is_no_number(tmp_path):
    path, _ = _rendered("embedding", tmp_path)["tokenizer"]
    config = read_config(path)
    broken = dataclasses.replace(config, parameters={**config.parameters, "max_length": "long"})
    with pytest.raises(ValueError, match="parameter `max_length` of model `emb_tokenizer` is `long`, not a"):
        broken.read(TokenizerParameters)
    with pytest.raises(ValueError, match="model `emb_tokenizer`'s config has no parameter `max_length`"):
        dataclasses.replace(config, parameters={"buckets": "16"}).read(TokenizerParameters)


def test_int_parameter_raises_naming_the_key_when_the_value_is_no_number(tmp_path):
    path, _ = _rendered("embedding", tmp_path)["model"]
    config = dataclasses.replace(read_config(path), parameters={"intra_op_thread_count": "many"})
    with pytest.raises(ValueError, match="parameter `intra_op_thread_count` of `emb_model` is `many`, not a whole"):
        config.int_parameter("intra_op_thread_count")


def test_read_config_raises_one_line_naming_the_file_when_it_is_missing(tmp_path):
    with pytest.raises(RepositoryError) as caught:
        read_config(tmp_path / "m" / "config.pbtxt")
    assert str(caught.value) == f"`{tmp_path / 'm' / 'config.pbtxt'}` does not exist"


def test_read_config_raises_one_line_naming_the_file_when_it_is_no_model_config(tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m"\nmax_batch_size: "many"\n', encoding="utf-8")
    with pytest.raises(RepositoryError, match=f"cannot read `{path}`: ParseError: ") as caught:
        read_config(path)
    assert "\n" not in str(caught.value)


def test_from_proto_refuses_a_config_with_two_instance_groups():
    message = mc.ModelConfig(name="m", backend="python")
    message.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    message.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_GPU)
    with pytest.raises(ValueError, match="`m` has 2 instance groups"):
        from_proto(message)


def test_from_proto_gives_back_the_typed_config_when_every_section_is_set():
    config = typed.ModelConfig(
        name="m",
        backend="python",
        max_batch_size=8,
        inputs=(
            typed.Tensor("TEXT", "TYPE_STRING", (1,)),
            typed.Tensor("TEXT_PAIR", "TYPE_STRING", (1,), optional=True),
        ),
        outputs=(typed.Tensor("SCORE", "TYPE_FP32", (2,)),),
        comment="m: a test model",
        cc_model_filenames={"8.6": "model_86.plan"},
        instance_group=typed.InstanceGroup(count=2, kind=Kind.GPU, gpus=(0,), profiles=("0",)),
        dynamic_batching=typed.DynamicBatching(
            100, (4,), True, typed.QueuePolicy(16, typed.TimeoutAction.DELAY, 5, allow_timeout_override=False)
        ),
        version_policy=typed.VersionPolicy(specific=(1, 3)),
        optimization=typed.OnnxRuntimeOptimization(2, typed.TensorRTAccelerator({"precision_mode": "FP16"})),
        parameters={"quote": 'say "hi"'},
        warmup=(typed.Warmup("bucket_16", (typed.Tensor("input_ids", "TYPE_INT64", (16,)),)),),
        response_cache=True,
    )
    assert from_proto(to_proto(config), config.comment) == config
    # An ensemble's steps are its scheduling, in place of dynamic batching (one proto oneof).
    steps = (typed.EnsembleStep("m_tokenizer", {"TEXT": "TEXT"}, {"input_ids": "input_ids"}, 2),)
    ensemble = dataclasses.replace(config, platform="ensemble", backend="", dynamic_batching=None, steps=steps)
    assert from_proto(to_proto(ensemble), ensemble.comment) == ensemble
