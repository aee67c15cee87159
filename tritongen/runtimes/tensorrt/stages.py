"""TensorRT's build stage of its own: ``engine.json``, how ``tritongen engine`` builds the plan on the GPU node.

Stage 4 is ONNX Runtime's (``tritongen.runtimes.onnxruntime.stages``): the plan is built from the ONNX model
gated there; there is no container check (a plan runs only on the GPU node).
"""

from __future__ import annotations

from pathlib import Path

from tritongen.runtimes.onnxruntime.settings import TensorRTSettings
from tritongen.runtimes.tensorrt.engine import EnginePlan, builder_flags, cc_model_filenames, plan_profiles
from tritongen.tasks import BuildPlan

__all__ = ["write_engine_plan"]


def write_engine_plan(plan: BuildPlan, version_dir: Path) -> None:
    """``engine.json`` beside the ONNX model: inputs, one profile per bucket, builder flags, file per GPU."""
    spec = plan.spec
    engine = EnginePlan(
        inputs=plan.inputs,
        profiles=plan_profiles(plan.buckets, spec.max_batch_size),
        flags=builder_flags(spec.precision),
        workspace_bytes=spec.section(TensorRTSettings).max_workspace_size_bytes,
        cc_model_filenames=cc_model_filenames(),
    )
    (version_dir / "engine.json").write_text(engine.to_json())
