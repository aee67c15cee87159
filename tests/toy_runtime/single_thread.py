"""A toy runtime, ``onnx-single-thread``: the FP32 export as it is, on one thread per instance, and nothing else.

The whole runtime is this module: the entry below. ``tests/test_toy_runtime.py`` registers it with one line,
``register_runtime(SingleThread)``; no file of the package changes. It serves through Triton's onnxruntime
backend (the one the local server has), so the real server runs what it builds.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tritongen.configs.model_config import ModelConfig
from tritongen.errors import SpecError
from tritongen.runtimes import BuildStages, ModelStepView, Runtime, SpecView

MARKER = "single_thread.txt"  # what write_files leaves beside the model, to show the build called it


class SingleThreadStages(BuildStages):
    """Its build stages: the export served as it is, and a marker file beside the model."""

    def optimise(self, plan: Any, onnx: Any, console: Any) -> None:
        shutil.copyfile(onnx.fp32_path, onnx.target)  # served as exported: no variant to gate

    def write_files(self, plan: Any, version_dir: Path) -> None:
        (version_dir / MARKER).write_text(f"{plan.spec.name}: one thread\n", encoding="utf-8")


class SingleThread(Runtime):
    """FP32 only; ONNX Runtime pinned to one intra-op thread; no container check."""

    name = "onnx-single-thread"
    title = "ONNX Runtime, one thread"
    backend = "onnxruntime"
    owns_backend = False  # ONNX Runtime's backend serves it: a config naming it is the onnx runtime's
    model_file = "model.onnx"
    thread_parameter = "intra_op_thread_count"
    container_check_skipped = "the toy runtime is not in any container"
    fold_refused = "the toy runtime serves the export alone"
    stages = SingleThreadStages()  # a runtime may carry its stages itself

    def check_spec(self, spec: SpecView) -> None:
        if spec.precision != "fp32" or spec.optimize:
            raise SpecError("runtime onnx-single-thread serves the FP32 export as it is: drop precision and optimize")

    def model_config(self, step: ModelStepView) -> ModelConfig:
        return ModelConfig(
            **step.common(),
            backend=self.backend,
            default_model_filename=self.model_file,
            instance_group=step.instances(),
            parameters={self.thread_parameter: "1"},
        )
