"""Typed Triton model configs: one dataclass per section, one generator to Triton's own protobuf.

Each step of an ensemble is a :class:`ModelConfig` (a Python step, an ONNX Runtime model, a TensorRT
plan, the ensemble itself). :func:`to_proto` builds ``model_config_pb2.ModelConfig`` section by section
(``_set_tensors``, ``_set_batching``, ``_set_instance_group``, ...), as pytriton's generator does, and
:func:`to_text` writes it with ``text_format`` under a one-line header (:func:`message_text`, which also
writes a config read back from disk). There is no template: what a config can say is what these classes
can hold, and the schema is Triton's. :mod:`tritongen.configs.parser` reads a written config back into the same
classes, and a reader asks them (:meth:`ModelConfig.parameter`, :attr:`ModelConfig.instances`, ...).

``max_batch_size: 0`` is a real value (whole requests, no batching); protobuf omits zero scalars when
printing, so :func:`message_text` writes it explicitly.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.parameters import StepParameters

__all__ = [
    "DynamicBatching",
    "EnsembleStep",
    "InstanceGroup",
    "Kind",
    "ModelConfig",
    "OnnxRuntimeOptimization",
    "QueuePolicy",
    "Tensor",
    "TensorRTAccelerator",
    "TimeoutAction",
    "VersionPolicy",
    "Warmup",
    "generated_comment",
    "message_text",
    "to_json",
    "to_proto",
    "to_text",
]

P = TypeVar("P", bound=StepParameters)


class _Named(str, enum.Enum):
    """A proto enum by its name, which is also how it prints (``KIND_GPU``, not ``Kind.GPU``)."""

    def __str__(self) -> str:
        return str(self.value)

    __format__ = str.__format__


class Kind(_Named):
    """Where the instances of a model run (``instance_group.kind``)."""

    CPU = "KIND_CPU"
    GPU = "KIND_GPU"


class TimeoutAction(_Named):
    """What a queue does with a request past its timeout (``default_queue_policy.timeout_action``)."""

    REJECT = "REJECT"
    DELAY = "DELAY"


@dataclass(frozen=True)
class Tensor:
    """An input or output: its name, Triton data type (``TYPE_FP32``...) and dims without the batch axis.

    ``optional`` exists for inputs only (``ModelInput.optional``); an optional output is refused.
    """

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False


@dataclass(frozen=True)
class QueuePolicy:
    """``default_queue_policy``: a bounded queue sheds load instead of growing latency."""

    max_queue_size: int = 0
    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = True


@dataclass(frozen=True)
class DynamicBatching:
    """``dynamic_batching``."""

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: tuple[int, ...] = ()
    preserve_ordering: bool = False
    queue_policy: QueuePolicy | None = None


@dataclass(frozen=True)
class InstanceGroup:
    """``instance_group``: copies of the model, where they run, and (TensorRT) their profiles."""

    count: int = 1
    kind: Kind = Kind.CPU
    gpus: tuple[int, ...] = ()
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True)
class VersionPolicy:
    """``version_policy``: the latest N versions, all of them, or specific ones."""

    latest: int = 1
    all: bool = False
    specific: tuple[int, ...] = ()


@dataclass(frozen=True)
class TensorRTAccelerator:
    """The onnxruntime backend's TensorRT execution accelerator and its settings (string parameters)."""

    parameters: Mapping[str, str]


@dataclass(frozen=True)
class OnnxRuntimeOptimization:
    """``optimization`` of an onnxruntime model: graph level and GPU accelerators."""

    graph_level: int = 1
    tensorrt: TensorRTAccelerator | None = None


@dataclass(frozen=True)
class Warmup:
    """One ``model_warmup`` sample of zeros for every input, at one sequence length."""

    name: str
    inputs: tuple[Tensor, ...]
    batch_size: int = 1
    count: int = 1


