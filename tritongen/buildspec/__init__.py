"""The typed build specification: everything `build_repository` needs, validated.

A spec comes from CLI options, from a YAML file (``make repo SPEC=deploy.yaml``), or both
(options given on the command line override the file). Defaults are documented on the
fields and in docs/building.md.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from tritongen.buildspec.sections import SECTIONS, TaskSettings, legacy_settings
from tritongen.configs.model_config import InstanceGroup, QueuePolicy  # the same sections as Triton's config
from tritongen.containers import CONTAINERS, DEFAULT_CONTAINER
from tritongen.errors import SpecError
from tritongen.runtimes import get_runtime
from tritongen.steps.ner import STRATEGIES

__all__ = [
    "AGGREGATION_STRATEGIES",
    "BuildSpec",
    "DynamicBatchingSettings",
    "InstanceGroup",
    "OnnxRuntimeSettings",
    "OpenVinoSettings",
    "QueuePolicy",
    "TensorRTSettings",
    "VersionPolicySettings",
    "load_spec",
]

DEFAULT_NAME = "minilm"  # the ensemble name of every command, as of the default model (all-MiniLM-L6-v2)

DEFAULT_BUCKETS = (16, 32, 64, 128, 256, 512)
AGGREGATION_STRATEGIES = STRATEGIES  # token classification: the transformers pipeline's strategies
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


GPU_QUEUE_DELAY_US = 2000  # the model step's default batcher delay on KIND_GPU instances


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


@dataclass(frozen=True)
class VersionPolicySettings:
    """Triton ``version_policy`` of the model step: latest N, all, or specific versions."""

    policy: Literal["latest", "all", "specific"] = "latest"
    latest: int = 1
    versions: tuple[int, ...] = ()


@dataclass(frozen=True)
class OnnxRuntimeSettings:
    """Session settings for the onnxruntime backend (``parameters`` and ``optimization``)."""

    intra_op_threads: int = 0  # 0 lets ONNX Runtime decide
    inter_op_threads: int = 0
    graph_optimization_level: Literal[-1, 0, 1, 2] = 1  # Triton's scale: -1 off .. 1 all (2 extended)
    # Busy-waiting worker threads steal CPU from the tokenizer and postprocess steps on small hosts.
    allow_spinning: bool = False


@dataclass(frozen=True)
class OpenVinoSettings:
    """The openvino backend's properties (its ``parameters``), for ``runtime: openvino``.

    There is no precision setting: OpenVINO computes in BF16 on CPUs that have it and FP32 elsewhere, and
    the native backend cannot force FP32, so the build gates both (``tritongen.runtimes.openvino.ir``).
    """

    performance_hint: Literal["LATENCY", "THROUGHPUT"] = "LATENCY"
    num_streams: int = 1  # executor streams per instance; 0: AUTO
    inference_threads: int = 0  # INFERENCE_NUM_THREADS; 0: OpenVINO's default (every core)


@dataclass(frozen=True)
class TensorRTSettings:
    """The onnxruntime backend's TensorRT execution accelerator (GPU targets only)."""

    enabled: bool = False
    precision_mode: Literal["FP32", "FP16", "INT8"] = "FP16"
    max_workspace_size_bytes: int = 1 << 30
    engine_cache_path: str = "/tmp/trt_engine_cache"
    profile_shapes: bool = True


