"""What every model-step runtime provides: small parts, each for the callers that use it.

As Text Embeddings Inference's ``Backend`` trait, with one implementation per folder (``onnxruntime/``,
``openvino/``, ``tensorrt/``): nothing outside this package asks which runtime it has. A :class:`Runtime` entry
names itself (name, title, backend, model file) and inherits its parts, each a base of at most six members that a
runtime overrides where it differs:

* :class:`SpecRules`: what the spec may ask of it (its sections, :meth:`~SpecRules.check_spec`), what a GPU build
  fills in, the INT8 schemes it takes, its variants in words;
* :class:`Threads` and :class:`Layouts`: the model step's threads and a CPU build's layout, where the spec writes
  it (:meth:`~Layouts.with_layout`) and how the size stage times it (:meth:`~Layouts.served_session`);
* :class:`BuildStages`: what it serves (:meth:`~BuildStages.optimise`, stage 4), its model step's config
  (:meth:`~BuildStages.model_config`, from the :class:`ModelStep` every runtime shares) and files, and how the
  bench's ceiling opens the served file here;
* :class:`ContainerCheck`: stage 5, the served model opened in each target container's release
  (:meth:`~ContainerCheck.container_opening`, :meth:`~ContainerCheck.container_session`);
* :class:`Releases`: its pip package and the release of it each container links (what ``make compat-venv``
  installs), and the release a native backend here links.

The entry is light: the spec validates with it and the CLI lists it. Its build stages load their modules (ONNX
Runtime, OpenVINO, NNCF) only when the build calls them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tritongen.buildspec import QUEUE_BATCHES, BuildSpec, RuntimeSettings, instance_group
from tritongen.configs.model_config import InstanceGroup, ModelConfig, Tensor, Warmup, generated_comment
from tritongen.sizing import CpuLayout, Layout

if TYPE_CHECKING:
    from rich.console import Console

    from tritongen.containers import Container
    from tritongen.gates.accuracy import AccuracyReport, GateReference
    from tritongen.gates.compat import ContainerReport, ContainerSession
    from tritongen.precision.int8_search import SearchReport
    from tritongen.precision.optimize import OptimizeReport
    from tritongen.tasks import BuildPlan

__all__ = [
    "BuildStages", "ContainerCheck", "Export", "Layouts", "ModelStep", "Releases", "Runtime", "SpecRules", "Threads",
    "Variant",
]  # fmt: skip


@dataclass(frozen=True)
class ModelStep:
    """What every runtime's model step is built from: names, tensors, row lengths and the spec."""

    spec: BuildSpec
    name: str
    ensemble_name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    buckets: tuple[int, ...]
    max_length: int

    def common(self) -> dict[str, Any]:
        """The sections every runtime sets the same way."""
        spec = self.spec
        return {
            "name": self.name,
            "comment": generated_comment(self.name, "model", self.ensemble_name),
            "max_batch_size": spec.max_batch_size,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "version_policy": spec.version_policy.to_config(),
            "dynamic_batching": dataclasses.replace(
                spec.dynamic_batching, max_queue_delay_microseconds=spec.queue_delay_us
            ).to_config(default_queue=QUEUE_BATCHES * spec.max_batch_size),
            "warmup": self.warmup(),
        }

    def instances(self) -> InstanceGroup:
        """The model step's ``instance_group``."""
        return instance_group(self.spec.model_instances)

    def warmup(self) -> tuple[Warmup, ...]:
        """One zero sample per bucket, so the first real request of each length finds a warm model.

        Inputs of fixed shape (images) get one sample.
        """
        if not self.spec.warmup:
            return ()
        if not any(-1 in t.dims for t in self.inputs):
            return (Warmup("fixed_shape", self.inputs),)

        def at(length: int) -> tuple[Tensor, ...]:
            return tuple(
                Tensor(t.name, t.data_type, tuple(length if d == -1 else d for d in t.dims)) for t in self.inputs
            )

        return tuple(Warmup(f"bucket_{length}", at(length)) for length in self.buckets)


