"""Read a config.pbtxt back into the typed :class:`~tritongen.configs.model_config.ModelConfig`.

The other half of :func:`~tritongen.configs.model_config.to_proto`: what the generator writes, :func:`from_proto`
reads back to an equal message (``to_proto(from_proto(m)) == m`` for every config the build renders), so a
command that reads a built repository, or the configs Triton serves, asks the typed config
(``config.parameter(MAX_LENGTH)``, ``config.instances``, ``config.step_models``) and never digs into the
protobuf. Fields the generator never writes (Triton fills some in when it serves a model) are not kept.

Only protobuf and Triton's schema are imported here, so that the light commands (the gateway, rollout, tune)
can read configs without the build.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.configs.model_config import (
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    Kind,
    ModelConfig,
    OnnxRuntimeOptimization,
    QueuePolicy,
    Tensor,
    TensorRTAccelerator,
    TimeoutAction,
    VersionPolicy,
    Warmup,
)
from tritongen.errors import RepositoryError, describe

__all__ = ["from_proto", "from_text", "read_config"]


def _dims(dims: Iterable[int], batched: bool) -> tuple[int, ...]:
    """Dims as the generator takes them: without the batch axis a whole request (``max_batch_size: 0``) carries."""
    return tuple(dims) if batched else tuple(dims)[1:]


def _tensors(items: Iterable[Any], batched: bool) -> tuple[Tensor, ...]:
    """Each tensor with its dims as the generator takes them (:func:`_dims`)."""
    return tuple(
        Tensor(
            item.name,
            mc.DataType.Name(item.data_type),
            _dims(item.dims, batched),
            optional=getattr(item, "optional", False),  # ModelOutput has no such field
        )
        for item in items
    )


def _version_policy(proto: mc.ModelConfig) -> VersionPolicy | None:
    policy = proto.version_policy
    which = policy.WhichOneof("policy_choice") if proto.HasField("version_policy") else None
    if which == "all":
        return VersionPolicy(all=True)
    if which == "specific":
        return VersionPolicy(specific=tuple(policy.specific.versions))
    return VersionPolicy(latest=policy.latest.num_versions) if which == "latest" else None


def _instance_group(proto: mc.ModelConfig) -> InstanceGroup | None:
    groups = proto.instance_group
    if not groups:
        return None
    if len(groups) > 1:
        raise ValueError(f"config of `{proto.name}` has {len(groups)} instance groups; tritongen writes and reads one")
    group = groups[0]
    kind = mc.ModelInstanceGroup.Kind.Name(group.kind)
    if kind not in {k.value for k in Kind}:
        raise ValueError(f"config of `{proto.name}` runs on {kind}; tritongen writes and reads KIND_CPU and KIND_GPU")
    return InstanceGroup(group.count, Kind(kind), tuple(group.gpus), tuple(group.profile))


def _batching(proto: mc.ModelConfig) -> DynamicBatching | None:
    if not proto.HasField("dynamic_batching"):
        return None
    batching = proto.dynamic_batching
    queue = None
    if batching.HasField("default_queue_policy"):
        policy = batching.default_queue_policy
        queue = QueuePolicy(
            policy.max_queue_size,
            TimeoutAction(mc.ModelQueuePolicy.TimeoutAction.Name(policy.timeout_action)),
            policy.default_timeout_microseconds,
            policy.allow_timeout_override,
        )
    return DynamicBatching(
        batching.max_queue_delay_microseconds,
        tuple(batching.preferred_batch_size),
        batching.preserve_ordering,
        queue,
    )


def _optimization(proto: mc.ModelConfig) -> OnnxRuntimeOptimization | None:
    if not proto.HasField("optimization"):
        return None
    accelerators = proto.optimization.execution_accelerators.gpu_execution_accelerator
    tensorrt = next((dict(a.parameters) for a in accelerators if a.name == "tensorrt"), None)
    return OnnxRuntimeOptimization(
        proto.optimization.graph.level, None if tensorrt is None else TensorRTAccelerator(tensorrt)
    )


def _warmup(sample: Any, batched: bool) -> Warmup:
    inputs = tuple(
        Tensor(name, mc.DataType.Name(data.data_type), _dims(data.dims, batched))
        for name, data in sample.inputs.items()
    )
    return Warmup(sample.name, inputs, sample.batch_size, sample.count)


def from_proto(proto: mc.ModelConfig, comment: str = "") -> ModelConfig:
    """The typed config of a ``ModelConfig`` message (parsed from disk, or served by Triton).

    ValueError when it holds what no typed config can (several instance groups, an instance kind other than
    CPU or GPU).
    """
    batched = proto.max_batch_size > 0
    return ModelConfig(
        name=proto.name,
        max_batch_size=proto.max_batch_size,
        inputs=_tensors(proto.input, batched),
        outputs=_tensors(proto.output, batched),
        backend=proto.backend,
        platform=proto.platform,
        comment=comment,
        default_model_filename=proto.default_model_filename,
        cc_model_filenames=dict(proto.cc_model_filenames),
        version_policy=_version_policy(proto),
        instance_group=_instance_group(proto),
        dynamic_batching=_batching(proto),
        optimization=_optimization(proto),
        parameters={key: value.string_value for key, value in proto.parameters.items()},
        warmup=tuple(_warmup(sample, batched) for sample in proto.model_warmup),
        steps=tuple(
            EnsembleStep(step.model_name, dict(step.input_map), dict(step.output_map), step.model_version)
            for step in proto.ensemble_scheduling.step
        ),
        response_cache=proto.response_cache.enable,
    )


def from_text(text: str) -> ModelConfig:
    """The typed config of ``config.pbtxt`` text, its ``#`` header line kept as the comment.

    ``text_format.ParseError`` or ValueError when it is not one.
    """
    first = text.partition("\n")[0]
    comment = first[1:].strip() if first.startswith("#") else ""
    return from_proto(text_format.Parse(text, mc.ModelConfig()), comment)


def read_config(path: Path) -> ModelConfig:
    """The typed config in the ``config.pbtxt`` at ``path``; RepositoryError naming the file if it cannot be read."""
    path = Path(path)
    try:
        return from_text(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RepositoryError("{path} does not exist", path=path) from None
    except (OSError, UnicodeDecodeError, text_format.ParseError, ValueError) as exc:
        raise RepositoryError(f"cannot read {{path}}: {describe(exc)}", path=path) from None