@dataclass(frozen=True)
class BuildSpec:
    """What to build, and how the generated Triton configuration should behave."""

    model: str
    name: str = DEFAULT_NAME
    task: str | None = None  # None: detected from the checkpoint
    repository: Path = Path("model_repository")
    max_batch_size: int = 64
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    dynamic_batching: DynamicBatchingSettings = field(default_factory=DynamicBatchingSettings)
    tokenizer_instances: InstanceGroup = field(default_factory=InstanceGroup)
    model_instances: InstanceGroup = field(default_factory=InstanceGroup)
    postprocess_instances: InstanceGroup = field(default_factory=InstanceGroup)
    version_policy: VersionPolicySettings = field(default_factory=VersionPolicySettings)
    warmup: bool = True
    response_cache: bool = False
    onnxruntime: OnnxRuntimeSettings = field(default_factory=OnnxRuntimeSettings)
    tensorrt: TensorRTSettings = field(default_factory=TensorRTSettings)
    openvino: OpenVinoSettings = field(default_factory=OpenVinoSettings)
    max_length: int | None = None  # tokens a model row holds; None: the model's own limit (and the tokenizer's)
    parity_tolerance: float = 1e-4
    precision: Literal["fp32", "fp16", "int8"] = "fp32"
    optimize: bool = False  # offline transformer fusions (ONNX Runtime only)
    quantization: Literal["auto", "static", "dynamic"] = "auto"  # int8: auto searches every scheme
    int8_curve: bool = True  # int8: also measure the trade-off curve for the model card (a few more candidates)
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
    # (Runtime.cpu_defaults); None: this machine's usable cores, recorded here when the spec is loaded.
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
    # The tasks' sections, by section name (``question_answering: {doc_stride: 64}``); a task missing here
    # runs with its defaults. The old flat keys (``qa_doc_stride``) are read into these sections.
    task_settings: dict[str, TaskSettings] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validate(self)

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (the YAML layout ``load_spec`` reads)."""
        plain = lambda items: {k: v.value if isinstance(v, enum.Enum) else v for k, v in items}  # noqa: E731
        data = dataclasses.asdict(self, dict_factory=plain)
        for key in ("repository", "calibration", "validation"):
            data[key] = None if data[key] is None else str(data[key])
        data.update(data.pop("task_settings"))
        return data

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
    _check_onnxruntime_settings(spec)
    _check_precision(spec)
    get_runtime(spec.runtime).check_spec(spec)  # an unknown runtime lists the registered ones
    _check_max_length(spec)
    _check_task_sections(spec)
    _check_parity_tolerance(spec)


def _check_cpu_cores(cores: object) -> None:
    if cores is not None and (not isinstance(cores, int) or isinstance(cores, bool) or cores < 1):
        raise SpecError(f"cpu_cores must be a whole number >= 1 (the CPU node's cores), got {cores!r}")


def _check_device(spec: BuildSpec) -> None:
    _check_cpu_cores(spec.cpu_cores)
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


def _check_onnxruntime_settings(spec: BuildSpec) -> None:
    if spec.tensorrt.enabled and spec.model_instances.kind != "KIND_GPU":
        raise SpecError("the TensorRT accelerator needs the model step on KIND_GPU instances")
    if spec.onnxruntime.graph_optimization_level not in (-1, 0, 1, 2):
        raise SpecError("graph_optimization_level must be -1, 0, 1 or 2")


def _check_precision(spec: BuildSpec) -> None:
    if spec.precision not in ("fp32", "fp16", "int8"):
        raise SpecError(f"precision must be fp32, fp16 or int8, got {spec.precision}")
    if spec.quantization not in ("auto", "static", "dynamic"):
        raise SpecError(f"quantization must be auto, static or dynamic, got {spec.quantization}")


def _check_max_length(spec: BuildSpec) -> None:
    if spec.max_length is not None and spec.max_length < 8:
        raise SpecError(f"max_length must be >= 8, got {spec.max_length}")


def _check_task_sections(spec: BuildSpec) -> None:
    sections = SECTIONS
    for section, settings in spec.task_settings.items():
        if section not in sections:
            raise SpecError(f"unknown task section `{section}`; known: {sorted(sections)}")
        if not isinstance(settings, sections[section]):
            raise SpecError(f"`{section}` must hold {sections[section].__name__}, got {type(settings).__name__}")


def _check_parity_tolerance(spec: BuildSpec) -> None:
    if not 0 < spec.parity_tolerance < 1:
        raise SpecError(f"parity tolerance must be in (0, 1), got {spec.parity_tolerance}")


_NESTED = {
    "dynamic_batching": DynamicBatchingSettings,
    "tokenizer_instances": InstanceGroup,
    "model_instances": InstanceGroup,
    "postprocess_instances": InstanceGroup,
    "version_policy": VersionPolicySettings,
    "onnxruntime": OnnxRuntimeSettings,
    "tensorrt": TensorRTSettings,
    "openvino": OpenVinoSettings,
}


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    if not isinstance(data, dict):
        raise SpecError(f"`{where}` must be a mapping, got {type(data).__name__}")
    if cls is BuildSpec:
        data = _task_sections(data)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SpecError(f"unknown setting(s) {unknown} in `{where}`; known: {sorted(known)}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if cls is BuildSpec and key == "task_settings":
            value = {name: _build(SECTIONS[name], v, name) for name, v in value.items()}
        elif cls is BuildSpec and key == "containers":
            value = _releases(value)
        elif cls is BuildSpec and key in _NESTED:
            value = _build(_NESTED[key], value, key)
        elif cls is DynamicBatchingSettings and key == "queue_policy" and value is not None:
            value = _build(QueuePolicy, value, "dynamic_batching.queue_policy")
        elif isinstance(value, list):
            value = tuple(value)
        elif key in ("repository", "calibration", "validation") and value is not None:
            value = Path(value)
        values[key] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise SpecError(f"invalid `{where}`: {exc}") from None


def _releases(value: Any) -> tuple[str, ...]:
    """Container releases from a list or a comma-separated string; YAML reads an unquoted 24.10 as 24.1."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
    return tuple(f"{item:.2f}" if isinstance(item, float) else str(item).strip() for item in items)