@dataclass(frozen=True)
class Export:
    """What the build's export stage produced: the served encoder and the FP32 ONNX file (outside the staged tree)."""

    encoder: Any  # the first step's own code: TextEncoder, ImageEncoder
    fp32_path: Path
    target: Path  # where the served model goes: <model>/<version>/model.onnx in the staging area


@dataclass(frozen=True)
class Variant:
    """What a runtime's optimisation produced: the steps taken, the gate's figures, the INT8 search (int8 only)."""

    optimized: OptimizeReport
    accuracy: AccuracyReport
    search: SearchReport | None = None
    reference: GateReference | None = field(default=None, repr=False, compare=False)  # for the container check
    # The served model's gate in the first target container's runtime, one report per precision, where stage 4 already
    # measured it there (an INT8 search gates its candidates there): stage 5 takes these instead of measuring again.
    gated_there: tuple[AccuracyReport, ...] = ()

    @property
    def chosen(self) -> str | None:
        """The INT8 search's chosen candidate, by label; None without a search or a choice."""
        if self.search is None or self.search.chosen is None:
            return None
        return self.search.chosen.candidate.label


class Releases:
    """Which release of the runtime each target container's native backend links, and its pip requirement.

    Asked by ``make compat-venv`` (the requirements), the model card and the local server (the native backends here).
    """

    # The runtime's pip distribution: what the stand-in and the ceiling run here, and the key of its releases in
    # the container table (``Container.runtimes``), which ``make compat-venv`` installs per container.
    package: ClassVar[str] = ""
    # A native backend built against another release of the runtime sits beside the container's own folder, named
    # ``<backend>-<native_tag><release>`` (``onnxruntime-ort1.28.0``); "": this runtime has no such folders.
    native_tag: ClassVar[str] = ""

    def container_release(self, target: Container) -> str:
        """The release of this runtime that ``target``'s native backend links ("": none that matters here)."""
        return target.linked(self.package) if self.package else ""

    def container_requirement(self, target: Container) -> str:
        """The pip requirement that reproduces ``target``'s release of this runtime ("": it has none there)."""
        release = self.container_release(target)
        return f"{self.package}=={release}" if release else ""

    def native_release(self, folder: Path) -> str:
        """The runtime release the native backend in ``folder`` links, read from its libraries ("": unknown)."""
        return ""


class ContainerCheck:
    """Build stage 5: the served model run in each target container's release of the runtime, from here."""

    name: ClassVar[str]
    # Why the container check does not apply to this runtime's model ("": it does).
    container_check_skipped: ClassVar[str] = ""

    def container_opening(self) -> str:
        """The compat gate's worker opening (``tritongen.gates.compat``); "": this runtime has no container check.

        Python source, run in a venv of a container's releases with ``model`` (the served file's path) and
        ``precision`` (``f32``, ``bf16``) set, that imports only this runtime's package and defines ``version``
        (what the report records), ``label`` (the runtime and its release, for people) and ``run(names, feeds)``
        as ``InferenceSession.run``.
        """
        return ""

    def container_session(self, model: Path, python: Path, precision: str = "f32") -> ContainerSession:
        """``model`` opened in the container venv's ``python`` by :meth:`container_opening`, at ``precision``."""
        from tritongen.gates.compat import ContainerSession

        opening = self.container_opening()
        if not opening:
            raise NotImplementedError(f"runtime `{self.name}` has no container check: {self.container_check_skipped}")
        return ContainerSession(model, python, precision, opening=opening)

    def container_check(
        self, plan: BuildPlan, onnx: Export, variant: Variant | None, console: Console, release: str, python: Path
    ) -> ContainerReport | dict[str, str]:
        """Build stage 5 in one container (``release``, its venv's ``python``): its report, or why it was skipped."""
        raise NotImplementedError