@dataclass(frozen=True)
class EnsembleStep:
    """One step of ``ensemble_scheduling``: the model, and its tensors' ensemble names."""

    model_name: str
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]
    model_version: int = -1


@dataclass(frozen=True)
class ModelConfig:
    """One model's config: the common sections; which of the optional ones are set depends on the runtime."""

    name: str
    max_batch_size: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    backend: str = ""
    platform: str = ""
    comment: str = ""
    default_model_filename: str = ""
    cc_model_filenames: Mapping[str, str] = field(default_factory=dict)
    version_policy: VersionPolicy | None = None
    instance_group: InstanceGroup | None = None
    dynamic_batching: DynamicBatching | None = None
    optimization: OnnxRuntimeOptimization | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    warmup: tuple[Warmup, ...] = ()
    steps: tuple[EnsembleStep, ...] = ()
    response_cache: bool = False

    def parameter(self, key: str) -> str | None:
        """The parameter ``key`` (every parameter is a string), or None when the config does not set it."""
        return self.parameters.get(key)

    def int_parameter(self, key: str) -> int | None:
        """The parameter ``key`` as a whole number; None when unset, ValueError when it is not a number."""
        value = self.parameters.get(key)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"parameter `{key}` of `{self.name}` is `{value}`, not a whole number") from None

    def sets(self, declaration: type[StepParameters]) -> bool:
        """Whether the config sets any parameter of ``declaration`` (a step's, ``tritongen.parameters``)."""
        return any(key in self.parameters for key in declaration.keys())

    def read(self, declaration: type[P]) -> P:
        """The parameters of ``declaration``, read as the step reads them; ValueError naming this model if bad."""
        return declaration.from_parameters(self.parameters, f"model `{self.name}`")

    @property
    def instances(self) -> int:
        """How many instances of the model run: its instance group's count, one when it sets none."""
        return (self.instance_group.count or 1) if self.instance_group else 1

    @property
    def on_gpu(self) -> bool:
        """Whether the model's instances run on a GPU."""
        return self.instance_group is not None and self.instance_group.kind == Kind.GPU

    @property
    def step_models(self) -> tuple[str, ...]:
        """The models an ensemble calls, in order; () for any other model."""
        return tuple(step.model_name for step in self.steps)


def generated_comment(name: str, step: str, ensemble: str) -> str:
    """The first line of a step's config: what it is, and that the build spec is where to change it."""
    return f"{name}: {step} step of the `{ensemble}` ensemble (generated; edit the build spec instead)."


def _set_tensors(target: Any, tensors: Sequence[Tensor], batched: bool, *, inputs: bool) -> None:
    for tensor in tensors:
        item = target.add(name=tensor.name, data_type=mc.DataType.Value(tensor.data_type))
        item.dims.extend(tensor.dims if batched else (-1, *tensor.dims))  # whole requests: the batch is a dim
        if tensor.optional and not inputs:
            raise ValueError(f"output `{tensor.name}` is marked optional; only inputs can be")
        if tensor.optional:
            item.optional = True


def _set_version_policy(proto: mc.ModelConfig, policy: VersionPolicy | None) -> None:
    if policy is None:
        return
    if policy.all:
        proto.version_policy.all.SetInParent()
    elif policy.specific:
        proto.version_policy.specific.versions.extend(policy.specific)
    else:
        proto.version_policy.latest.num_versions = policy.latest


def _set_instance_group(proto: mc.ModelConfig, group: InstanceGroup | None) -> None:
    if group is None:
        return
    item = proto.instance_group.add(count=group.count, kind=mc.ModelInstanceGroup.Kind.Value(Kind(group.kind).value))
    item.gpus.extend(group.gpus)
    item.profile.extend(group.profiles)


