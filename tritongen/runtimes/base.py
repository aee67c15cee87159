"""What every model-step runtime provides: the one interface the build, the configs and the bench call.

As Text Embeddings Inference's ``Backend`` trait, with one implementation per folder (``onnxruntime/``,
``openvino/``, ``tensorrt/``): nothing outside this package asks which runtime it has. A runtime says

* what the spec may ask of it (:meth:`Runtime.check_spec`) and what a GPU build fills in (:meth:`gpu_defaults`);
* what it serves and how it is gated (:meth:`optimise`, stage 4 of the build) and checked in each target
  container (:meth:`container_check`, stage 5);
* its model step's config (:meth:`model_config`) and the files it writes beside it (:meth:`write_files`);
* its tuning parameter (:attr:`thread_parameter`) and the spec lines that set it (:meth:`thread_lines`).

The declarative part is light: the spec validates with it. The build stages load their modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from tritongen.configs.model_config import InstanceGroup, ModelConfig, Tensor

__all__ = ["BuildStages", "ModelStepView", "Runtime", "SpecView"]


class SpecView(Protocol):
    """What a runtime reads of the build spec (``tritongen.buildspec.BuildSpec`` is one)."""

    @property
    def precision(self) -> str: ...  # noqa: D102
    @property
    def quantization(self) -> str: ...  # noqa: D102
    @property
    def optimize(self) -> bool: ...  # noqa: D102
    @property
    def max_batch_size(self) -> int: ...  # noqa: D102
    @property
    def model_instances(self) -> Any: ...  # noqa: D102
    @property
    def onnxruntime(self) -> Any: ...  # noqa: D102
    @property
    def openvino(self) -> Any: ...  # noqa: D102
    @property
    def tensorrt(self) -> Any: ...  # noqa: D102


class ModelStepView(Protocol):
    """The model step's config inputs, as ``tritongen.configs.steps`` computes them for every runtime."""

    @property
    def spec(self) -> SpecView: ...  # noqa: D102
    @property
    def inputs(self) -> tuple[Tensor, ...]: ...  # noqa: D102
    @property
    def buckets(self) -> tuple[int, ...]: ...  # noqa: D102
    @property
    def max_length(self) -> int: ...  # noqa: D102
    def common(self) -> dict[str, Any]: ...  # noqa: D102
    def instances(self) -> InstanceGroup: ...  # noqa: D102


class BuildStages:
    """A runtime's part of the build: stage 4 (optimise and gate), stage 5 (the container check) and its files.

    A built-in runtime's stages live in its folder's ``stages.py`` and attach themselves to the runtime with
    ``@register_stages`` when the build imports ``tritongen.runtimes.stages``: they use the build's plan, which
    the runtime itself sits below. A runtime may also carry its stages itself (``Runtime.stages``).
    """

    def optimise(self, plan: Any, onnx: Any, console: Console) -> Any:
        """Build stage 4: the served model from the FP32 export, gated; None when the export is served as is."""
        raise NotImplementedError

    def container_check(self, plan: Any, onnx: Any, variant: Any, console: Console, release: str, python: Path) -> Any:
        """Build stage 5 in one container (``release``, its venv's ``python``): a ContainerReport, or why skipped."""
        raise NotImplementedError

    def write_files(self, plan: Any, version_dir: Path) -> None:
        """Files the model step needs beside its model (the TensorRT engine's build plan)."""


class Runtime:
    """Base of a runtime entry: declarative class attributes, and hooks for the spec, the configs and the bench."""

    stages: BuildStages | None = None  # set by ``register_stages`` (or by the runtime itself)

    name: ClassVar[str]  # the spec's ``runtime`` value
    title: ClassVar[str]  # for people: "ONNX Runtime"
    backend: ClassVar[str]  # what the model step's config names (``backend``, or ``platform`` for a plan)
    # Whether a config naming ``backend`` is this runtime's (its thread setting, the tuning sweep's); a runtime
    # that serves through another's backend says False.
    owns_backend: ClassVar[bool] = True
    model_file: ClassVar[str]  # the served file in the model step's version folder
    # The Python stand-in the local server installs for the container's native backend (None: none needed).
    local_backend: ClassVar[str | None] = None
    # The model step's parameter for threads per instance, and the spec section and key that set it.
    thread_parameter: ClassVar[str | None] = None
    thread_setting: ClassVar[tuple[str, str] | None] = None
    # Whether the served file is the exported ONNX graph itself (or an optimisation of it), so that graph-level
    # work (folding the postprocess in, the canary record, image models exported as they are) applies.
    serves_onnx: ClassVar[bool] = False
    # Why the container check does not apply to this runtime's model ("": it does).
    container_check_skipped: ClassVar[str] = ""
    # Why the postprocess cannot be folded into what this runtime serves ("": it can).
    fold_refused: ClassVar[str] = ""

    def check_spec(self, spec: SpecView) -> None:
        """Raise :class:`~tritongen.errors.SpecError` for settings this runtime cannot serve."""

    def gpu_defaults(self, data: dict[str, Any]) -> dict[str, Any]:
        """What ``device: gpu`` fills in for this runtime where the spec mapping ``data`` leaves it open."""
        return data

    def cpu_defaults(self, data: dict[str, Any], cores: int) -> dict[str, Any]:
        """What a CPU build for ``cores`` cores fills in where the spec mapping ``data`` leaves it open."""
        return data

    def int8_schemes(self, quantization: str) -> tuple[str, ...]:
        """The INT8 schemes the search tries: the one asked for, else every one (``auto``)."""
        from tritongen.precision.int8_search import SCHEMES

        return SCHEMES if quantization == "auto" else (quantization,)

    symmetric_int8: ClassVar[bool] = False  # whether INT8 activations must be symmetric (TensorRT's explicit QDQ)

    def variant_name(self, spec: SpecView, chosen: str | None = None) -> str:
        """The served variant in words (the card, ``build.json``): precision, the INT8 candidate ``chosen``."""
        name = spec.precision.upper()
        if chosen is not None:
            name += f" {chosen}"
        elif spec.precision == "int8":
            name += f" {spec.quantization}"
        return name + (" optimised" if spec.optimize else "")

    def model_config(self, step: ModelStepView) -> ModelConfig:
        """The model step's typed config."""
        raise NotImplementedError

    def thread_lines(self, threads: int) -> list[str]:
        """The build spec's YAML lines that give the model step ``threads`` per instance ([] when it has none)."""
        if self.thread_setting is None:
            return []
        section, key = self.thread_setting
        return [f"{section}:", f"  {key}: {threads}"]
