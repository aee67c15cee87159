"""The typed config sections go through Triton's protobuf and back without losing anything."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.configs.model_config import (
    DynamicBatching,
    InstanceGroup,
    Kind,
    ModelConfig,
    QueuePolicy,
    Tensor,
    TimeoutAction,
    VersionPolicy,
    to_proto,
    to_text,
)
from tritongen.configs.render import render_config
from tritongen.errors import ConfigValidationError


def _config(**changes) -> ModelConfig:
    base = {
        "name": "m",
        "backend": "python",
        "max_batch_size": 8,
        "inputs": (Tensor("TEXT", "TYPE_STRING", (1,)),),
        "outputs": (Tensor("SCORE", "TYPE_FP32", (2,)),),
        "comment": "m: a test model",
    }
    return ModelConfig(**{**base, **changes})


def test_to_text_parses_back_to_the_same_message_when_every_section_is_set():
    config = _config(
        instance_group=InstanceGroup(count=2, kind=Kind.GPU, gpus=(0,)),
        dynamic_batching=DynamicBatching(
            100, (4,), True, QueuePolicy(16, TimeoutAction.DELAY, 5, allow_timeout_override=False)
        ),
        version_policy=VersionPolicy(specific=(1, 3)),
        parameters={"quote": 'say "hi"'},
    )
    text = to_text(config)
    assert text.startswith("# m: a test model\n")
    assert text_format.Parse(text, mc.ModelConfig()) == to_proto(config)
    parsed = text_format.Parse(text, mc.ModelConfig())
    assert parsed.dynamic_batching.default_queue_policy.timeout_action == mc.ModelQueuePolicy.DELAY
    assert parsed.parameters["quote"].string_value == 'say "hi"'


def test_to_text_keeps_max_batch_size_zero_and_adds_the_batch_axis_when_not_batching():
    text = to_text(_config(max_batch_size=0))
    assert "max_batch_size: 0\n" in text
    assert list(text_format.Parse(text, mc.ModelConfig()).input[0].dims) == [-1, 1]


def test_render_config_refuses_an_optional_output():
    with pytest.raises(ConfigValidationError, match="`SCORE` is marked optional"):
        render_config(_config(outputs=(Tensor("SCORE", "TYPE_FP32", (2,), optional=True),)))


def test_render_config_refuses_an_unknown_data_type():
    with pytest.raises(ConfigValidationError, match="cannot be written"):
        render_config(_config(outputs=(Tensor("SCORE", "TYPE_FLOAT", (2,)),)))
