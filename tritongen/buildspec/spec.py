"""The build spec as data: its fields, its nested settings, and the checks that need nothing but the spec.

:class:`BuildSpec` checks itself when made (``__post_init__``); the checks that need a registry (a runtime's own)
are ``tritongen.builder.spec.check_spec``'s.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from tritongen.buildspec.cores import check_cpu_cores
from tritongen.buildspec.sections import RuntimeSettings, SpecSection, TaskSettings
from tritongen.configs.model_config import (  # InstanceGroup and QueuePolicy: the same sections as Triton's config
    DynamicBatching,
    InstanceGroup,
    Kind,
    QueuePolicy,
    TimeoutAction,
    VersionPolicy,
)
from tritongen.containers import CONTAINERS, DEFAULT_CONTAINER
from tritongen.errors import SpecError

__all__ = [
    "DEFAULT_BUCKETS",
    "DEFAULT_NAME",
    "GPU_QUEUE_DELAY_US",
    "QUEUE_BATCHES",
    "BuildSpec",
    "DynamicBatchingSettings",
    "ModelLayoutSettings",
    "VersionPolicySettings",
    "bucket_lengths",
    "instance_group",
]

_Section = TypeVar("_Section", bound=SpecSection)

DEFAULT_NAME = "minilm"  # the ensemble name of every command, as of the default model (all-MiniLM-L6-v2)

DEFAULT_BUCKETS = (16, 32, 64, 128, 256, 512)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


GPU_QUEUE_DELAY_US = 2000  # the model step's default batcher delay on KIND_GPU instances

# A backstop, not a throttle: by default the model step's queue holds at most this many full batches, so a
# burst beyond it is shed (UNAVAILABLE/503) instead of queueing without bound, while ordinary bursts never
# reach it. A tight limit cost throughput on a 2-core CPU (docs/benchmarks.md, "Under load"); set one per deployment.
QUEUE_BATCHES = 8


@dataclass(frozen=True)
class DynamicBatchingSettings:
    """Triton ``dynamic_batching`` for the batched steps; ``enabled=False`` omits it."""

    enabled: bool = True
    # None: by where the model step runs (BuildSpec.queue_delay_us): 0 on KIND_CPU, where waiting for a partner
    # buys nothing (a CPU encoder is compute-bound: measured 1.17x the requests/s at c1 and 1.06x at c16 without
    # it), and 2000 on KIND_GPU, where the wait is what forms batches at moderate load.
    max_queue_delay_microseconds: int | None = None
    preferred_batch_size: tuple[int, ...] = ()
    preserve_ordering: bool = False
    queue_policy: QueuePolicy | None = None

    def to_config(self, *, default_queue: int = 0) -> DynamicBatching | None:
        """Triton's section; ``default_queue`` bounds the queue when the spec names no policy (0: unbounded)."""
        if not self.enabled:
            return None
        policy = self.queue_policy
        if policy is None and default_queue:
            policy = QueuePolicy(max_queue_size=default_queue)
        return DynamicBatching(
            max_queue_delay_microseconds=self.max_queue_delay_microseconds or 0,
            preferred_batch_size=tuple(self.preferred_batch_size),
            preserve_ordering=self.preserve_ordering,
            # a timeout action read from YAML is a string
            queue_policy=None
            if policy is None
            else dataclasses.replace(policy, timeout_action=TimeoutAction(policy.timeout_action)),
        )


@dataclass(frozen=True)
class VersionPolicySettings:
    """Triton ``version_policy`` of the model step: latest N, all, or specific versions."""

    policy: Literal["latest", "all", "specific"] = "latest"
    latest: int = 1
    versions: tuple[int, ...] = ()

    def to_config(self) -> VersionPolicy:
        """Triton's section."""
        if self.policy == "all":
            return VersionPolicy(all=True)
        if self.policy == "specific":
            return VersionPolicy(specific=tuple(self.versions))
        return VersionPolicy(latest=self.latest)


