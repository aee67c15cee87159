"""ONNX Runtime: Triton's onnxruntime backend serves the exported (or optimised) ONNX model; the default runtime."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tritongen.buildspec import BuildSpec, RuntimeSettings
from tritongen.errors import SpecError
from tritongen.runtimes.base import Export, ModelStep, Runtime, Variant
from tritongen.runtimes.onnxruntime.settings import OnnxRuntimeParameters, OnnxRuntimeSettings, TensorRTSettings
from tritongen.runtimes.registry import register_runtime

if TYPE_CHECKING:
    from rich.console import Console

    from tritongen.configs.model_config import ModelConfig, TensorRTAccelerator
    from tritongen.gates.compat import ContainerReport
    from tritongen.tasks import BuildPlan

__all__ = ["OnnxRuntime", "OnnxRuntimeSettings", "TensorRTSettings"]


@register_runtime
class OnnxRuntime(Runtime):
    """FP32, FP16, INT8 (every scheme) and fusions; on a GPU node, ONNX Runtime's TensorRT accelerator at FP16."""

    name = "onnx"
    title = "ONNX Runtime"
    backend = "onnxruntime"
    model_file = "model.onnx"
    local_backend: ClassVar[str | None] = "tritongen.runtimes.onnxruntime.backend"
    thread_parameter: ClassVar[str | None] = OnnxRuntimeParameters.keys()[0]  # intra_op_thread_count
    settings: ClassVar[tuple[type[RuntimeSettings], ...]] = (OnnxRuntimeSettings, TensorRTSettings)
    thread_setting: ClassVar[tuple[type[RuntimeSettings], str] | None] = (OnnxRuntimeSettings, "intra_op_threads")
    serves_onnx = True
    package = "onnxruntime"
    native_tag = "ort"

    def container_opening(self) -> str:
        """The compat gate's own: an ONNX file in ONNX Runtime's CPU provider."""
        from tritongen.gates.compat import ONNX_RUNTIME_OPENING

        return ONNX_RUNTIME_OPENING

    def native_release(self, folder: Path) -> str:
        """From ``libonnxruntime.so.1.19.2``: ONNX Runtime names its library by its release."""
        return _release_suffix(folder, "libonnxruntime.so.")

    def check_spec(self, spec: BuildSpec) -> None:
        trt = spec.section(TensorRTSettings).enabled
        if trt and spec.model_instances.kind != "KIND_GPU":
            raise SpecError("the TensorRT accelerator needs the model step on KIND_GPU instances")
        if trt and spec.section(OnnxRuntimeSettings).gpu_accelerator == "cuda":
            raise SpecError("gpu_accelerator cuda runs the CUDA provider alone, but tensorrt.enabled is true: drop one")

    def gpu_defaults(self, data: dict[str, Any]) -> dict[str, Any]:
        """On a GPU node the model step runs through ONNX Runtime's TensorRT accelerator at FP16.

        With ``gpu_accelerator: cuda``, through its CUDA provider alone: the backend's own for KIND_GPU instances.
        """
        if (data.get("onnxruntime") or {}).get("gpu_accelerator") == "cuda":
            return data
        return {**data, "tensorrt": {"enabled": True, "precision_mode": "FP16", **(data.get("tensorrt") or {})}}

    def variant_name(self, spec: BuildSpec, variant: Variant | None = None) -> str:
        name = super().variant_name(spec, variant)
        if spec.model_instances.kind != "KIND_GPU":
            return name
        trt = spec.section(TensorRTSettings)
        provider = f"TensorRT provider at {trt.precision_mode}" if trt.enabled else "CUDA provider"
        return f"{name}, on the GPU through ONNX Runtime's {provider}"

    def optimise(self, plan: BuildPlan, onnx: Export, console: Console) -> Variant | None:
        """Optimise or convert the FP32 export and gate it; INT8 searches for the fastest candidate that passes."""
        from tritongen.runtimes.onnxruntime.stages import optimise

        return optimise(self, plan, onnx, console)

    def container_check(
        self, plan: BuildPlan, onnx: Export, variant: Variant | None, console: Console, release: str, python: Path
    ) -> ContainerReport:
        """Our runtime's outputs (lossless) or the gate (FP16, INT8) in the container's ONNX Runtime."""
        from tritongen.runtimes.onnxruntime.stages import container_check

        return container_check(self, plan, onnx, variant, console, release, python)

    def served_session(self, path: Path, spec: BuildSpec) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """A CPU session with the options the onnxruntime backend sets from the config this spec renders."""
        import onnxruntime as ort

        from tritongen.runtimes.onnxruntime.backend import native_options

        settings = spec.section(OnnxRuntimeSettings)
        threads = (settings.intra_op_threads, settings.inter_op_threads)
        options = native_options(*threads, settings.graph_optimization_level)
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [output.name for output in session.get_outputs()]
        return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))

    def ceiling_session(self, path: Path) -> Callable[[dict[str, Any]], object]:
        """The CPU provider with ONNX Runtime's default options."""
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return lambda feeds: session.run(None, feeds)

    def triton_batches(self, spec: BuildSpec) -> bool:
        """Not for one CPU instance whose session runs several threads: there Triton's batcher stalls.

        Triton 2.51's dynamic batcher, in front of one model instance whose ONNX Runtime threads spin, held about one
        request in ten for 500 ms (its idle wait: the wake-up for the request was lost while the instance finished
        the one before; p90 504 ms at concurrency 1, docs/benchmarks.md). Without it each request runs alone on
        every thread, and what batches concurrent texts is the gateway, which sends them as one call.
        """
        instances = spec.model_instances
        threads = spec.section(OnnxRuntimeSettings).intra_op_threads
        return not (instances.kind == "KIND_CPU" and instances.count == 1 and threads != 1)

    def model_config(self, step: ModelStep) -> ModelConfig:
        """The onnxruntime backend: session threads in ``parameters``, graph level and the optional TensorRT EP."""
        from tritongen.configs.model_config import ModelConfig, OnnxRuntimeOptimization

        ort = step.spec.section(OnnxRuntimeSettings)
        common = step.common()
        if not self.triton_batches(step.spec):
            common["dynamic_batching"] = None
        return ModelConfig(
            **common,
            backend=self.backend,
            default_model_filename=self.model_file,
            instance_group=step.instances(),
            optimization=OnnxRuntimeOptimization(ort.graph_optimization_level, _tensorrt_accelerator(step)),
            parameters=OnnxRuntimeParameters(
                ort.intra_op_threads or None, ort.inter_op_threads or None
            ).to_parameters(),
        )


