"""OpenVINO: Triton's openvino backend serves the export as IR (``model.xml``), FP32 or NNCF INT8, on CPUs.

``ir`` converts, quantises and runs IR; ``stages`` holds the build's stages for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tritongen.errors import SpecError
from tritongen.runtimes.base import ModelStepView, Runtime, SpecView
from tritongen.runtimes.openvino.ir import IR_FILE
from tritongen.runtimes.registry import register_runtime

if TYPE_CHECKING:
    from tritongen.configs.model_config import ModelConfig

__all__ = ["OpenVino"]


@register_runtime
class OpenVino(Runtime):
    """FP32 or INT8 IR; OpenVINO computes in BF16 where the CPU has it, so the build gates every precision."""

    name = "openvino"
    title = "OpenVINO"
    backend = "openvino"
    model_file = IR_FILE
    local_backend: ClassVar[str | None] = "openvino"
    thread_parameter: ClassVar[str | None] = "INFERENCE_NUM_THREADS"
    thread_setting: ClassVar[tuple[str, str] | None] = ("openvino", "inference_threads")
    fold_refused = "the openvino runtime serves the model alone, without ai.onnx.ml operators"

    def check_spec(self, spec: SpecView) -> None:
        if spec.precision == "fp16" or spec.optimize:
            raise SpecError(
                "runtime openvino serves FP32 or INT8 (NNCF) IR and computes in BF16 itself where the CPU has it "
                "(all gated); drop precision fp16 and optimize, which are ONNX Runtime variants"
            )
        if spec.precision == "int8" and spec.quantization == "dynamic":
            raise SpecError("runtime openvino quantises statically (NNCF, calibrated); drop quantization dynamic")
        if spec.model_instances.kind != "KIND_CPU" or spec.tensorrt.enabled:
            raise SpecError(
                "runtime openvino runs the model step on KIND_CPU instances, without the TensorRT accelerator"
            )
        settings = spec.openvino
        if settings.performance_hint not in ("LATENCY", "THROUGHPUT"):
            raise SpecError(f"openvino performance_hint must be LATENCY or THROUGHPUT, got {settings.performance_hint}")
        if settings.num_streams < 0 or settings.inference_threads < 0:
            raise SpecError("openvino num_streams and inference_threads must be >= 0 (0: OpenVINO decides)")

    def variant_name(self, spec: SpecView, chosen: str | None = None) -> str:
        weights = "INT8 IR (NNCF)" if spec.precision == "int8" else "FP32 IR"
        return f"{weights}, BF16 where the CPU has it"

    def model_config(self, step: ModelStepView) -> ModelConfig:
        """The native openvino backend on the IR; the local backend reads the same parameters."""
        from tritongen.configs.model_config import ModelConfig

        settings = step.spec.openvino
        parameters = {
            "PERFORMANCE_HINT": settings.performance_hint,
            "NUM_STREAMS": str(settings.num_streams) if settings.num_streams else "AUTO",
        }
        if settings.inference_threads:
            parameters["INFERENCE_NUM_THREADS"] = str(settings.inference_threads)
        return ModelConfig(
            **step.common(),
            backend=self.backend,
            default_model_filename=self.model_file,
            instance_group=step.instances(),
            parameters=parameters,
        )
