"""OpenVINO: Triton's openvino backend serves the export as IR (``model.xml``), FP32 or NNCF INT8, on CPUs.

``ir`` converts, quantises and runs IR; ``stages`` holds the build's stages for it; ``backend`` is the local
server's stand-in for the container's native backend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tritongen.buildspec import BuildSpec, RuntimeSettings
from tritongen.errors import SpecError
from tritongen.runtimes.base import Export, ModelStep, Runtime, Variant
from tritongen.runtimes.onnxruntime.settings import TensorRTSettings
from tritongen.runtimes.openvino.ir import CONTAINER_OPENING, IR_FILE, cpu_precisions
from tritongen.runtimes.openvino.settings import OpenVinoParameters, OpenVinoSettings
from tritongen.runtimes.registry import register_runtime

if TYPE_CHECKING:
    from rich.console import Console

    from tritongen.configs.model_config import ModelConfig
    from tritongen.gates.compat import ContainerReport
    from tritongen.tasks import BuildPlan

__all__ = ["OpenVino", "OpenVinoSettings"]


@register_runtime
class OpenVino(Runtime):
    """FP32 or INT8 IR; OpenVINO computes in BF16 where the CPU has it, so the build gates every precision."""

    name = "openvino"
    title = "OpenVINO"
    backend = "openvino"
    model_file = IR_FILE
    local_backend: ClassVar[str | None] = "tritongen.runtimes.openvino.backend"
    thread_parameter: ClassVar[str | None] = OpenVinoParameters.keys()[2]  # INFERENCE_NUM_THREADS
    settings: ClassVar[tuple[type[RuntimeSettings], ...]] = (OpenVinoSettings,)
    thread_setting: ClassVar[tuple[type[RuntimeSettings], str] | None] = (OpenVinoSettings, "inference_threads")
    fold_refused = "the openvino runtime serves the model alone, without ai.onnx.ml operators"
    package = "openvino"
    native_tag = "ov"

    def container_opening(self) -> str:
        """The IR in the container's OpenVINO, compiled for the CPU at the precision asked."""
        return CONTAINER_OPENING

    def native_release(self, folder: Path) -> str:
        """From ``libopenvino.so.2024.4.0``, or the wheels' ``libopenvino.so.2440`` (2024.4.0)."""
        for library in sorted(folder.glob("libopenvino.so.*"), key=lambda p: -len(p.name)):
            suffix = library.name[len("libopenvino.so.") :]
            if suffix.count(".") == 2:
                return suffix
            if suffix.isdigit() and len(suffix) == 4:
                return f"20{suffix[:2]}.{suffix[2]}.{suffix[3]}"
        return ""

    def check_spec(self, spec: BuildSpec) -> None:
        if spec.precision == "fp16" or spec.optimize:
            raise SpecError(
                "runtime openvino serves FP32 or INT8 (NNCF) IR and computes in BF16 itself where the CPU has it "
                "(all gated); drop precision fp16 and optimize, which are ONNX Runtime variants"
            )
        if spec.precision == "int8" and spec.quantization == "dynamic":
            raise SpecError("runtime openvino quantises statically (NNCF, calibrated); drop quantization dynamic")
        if spec.model_instances.kind != "KIND_CPU" or spec.section(TensorRTSettings).enabled:
            raise SpecError(
                "runtime openvino runs the model step on KIND_CPU instances, without the TensorRT accelerator"
            )

    def variant_name(self, spec: BuildSpec, variant: Variant | None = None) -> str:
        weights = "INT8 IR (NNCF)" if spec.precision == "int8" else "FP32 IR"
        return (
            f"{weights}; runs in BF16 on a node whose CPU has AVX512_BF16 or AMX (OpenVINO's default, which the "
            f"openvino backend cannot turn off), in FP32 elsewhere; gated at {'/'.join(cpu_precisions()).upper()} "
            "on the build machine"
        )

    def optimise(self, plan: BuildPlan, onnx: Export, console: Console) -> Variant:
        """The export as IR (INT8 by NNCF), gated at every precision OpenVINO may run it at."""
        from tritongen.runtimes.openvino.stages import optimise

        return optimise(self, plan, onnx, console)

    def container_check(
        self, plan: BuildPlan, onnx: Export, variant: Variant | None, console: Console, release: str, python: Path
    ) -> ContainerReport | dict[str, str]:
        """The gate again in the container's OpenVINO, at each precision."""
        from tritongen.runtimes.openvino.stages import container_check

        if variant is None:
            return {"skipped": "no gated variant"}
        return container_check(self, plan, onnx, variant, console, release, python)

    def ceiling_session(self, path: Path) -> Callable[[dict[str, Any]], object]:
        """The IR compiled for the CPU at OpenVINO's default precision, one stream, as a latency-bound caller."""
        from tritongen.runtimes.openvino.ir import OpenVinoSession

        session = OpenVinoSession(path, {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1})
        return lambda feeds: session.run(None, feeds)

    def model_config(self, step: ModelStep) -> ModelConfig:
        """The native openvino backend on the IR, one request at a time; the stand-in reads the same parameters."""
        from tritongen.configs.model_config import ModelConfig

        settings = step.spec.section(OpenVinoSettings)
        parameters = OpenVinoParameters(
            settings.performance_hint, str(settings.num_streams or "AUTO"), settings.inference_threads or None
        )
        # Whole requests, not batches of them: with max_batch_size above 0 the native backend answers only batches of
        # exactly that many rows, and its batch padding (the way around) is broken upstream (r24.10 to main).
        common = {**step.common(), "max_batch_size": 0, "dynamic_batching": None}
        return ModelConfig(
            **common,
            backend=self.backend,
            default_model_filename=self.model_file,
            instance_group=step.instances(),
            parameters=parameters.to_parameters(),
        )
