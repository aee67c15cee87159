"""Write config.pbtxt files from typed configs and validate them with Triton's schema.

Every config (:mod:`tritongen.configs.model_config`, built by :mod:`tritongen.configs.steps`) is written with
``text_format`` and the text is parsed back into ``tritonclient.grpc.model_config_pb2.ModelConfig``:
what is checked is exactly what is written. An ensemble's wiring is then checked in code: every
mapped tensor exists in the step model, is produced exactly once, and agrees in data type and dims
with what consumes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.configs.model_config import ModelConfig, to_text
from tritongen.errors import ConfigValidationError

__all__ = ["REFUSED_PARAMETERS", "parse_config", "render_all", "render_config", "validate_ensemble"]

# Parameters no config of ours may carry, and why. The openvino backend's batch padding is broken upstream (r24.10
# to main): after a padded batch a full one fails, and concurrent padded batches answer wrong values.
REFUSED_PARAMETERS = {
    "ENABLE_BATCH_PADDING": "the openvino backend's batch padding is broken upstream (wrong answers under load)",
}


def render_config(config: ModelConfig) -> tuple[str, mc.ModelConfig]:
    """``config.pbtxt`` text of ``config``, and that text parsed with Triton's schema."""
    try:
        text = to_text(config)
    except ValueError as exc:  # an unknown data type or enum name, or an optional output
        raise ConfigValidationError(f"config of `{config.name}` cannot be written: {exc}") from None
    return text, parse_config(text, config.name)


def parse_config(text: str, name: str) -> mc.ModelConfig:
    """Parse config.pbtxt text with Triton's own protobuf schema."""
    try:
        config = text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigValidationError(f"config of `{name}` is not a valid Triton model config: {exc}") from None
    if config.name != name:
        raise ConfigValidationError(f"config of `{name}` names itself `{config.name}`")
    if not config.backend and not config.platform:
        raise ConfigValidationError(f"config of `{name}` sets neither backend nor platform")
    for tensor in list(config.input) + list(config.output):
        if not tensor.dims:
            raise ConfigValidationError(f"tensor `{tensor.name}` of `{name}` has no dims")
    for key in set(config.parameters) & set(REFUSED_PARAMETERS):
        raise ConfigValidationError(f"config of `{name}` sets parameter {key}: {REFUSED_PARAMETERS[key]}")
    return config


@dataclass(frozen=True)
class _Tensor:
    data_type: int
    dims: tuple[int, ...]
    where: str


def _shape(tensor: Any, config: mc.ModelConfig) -> tuple[int, ...]:
    """A tensor's whole shape: its dims, after the batch axis when the model batches."""
    return tuple(tensor.dims) if config.max_batch_size == 0 else (-1, *tensor.dims)


def _dims_agree(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _type_name(value: int) -> str:
    return mc.DataType.Name(value)


def _check(consumer: _Tensor, producer: _Tensor, tensor: str) -> None:
    if consumer.data_type != producer.data_type:
        raise ConfigValidationError(
            f"ensemble tensor `{tensor}` is {_type_name(producer.data_type)} from {producer.where} "
            f"but {consumer.where} expects {_type_name(consumer.data_type)}"
        )
    if not _dims_agree(consumer.dims, producer.dims):
        raise ConfigValidationError(
            f"ensemble tensor `{tensor}` has dims {list(producer.dims)} from {producer.where} "
            f"but {consumer.where} expects {list(consumer.dims)}"
        )


def validate_ensemble(ensemble: mc.ModelConfig, models: Mapping[str, mc.ModelConfig]) -> None:
    """Check the ensemble's steps against the step models' configs.

    Raises :class:`ConfigValidationError` naming the first problem found.
    """
    if ensemble.platform != "ensemble":
        raise ConfigValidationError(f"`{ensemble.name}` is not an ensemble")
    # Shapes are compared whole (batch axis included), so steps that batch and steps that take whole
    # requests (max_batch_size 0) can be mixed.
    available: dict[str, _Tensor] = {
        t.name: _Tensor(t.data_type, _shape(t, ensemble), f"ensemble input `{t.name}`") for t in ensemble.input
    }
    for step in ensemble.ensemble_scheduling.step:
        model = models.get(step.model_name)
        if model is None:
            raise ConfigValidationError(f"ensemble `{ensemble.name}` calls `{step.model_name}`, which is not generated")
        if model.max_batch_size and ensemble.max_batch_size > model.max_batch_size:  # 0: it takes whole requests
            raise ConfigValidationError(
                f"step `{model.name}` has max_batch_size {model.max_batch_size}, "
                f"below the ensemble's {ensemble.max_batch_size}"
            )
        inputs = {t.name: t for t in model.input}
        outputs = {t.name: t for t in model.output}
        for key, value in step.input_map.items():
            if key not in inputs:
                raise ConfigValidationError(f"step `{model.name}` has no input `{key}` (inputs: {sorted(inputs)})")
            if value not in available:
                raise ConfigValidationError(f"step `{model.name}` reads `{value}`, which no earlier step produces")
            consumer = _Tensor(inputs[key].data_type, _shape(inputs[key], model), f"input `{key}` of `{model.name}`")
            _check(consumer, available[value], value)
        missing = sorted(set(inputs) - set(step.input_map) - {t.name for t in model.input if t.optional})
        if missing:
            raise ConfigValidationError(f"step `{model.name}` gets no value for input(s) {missing}")
        for key, value in step.output_map.items():
            if key not in outputs:
                raise ConfigValidationError(f"step `{model.name}` has no output `{key}` (outputs: {sorted(outputs)})")
            if value in available:
                raise ConfigValidationError(f"ensemble tensor `{value}` is produced more than once")
            available[value] = _Tensor(
                outputs[key].data_type, _shape(outputs[key], model), f"output `{key}` of `{model.name}`"
            )
    for output in ensemble.output:
        if output.name not in available:
            raise ConfigValidationError(f"ensemble output `{output.name}` is produced by no step")
        consumer = _Tensor(output.data_type, _shape(output, ensemble), f"ensemble output `{output.name}`")
        _check(consumer, available[output.name], output.name)


def render_all(configs: Mapping[str, ModelConfig]) -> dict[str, tuple[str, mc.ModelConfig]]:
    """Write every step's config (keyed by step) and validate the ensemble wiring."""
    rendered = {step: render_config(config) for step, config in configs.items()}
    if "ensemble" in rendered:
        validate_ensemble(rendered["ensemble"][1], {config.name: config for _, config in rendered.values()})
    return rendered