class SpecRules:
    """What the spec may ask of the runtime: its sections, its checks, what a GPU build fills in, its variants."""

    # The runtime's sections of the build spec (``onnxruntime: {intra_op_threads: 2}``), with their flags.
    settings: ClassVar[tuple[type[RuntimeSettings], ...]] = ()
    symmetric_int8: ClassVar[bool] = False  # whether INT8 activations must be symmetric (TensorRT's explicit QDQ)

    def check_spec(self, spec: BuildSpec) -> None:
        """Raise :class:`~tritongen.errors.SpecError` for settings this runtime cannot serve."""

    def gpu_defaults(self, data: dict[str, Any]) -> dict[str, Any]:
        """What ``device: gpu`` fills in for this runtime where the spec mapping ``data`` leaves it open."""
        return data

    def int8_schemes(self, quantization: str) -> tuple[str, ...]:
        """The INT8 schemes the search tries: the one asked for, else every one (``auto``)."""
        from tritongen.precision.int8_search import SCHEMES

        return SCHEMES if quantization == "auto" else (quantization,)

    def variant_name(self, spec: BuildSpec, variant: Variant | None = None) -> str:
        """The served variant in words (the card, ``build.json``): precision, and the INT8 search's choice."""
        chosen = None if variant is None else variant.chosen
        name = spec.precision.upper()
        if chosen is not None:
            name += f" {chosen}"
        elif spec.precision == "int8":
            name += f" {spec.quantization}"
        return name + (" optimised" if spec.optimize else "")


UNBATCHED = (
    "one instance of several threads is served without Triton's dynamic batcher, which stalls such an instance "
    "(and without its queue limit): each request runs alone on every thread, and the gateway batches concurrent "
    "texts into one call (docs/benchmarks.md)"
)


class Threads:
    """The model step's threads per instance: the config parameter, and the spec setting that gives it."""

    # The model step's parameter for threads per instance, and the spec section and field that set it.
    thread_parameter: ClassVar[str | None] = None
    thread_setting: ClassVar[tuple[type[RuntimeSettings], str] | None] = None

    def threads(self, spec: BuildSpec) -> int:
        """Threads per model-step instance the spec sets (0: the runtime's default, or none to set)."""
        if self.thread_setting is None:
            return 0
        section, key = self.thread_setting
        return int(getattr(spec.section(section), key))

    def thread_lines(self, threads: int) -> list[str]:
        """The build spec's YAML lines that give the model step ``threads`` per instance ([] when it has none)."""
        if self.thread_setting is None:
            return []
        section, key = self.thread_setting
        return [f"{section.section}:", f"  {key}: {threads}"]

    def triton_batches(self, spec: BuildSpec) -> bool:
        """Whether the model step ``spec`` renders takes Triton's dynamic batcher (see the runtimes' overrides)."""
        return True