@dataclass(frozen=True)
class ModelLayoutSettings:
    """How a CPU build lays out the model step where the spec leaves its instances and threads open.

    ``left_open``: the spec leaves the instances and threads to the build. The loader records it from what the
    spec file and flags give (neither the model step's ``count`` nor its runtime's threads), a spec made in code
    says it itself, and one written stands (``build.json`` records it, so a rebuild decides again); the build's
    size stage decides the layout from it, once.

    ``measure``: the build times a few layouts on the served model and takes the one ``prefer`` picks
    (``tritongen.sizing``). Unset, a layout left open is measured where this machine can stand in for the node
    (no more ``cpu_cores`` than it has); ``false`` keeps the runtime's fixed CPU default, ``true`` measures a
    layout the spec gives too.

    ``workload``: the requests the layouts are timed with. ``queries``, one short text per request, is most
    traffic, and where the gateway cuts a big request over the instances it serves documents too; ``documents``,
    32 long texts per request, sizes a node that indexes a corpus sent straight to Triton, where one request
    should have every core.
    """

    prefer: Literal["balanced", "latency", "throughput"] = "balanced"
    measure: bool | None = None
    left_open: bool = False
    workload: Literal["queries", "documents"] = "queries"


@dataclass(frozen=True)
class BuildSpec:
    """What to build, and how the generated Triton configuration should behave."""

    model: str
    name: str = DEFAULT_NAME
    task: str | None = None  # None: detected from the checkpoint
    repository: Path = Path("model_repository")
    max_batch_size: int = 64
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    # How the tokenizer step pads a request: to the smallest bucket that holds its longest row ("buckets"), so that
    # Triton batches requests of one shape, or to that row's own length ("longest"). A CPU build takes "longest":
    # a CPU computes every padding column and one-text requests rarely share a batch there (MiniLM INT8 served
    # 1.25x the script at c16 so, 1.00x with buckets; docs/benchmarks.md). A model without an attention mask pads
    # to its row length whatever this says.
    padding: Literal["buckets", "longest"] = "buckets"
    dynamic_batching: DynamicBatchingSettings = field(default_factory=DynamicBatchingSettings)
    tokenizer_instances: InstanceGroup = field(default_factory=InstanceGroup)
    model_instances: InstanceGroup = field(default_factory=InstanceGroup)
    postprocess_instances: InstanceGroup = field(default_factory=InstanceGroup)
    version_policy: VersionPolicySettings = field(default_factory=VersionPolicySettings)
    model_layout: ModelLayoutSettings = field(default_factory=ModelLayoutSettings)
    warmup: bool = True
    response_cache: bool = False
    max_length: int | None = None  # tokens a model row holds; None: the model's own limit (and the tokenizer's)
    parity_tolerance: float = 1e-4
    precision: Literal["fp32", "fp16", "int8"] = "fp32"
    optimize: bool = False  # offline transformer fusions, attention too at FP32 on CPU (ONNX Runtime only)
    quantization: Literal["auto", "static", "dynamic"] = "auto"  # int8: auto searches every scheme
    # int8: also measure the trade-off curve for the model card (a few more candidates, each one more gate); None:
    # only for models of at most CURVE_AUTO_BYTES of FP32 weights, where it costs little beside the search.
    int8_curve: bool | None = None
    calibration: Path | None = None  # one text per line; None: the built-in sample
    validation: Path | None = None  # one text per line; None: the built-in sample
    accept_accuracy_loss: bool = False
    runtime: str = "onnx"  # a registered runtime (tritongen.runtimes): onnx, openvino or tensorrt
    # The Triton containers (tritongen.containers) the build is for: the served model is checked in each one's
    # ONNX Runtime or OpenVINO (tritongen.gates.compat), where its venv exists. The first is the package's default.
    containers: tuple[str, ...] = (DEFAULT_CONTAINER,)
    # Where the model step runs: "gpu" builds for a GPU node (KIND_GPU instances, ONNX Runtime's TensorRT
    # accelerator at FP16, and the FP16 model gated), "cpu" for a CPU node; None: as model_instances says.
    device: Literal["cpu", "gpu"] | None = None
    # The cores of the CPU node the model step is sized for where the spec leaves its instances and threads open
    # (tritongen.sizing.CpuLayout); None: this machine's usable cores, recorded here when the spec is loaded.
    cpu_cores: int | None = None
    container_check: bool = True
    # Fold the postprocess step into the served graph where the task can and the fold proves itself
    # (tritongen.model.fold): one Python hop fewer per request. On by default for GPU builds, whose model step is
    # native in the container, so the fold removes a Python hop from the node's CPU side; off for CPU builds:
    # measured interleaved here, the folded MiniLM ensemble served by the local Python-based backend was slower at
    # concurrency 16 (docs/benchmarks.md).
    fold: bool = False
    # Run code shipped with the checkpoint (config.json's auto_map) to load its config, tokenizer and model.
    # Off by default: such a checkpoint is refused; the model card records that it was trusted.
    trust_remote_code: bool = False
    # The tasks' and the runtimes' sections, by section name (``question_answering: {doc_stride: 64}``); a
    # section missing here is its defaults (:meth:`section`). Flat keys (``qa_doc_stride``) are read into them.
    task_settings: dict[str, TaskSettings] = field(default_factory=dict)
    runtime_settings: dict[str, RuntimeSettings] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validate(self)

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (the YAML layout ``load_spec`` reads)."""
        plain = lambda items: {k: v.value if isinstance(v, enum.Enum) else v for k, v in items}  # noqa: E731
        data = dataclasses.asdict(self, dict_factory=plain)
        for key in ("repository", "calibration", "validation"):
            data[key] = None if data[key] is None else str(data[key])
        data.update(data.pop("task_settings"))
        data.update(data.pop("runtime_settings"))
        return data

    def section(self, kind: type[_Section]) -> _Section:
        """The spec's ``kind`` section (a task's or a runtime's), or its defaults where the spec has none."""
        table: Mapping[str, SpecSection] = (
            self.runtime_settings if issubclass(kind, RuntimeSettings) else self.task_settings
        )
        found = table.get(kind.section)
        if found is None:
            return kind()
        if not isinstance(found, kind):
            raise SpecError(f"`{kind.section}` holds {type(found).__name__}, not {kind.__name__}")
        return found

    @property
    def queue_delay_us(self) -> int:
        """The model step's batcher delay: the spec's, else 0 on KIND_CPU and 2000 µs on KIND_GPU instances."""
        delay = self.dynamic_batching.max_queue_delay_microseconds
        if delay is not None:
            return delay
        return GPU_QUEUE_DELAY_US if self.model_instances.kind == "KIND_GPU" else 0

    def replace(self, **changes: Any) -> BuildSpec:
        """Return a copy with ``changes`` applied (and validated again)."""
        return dataclasses.replace(self, **changes)


