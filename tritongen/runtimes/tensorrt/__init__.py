"""TensorRT: a plan built on the GPU node (``tritongen engine``) from the ONNX model the build gates here.

``engine`` holds the plan's build recipe (profiles, flags, per-architecture file names) and its builder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tritongen.buildspec import BuildSpec
from tritongen.errors import SpecError
from tritongen.runtimes.base import Export, ModelStep, Runtime, Variant
from tritongen.runtimes.onnxruntime.settings import TensorRTSettings
from tritongen.runtimes.registry import register_runtime

if TYPE_CHECKING:
    from rich.console import Console

    from tritongen.configs.model_config import ModelConfig
    from tritongen.tasks import BuildPlan

__all__ = ["TensorRT"]


@register_runtime
class TensorRT(Runtime):
    """FP32, FP16 or static INT8 (explicit, symmetric QDQ) ONNX, built into a plan per GPU architecture."""

    name = "tensorrt"
    title = "TensorRT"
    backend = "tensorrt_plan"
    model_file = "model.plan"
    symmetric_int8 = True
    container_check_skipped = "the model step is a TensorRT plan"
    fold_refused = "a TensorRT plan is built on the GPU node from the model alone"

    def check_spec(self, spec: BuildSpec) -> None:
        if spec.optimize:
            raise SpecError("graph optimisation emits ONNX Runtime-only operators; TensorRT fuses on its own: drop it")
        if spec.precision == "int8" and spec.quantization == "dynamic":
            raise SpecError("TensorRT takes int8 only as static QDQ quantisation, not dynamic")
        if spec.max_batch_size == 0:
            raise SpecError("a TensorRT engine needs max_batch_size > 0 for its optimisation profiles")
        if spec.section(TensorRTSettings).enabled:
            raise SpecError("the TensorRT execution accelerator is for runtime onnx; runtime tensorrt builds a plan")
        if spec.model_instances.kind == "KIND_CPU":
            raise SpecError("a TensorRT plan runs on KIND_GPU instances; set the model step's kind to KIND_GPU")

    def int8_schemes(self, quantization: str) -> tuple[str, ...]:
        """Only static: TensorRT takes INT8 as explicit QDQ."""
        return ("static",)

    def optimise(self, plan: BuildPlan, onnx: Export, console: Console) -> Variant | None:
        """The ONNX model the plan is built from, gated as for ONNX Runtime (INT8: symmetric QDQ)."""
        from tritongen.runtimes.onnxruntime.stages import optimise

        return optimise(self, plan, onnx, console)

    def write_files(self, plan: BuildPlan, version_dir: Path) -> None:
        """``engine.json``: how ``tritongen engine`` builds the plan on the GPU node."""
        from tritongen.runtimes.tensorrt.stages import write_engine_plan

        write_engine_plan(plan, version_dir)

    def model_config(self, step: ModelStep) -> ModelConfig:
        """A TensorRT plan: one engine per GPU architecture, one optimisation profile per bucket."""
        import dataclasses

        from tritongen.configs.model_config import ModelConfig
        from tritongen.runtimes.tensorrt.engine import cc_model_filenames

        profiles = tuple(str(i) for i in range(len(step.buckets)))
        return ModelConfig(
            **step.common(),
            platform=self.backend,
            default_model_filename=self.model_file,
            cc_model_filenames=cc_model_filenames(),
            instance_group=dataclasses.replace(step.instances(), profiles=profiles),
        )