def _set_batching(proto: mc.ModelConfig, batching: DynamicBatching | None) -> None:
    if batching is None:
        return
    target = proto.dynamic_batching
    target.SetInParent()
    target.preferred_batch_size.extend(batching.preferred_batch_size)
    target.max_queue_delay_microseconds = batching.max_queue_delay_microseconds
    target.preserve_ordering = batching.preserve_ordering
    policy = batching.queue_policy
    if policy is not None:
        queue = target.default_queue_policy
        queue.timeout_action = mc.ModelQueuePolicy.TimeoutAction.Value(TimeoutAction(policy.timeout_action).value)
        queue.default_timeout_microseconds = policy.default_timeout_microseconds
        queue.allow_timeout_override = policy.allow_timeout_override
        queue.max_queue_size = policy.max_queue_size


def _set_optimization(proto: mc.ModelConfig, optimization: OnnxRuntimeOptimization | None) -> None:
    if optimization is None:
        return
    proto.optimization.graph.level = optimization.graph_level
    if optimization.tensorrt is not None:
        accelerator = proto.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
        accelerator.parameters.update(optimization.tensorrt.parameters)


def _set_warmup(proto: mc.ModelConfig, samples: Sequence[Warmup], batched: bool) -> None:
    for sample in samples:
        item = proto.model_warmup.add(name=sample.name, batch_size=sample.batch_size, count=sample.count)
        for tensor in sample.inputs:
            data = item.inputs[tensor.name]
            data.data_type = mc.DataType.Value(tensor.data_type)
            data.dims.extend(tensor.dims if batched else (1, *tensor.dims))
            data.zero_data = True


def _set_ensemble(proto: mc.ModelConfig, steps: Sequence[EnsembleStep]) -> None:
    for step in steps:
        item = proto.ensemble_scheduling.step.add(model_name=step.model_name, model_version=step.model_version)
        item.input_map.update(step.input_map)
        item.output_map.update(step.output_map)


def to_proto(config: ModelConfig) -> mc.ModelConfig:
    """The config as Triton's ``ModelConfig`` message."""
    proto = mc.ModelConfig(name=config.name, max_batch_size=config.max_batch_size)
    if config.backend:
        proto.backend = config.backend
    if config.platform:
        proto.platform = config.platform
    if config.default_model_filename:
        proto.default_model_filename = config.default_model_filename
    proto.cc_model_filenames.update(config.cc_model_filenames)
    batched = config.max_batch_size > 0
    _set_tensors(proto.input, config.inputs, batched, inputs=True)
    _set_tensors(proto.output, config.outputs, batched, inputs=False)
    _set_version_policy(proto, config.version_policy)
    _set_instance_group(proto, config.instance_group)
    _set_batching(proto, config.dynamic_batching)
    _set_optimization(proto, config.optimization)
    for key, value in config.parameters.items():
        proto.parameters[key].string_value = value
    _set_warmup(proto, config.warmup, batched)
    _set_ensemble(proto, config.steps)
    if config.response_cache:
        proto.response_cache.enable = True
    return proto


def to_text(config: ModelConfig) -> str:
    """``config.pbtxt`` text: a comment line, then the message (``max_batch_size: 0`` kept explicit)."""
    return message_text(to_proto(config), config.comment)


def to_json(config: ModelConfig) -> str:
    """``config`` as the JSON Triton's load API takes as a config override (``load_model(..., config=)``)."""
    return json.dumps(json_format.MessageToDict(to_proto(config), preserving_proto_field_name=True))


def message_text(proto: mc.ModelConfig, comment: str = "") -> str:
    """``config.pbtxt`` text of a parsed or built message, under a ``# comment`` line when one is given."""
    body = text_format.MessageToString(proto, use_short_repeated_primitives=True)
    if proto.max_batch_size == 0:
        # `name` is field 1, so it prints first; put the explicit zero right after it, where a reader looks.
        first, _, rest = body.partition("\n")
        body = f"{first}\nmax_batch_size: 0\n{rest}" if first.startswith("name:") else f"max_batch_size: 0\n{body}"
    header = f"# {comment}\n" if comment else ""
    return header + body
