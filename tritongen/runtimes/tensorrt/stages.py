"""TensorRT's build stages: the ONNX model the plan is built from, gated as for ONNX Runtime, and ``engine.json``."""

from __future__ import annotations

from pathlib import Path

from tritongen.builder.plan import BuildPlan
from tritongen.runtimes.onnxruntime.stages import OnnxRuntimeStages
from tritongen.runtimes.registry import register_stages
from tritongen.runtimes.tensorrt import TensorRT
from tritongen.runtimes.tensorrt.engine import EnginePlan, builder_flags, cc_model_filenames, plan_profiles

__all__ = ["TensorRTStages"]


@register_stages(TensorRT)
class TensorRTStages(OnnxRuntimeStages):
    """Stage 4 as ONNX Runtime's (INT8: symmetric QDQ, as the runtime says); no container check (a plan)."""

    def write_files(self, plan: BuildPlan, version_dir: Path) -> None:
        """``engine.json``: how ``tritongen engine`` builds the plan on the GPU node."""
        spec = plan.spec
        engine = EnginePlan(
            inputs=plan.inputs,
            profiles=plan_profiles(plan.buckets, spec.max_batch_size),
            flags=builder_flags(spec.precision),
            workspace_bytes=spec.tensorrt.max_workspace_size_bytes,
            cc_model_filenames=cc_model_filenames(),
        )
        (version_dir / "engine.json").write_text(engine.to_json())