def _validate(spec: BuildSpec) -> None:
    # In this order: the first failed check is the one reported.
    _check_device(spec)
    _check_containers(spec)
    _check_model_and_name(spec)
    _check_shapes(spec)
    _check_batching(spec)
    _check_instances(spec)
    _check_versions(spec)
    _check_layout(spec)
    _check_precision(spec)
    _check_max_length(spec)
    _check_sections(spec)
    _check_parity_tolerance(spec)


def _check_device(spec: BuildSpec) -> None:
    check_cpu_cores(spec.cpu_cores)
    if spec.device not in (None, "cpu", "gpu"):
        raise SpecError(f"device must be cpu or gpu, got {spec.device}")
    kinds = {g.kind for g in (spec.tokenizer_instances, spec.model_instances, spec.postprocess_instances)}
    if spec.device == "gpu" and spec.model_instances.kind != "KIND_GPU":
        raise SpecError("device gpu runs the model step on KIND_GPU instances, but the spec sets KIND_CPU: drop one")
    if spec.device == "cpu" and "KIND_GPU" in kinds:
        raise SpecError("device cpu, but the spec puts instances on KIND_GPU: drop one")


def _check_containers(spec: BuildSpec) -> None:
    unknown = [c for c in spec.containers if c not in CONTAINERS]
    if unknown or not spec.containers:
        raise SpecError(
            f"no supported Triton container {', '.join(map(repr, unknown)) or 'given'}; "
            f"choose from {', '.join(CONTAINERS)}"
        )


def _check_model_and_name(spec: BuildSpec) -> None:
    if not spec.model:
        raise SpecError("no model given: name a checkpoint directory or a hub id")
    if not _NAME_RE.match(spec.name):
        raise SpecError(f"model name `{spec.name}` is invalid: use letters, digits, `_`, `.` or `-`")


def _check_shapes(spec: BuildSpec) -> None:
    if spec.max_batch_size < 0:
        raise SpecError(f"max_batch_size must be >= 0, got {spec.max_batch_size}")
    if not spec.buckets or any(b <= 0 for b in spec.buckets) or list(spec.buckets) != sorted(set(spec.buckets)):
        raise SpecError(f"buckets must be positive and strictly increasing, got {list(spec.buckets)}")
    if spec.padding not in ("buckets", "longest"):
        raise SpecError(f"padding must be buckets or longest, got {spec.padding}")