def _tensorrt_accelerator(step: ModelStep) -> TensorRTAccelerator | None:
    """ONNX Runtime's TensorRT execution provider, with one optimisation profile over the buckets."""
    from tritongen.configs.model_config import TensorRTAccelerator

    trt = step.spec.section(TensorRTSettings)
    if not trt.enabled:
        return None
    parameters = {
        "precision_mode": trt.precision_mode,
        "max_workspace_size_bytes": str(trt.max_workspace_size_bytes),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": trt.engine_cache_path,
    }
    if trt.profile_shapes:
        batch = step.spec.max_batch_size
        shapes = {
            "min": (1, 1),
            "opt": (max(1, batch // 2), step.buckets[len(step.buckets) // 2]),
            "max": (max(1, batch), step.max_length),
        }
        for key, (rows, length) in shapes.items():
            parameters[f"trt_profile_{key}_shapes"] = ",".join(f"{t.name}:{rows}x{length}" for t in step.inputs)
    return TensorRTAccelerator(parameters)


def _release_suffix(folder: Path, prefix: str) -> str:
    """The longest ``X.Y.Z`` after ``prefix`` among ``folder``'s file names ("" if none)."""
    found = [p.name[len(prefix) :] for p in folder.glob(prefix + "*.*.*")]
    return max(found, key=len, default="")