class Layouts(Threads):
    """A CPU build's model-step layout: whether the spec leaves it open, where it is written, how it is timed."""

    def layout_open(self, data: Mapping[str, Any]) -> bool:
        """Whether the spec mapping ``data``, as written, leaves the model step's instances and threads to the build.

        Only for a runtime whose layout the build can measure (a thread setting, and :meth:`served_session`); for
        others their own default stands. A ``model_layout.left_open`` written in ``data`` (a record) stands.
        """
        if self.thread_setting is None or not self.measures_layout:
            return False
        written = (data.get("model_layout") or {}).get("left_open")
        if written is not None:
            return bool(written)
        section, key = self.thread_setting
        threads = (data.get(section.section) or {}).get(key)
        return (data.get("model_instances") or {}).get("count") is None and not threads

    def cpu_layout(self, spec: BuildSpec) -> CpuLayout:
        """The model step's layout on the CPU node of ``spec``, as the spec holds it (:meth:`with_layout` wrote it)."""
        return CpuLayout(
            spec.cpu_cores or 1,
            (spec.tokenizer_instances.count, spec.postprocess_instances.count),
            Layout(spec.model_instances.count, self.threads(spec)),
            bool(spec.model_layout.measure),
            spec.model_layout.prefer,
            spec.model_layout.workload,
        )

    def decided_layout(self, spec: BuildSpec, *, usable: int) -> CpuLayout:
        """The layout the size stage starts from, decided once (:meth:`~tritongen.sizing.CpuLayout.decided`).

        The fixed default where ``spec`` leaves it open, else the spec's own; measured where
        ``model_layout.measure`` says, or, unset, where an open layout's node has no more cores than this
        machine's ``usable``.
        """
        given = spec.model_layout
        return self.cpu_layout(spec).decided(left_open=given.left_open, measure=given.measure, usable=usable)

    def with_layout(self, spec: BuildSpec, cpu: CpuLayout) -> BuildSpec:
        """``spec`` with the model step laid out as ``cpu`` says: instances, threads per instance, whether measured."""
        runtime_settings = dict(spec.runtime_settings)
        if self.thread_setting is not None:
            section, key = self.thread_setting
            current = runtime_settings.get(section.section) or section()
            runtime_settings[section.section] = dataclasses.replace(current, **{key: cpu.layout.threads})
        instances = dataclasses.replace(spec.model_instances, count=cpu.layout.instances)
        layout = dataclasses.replace(spec.model_layout, measure=cpu.measure)
        return spec.replace(model_instances=instances, runtime_settings=runtime_settings, model_layout=layout)

    @property
    def measures_layout(self) -> bool:
        """Whether the build times this runtime's layouts (it overrides :meth:`served_session`)."""
        return type(self).served_session is not Layouts.served_session

    def served_session(self, path: Path, spec: BuildSpec) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
        """One model-step instance of ``path`` in process, with the session settings ``spec``'s config gives it.

        It answers a call's feeds with every output by name: the layout stage's timings and the canary's record
        where no native backend serves this runtime. None: the runtime's layout is not measured (its CPU default
        stands).
        """
        return None


class BuildStages:
    """What the runtime serves: the model from the export (stage 4), its config and files, the bench's ceiling."""

    # Whether the served file is the exported ONNX graph itself (or an optimisation of it), so that graph-level
    # work (folding the postprocess in, the canary record, image models exported as they are) applies.
    serves_onnx: ClassVar[bool] = False
    # Why the postprocess cannot be folded into what this runtime serves ("": it can).
    fold_refused: ClassVar[str] = ""

    def optimise(self, plan: BuildPlan, onnx: Export, console: Console) -> Variant | None:
        """Build stage 4: the served model from the FP32 export, gated; None when the export is served as is."""
        raise NotImplementedError

    def model_config(self, step: ModelStep) -> ModelConfig:
        """The model step's typed config."""
        raise NotImplementedError

    def write_files(self, plan: BuildPlan, version_dir: Path) -> None:
        """Files the model step needs beside its model (the TensorRT engine's build plan)."""

    def ceiling_session(self, path: Path) -> Callable[[dict[str, Any]], object] | None:
        """The served file ``path`` in process with the runtime's defaults, as the bench's ceiling runs it.

        It answers a batch's feeds (its outputs are not read). None: the runtime cannot run it in process here.
        """
        return None


class Runtime(SpecRules, Layouts, BuildStages, ContainerCheck, Releases):
    """A runtime entry: who it is, and the parts its callers use, each a small base of its own.

    :class:`SpecRules` (the spec and its loader), :class:`Layouts` and :class:`Threads` (the size stage, the tuning
    sweep), :class:`BuildStages` (stages 4 and 8, the bench's ceiling), :class:`ContainerCheck` (stage 5) and
    :class:`Releases` (``make compat-venv``, the card, the local server). A caller that needs one part takes it by
    that type.
    """

    name: ClassVar[str]  # the spec's ``runtime`` value
    title: ClassVar[str]  # for people: "ONNX Runtime"
    backend: ClassVar[str]  # what the model step's config names (``backend``, or ``platform`` for a plan)
    model_file: ClassVar[str]  # the served file in the model step's version folder
    # The module the local server installs as the container's native backend (its ``model.py``); None: none needed.
    local_backend: ClassVar[str | None] = None
    # Whether a config naming ``backend`` is this runtime's (its thread setting, the tuning sweep's); a runtime
    # that serves through another's backend says False.
    owns_backend: ClassVar[bool] = True