def _check_batching(spec: BuildSpec) -> None:
    batching = spec.dynamic_batching
    if batching.enabled and spec.max_batch_size == 0:
        raise SpecError("dynamic batching needs max_batch_size > 0 (it is 0): disable dynamic batching or raise it")
    for size in batching.preferred_batch_size:
        if size <= 0 or size > spec.max_batch_size:
            raise SpecError(f"preferred batch size {size} must be between 1 and max_batch_size ({spec.max_batch_size})")
    if batching.max_queue_delay_microseconds is not None and batching.max_queue_delay_microseconds < 0:
        raise SpecError("max_queue_delay_microseconds must be >= 0")
    if batching.queue_policy and batching.queue_policy.max_queue_size < 0:
        raise SpecError("queue max_queue_size must be >= 0")
    if batching.queue_policy and batching.queue_policy.timeout_action not in ("REJECT", "DELAY"):
        raise SpecError(f"queue timeout_action must be REJECT or DELAY, got {batching.queue_policy.timeout_action}")


def _check_instances(spec: BuildSpec) -> None:
    for step, group in (
        ("tokenizer", spec.tokenizer_instances),
        ("model", spec.model_instances),
        ("postprocess", spec.postprocess_instances),
    ):
        if group.count < 1:
            raise SpecError(f"{step} instance count must be >= 1, got {group.count}")
        if group.kind not in ("KIND_CPU", "KIND_GPU"):
            raise SpecError(f"{step} instance kind must be KIND_CPU or KIND_GPU, got {group.kind}")
        if group.gpus and group.kind != "KIND_GPU":
            raise SpecError(f"{step} instances list gpus {list(group.gpus)} but kind is {group.kind}")
        if group.profiles:
            raise SpecError(f"{step} instances set profiles; the TensorRT runtime sets them from the buckets")


def _check_versions(spec: BuildSpec) -> None:
    policy = spec.version_policy
    if policy.policy not in ("latest", "all", "specific"):
        raise SpecError(f"version policy must be latest, all or specific, got {policy.policy}")
    if policy.policy == "latest" and policy.latest < 1:
        raise SpecError("version policy `latest` needs a count >= 1")
    if policy.policy == "specific" and not policy.versions:
        raise SpecError("version policy `specific` needs at least one version")


def _check_precision(spec: BuildSpec) -> None:
    if spec.precision not in ("fp32", "fp16", "int8"):
        raise SpecError(f"precision must be fp32, fp16 or int8, got {spec.precision}")
    if spec.quantization not in ("auto", "static", "dynamic"):
        raise SpecError(f"quantization must be auto, static or dynamic, got {spec.quantization}")


def _check_layout(spec: BuildSpec) -> None:
    if spec.model_layout.prefer not in ("balanced", "latency", "throughput"):
        raise SpecError(f"model_layout.prefer must be balanced, latency or throughput, got {spec.model_layout.prefer}")
    if spec.model_layout.workload not in ("queries", "documents"):
        raise SpecError(f"model_layout.workload must be queries or documents, got {spec.model_layout.workload}")


def _check_max_length(spec: BuildSpec) -> None:
    if spec.max_length is not None and spec.max_length < 8:
        raise SpecError(f"max_length must be >= 8, got {spec.max_length}")


def _check_sections(spec: BuildSpec) -> None:
    for table, base in ((spec.task_settings, TaskSettings), (spec.runtime_settings, RuntimeSettings)):
        for name, settings in table.items():
            if not isinstance(settings, base) or settings.section != name:
                raise SpecError(f"`{name}` must hold its {base.__name__} section, got {type(settings).__name__}")


def _check_parity_tolerance(spec: BuildSpec) -> None:
    if not 0 < spec.parity_tolerance < 1:
        raise SpecError(f"parity tolerance must be in (0, 1), got {spec.parity_tolerance}")


def instance_group(group: InstanceGroup) -> InstanceGroup:
    """A spec's instance group as the config writes it (a kind read from YAML is a string)."""
    return dataclasses.replace(group, kind=Kind(group.kind), gpus=tuple(group.gpus))


def bucket_lengths(buckets: Iterable[int], max_length: int) -> list[int]:
    """The lengths rows are padded to: the spec's buckets below ``max_length``, then ``max_length`` itself."""
    return sorted({b for b in buckets if b < max_length} | {max_length})