def _task_sections(data: dict[str, Any]) -> dict[str, Any]:
    """Move the tasks' sections (and their old flat keys) of a spec mapping into ``task_settings``."""
    sections = SECTIONS
    legacy = legacy_settings()
    data = dict(data)
    nested: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (data.pop("task_settings", None) or {}).items()}
    for name in sections:
        if name in data:
            value = data.pop(name)
            if value is not None and not isinstance(value, dict):
                raise SpecError(f"`{name}` must be a mapping, got {type(value).__name__}")
            nested.setdefault(name, {}).update(value or {})
    for old, (section, new) in legacy.items():
        if old in data:
            value = data.pop(old)
            nested.setdefault(section, {}).setdefault(new, value)
    if nested:
        data["task_settings"] = nested
    return data


def load_spec(path: Path | None = None, **overrides: Any) -> BuildSpec:
    """Build a :class:`BuildSpec` from an optional YAML file plus keyword overrides.

    Overrides whose value is ``None`` are ignored, so CLI options that were not given
    leave the file's (or the default) value in place. Task settings may be given in their section
    (``question_answering={"doc_stride": 64}``) or under their old flat names (``qa_doc_stride=64``).
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise SpecError("spec file {path} does not exist", path=path) from None
        except yaml.YAMLError as exc:
            raise SpecError(f"spec file {{path}} is not valid YAML: {exc}".splitlines()[0], path=path) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise SpecError("spec file {path} must hold a mapping at the top level", path=path)
        data.update(loaded or {})
    data = _task_sections(data)
    task_keys = set(SECTIONS) | set(legacy_settings())
    given_tasks = _task_sections({k: v for k, v in overrides.items() if k in task_keys and v is not None})
    for section, values in given_tasks.get("task_settings", {}).items():
        given = {k: v for k, v in values.items() if v is not None}
        data.setdefault("task_settings", {}).setdefault(section, {}).update(given)
    for key, value in overrides.items():
        if value is None or key in task_keys:
            continue
        if key in _NESTED and isinstance(value, dict):
            given = {k: v for k, v in value.items() if v is not None}
            if not given:
                continue
            value = {**(data.get(key) or {}), **given}
        data[key] = value
    if "model" not in data:
        raise SpecError("no model given: name a checkpoint directory or a hub id")
    return _build(BuildSpec, _device_defaults(data), "spec")


def _device_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The device fills what its node wants wherever the spec leaves it open (an explicit value wins).

    ``device: gpu``: KIND_GPU instances, FP16 and the runtime's GPU settings. A CPU build (``device: cpu``, or
    none and no KIND_GPU model instances): the runtime's instances and threads for ``cpu_cores`` cores.
    """
    runtime = get_runtime(data.get("runtime", BuildSpec.runtime))
    if data.get("device") != "gpu":
        if (data.get("model_instances") or {}).get("kind", "KIND_CPU") != "KIND_CPU":
            return data
        _check_cpu_cores(data.get("cpu_cores"))
        data = {**data, "cpu_cores": data.get("cpu_cores") or usable_cores()}  # recorded: the node it is sized for
        return runtime.cpu_defaults(data, data["cpu_cores"])
    _check_cpu_cores(data.get("cpu_cores"))
    data = {**data, "cpu_cores": data.get("cpu_cores") or usable_cores()}  # the node's CPU feeds its GPU
    data["model_instances"] = {"kind": "KIND_GPU", **(data.get("model_instances") or {})}
    data.setdefault("precision", "fp16")
    data.setdefault("fold", True)
    return runtime.gpu_defaults(python_step_defaults(data, data["cpu_cores"]))


def python_step_defaults(data: dict[str, Any], cores: int) -> dict[str, Any]:
    """Tokenizer and postprocess instances for a GPU node of ``cores`` cores, where the spec leaves them open.

    On a GPU node everything but the model step runs on the CPU, and one instance of a Python step is one
    single-threaded process: the steps must have enough of them to keep the GPU fed. Half the cores for the
    tokenizer (the costliest Python step per request) and a quarter for the postprocess (docs/benchmarks.md,
    "The CPU side": per one-text request the tokenizer step costs about 2.5 times the postprocess step, and
    Triton's own frontend takes as much again on its own threads).
    """
    sized = dict(data)
    for step, share in (("tokenizer_instances", 2), ("postprocess_instances", 4)):
        group = dict(data.get(step) or {})
        if group.get("count") is None:
            sized[step] = {**group, "count": max(1, cores // share)}
    return sized


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's cpuset limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
