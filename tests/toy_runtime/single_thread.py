"""A toy runtime, ``onnx-single-thread``: the FP32 export as it is, on one thread per instance, and nothing else.

The whole runtime is this module: its spec section (with its command-line flag) and its entry below.
``tests/runtimes/test_toy_runtime.py`` registers it with one line, ``register_runtime(SingleThread)``; no file of the
package changes. It serves through Triton's onnxruntime backend (the one the local server has), so the real
server runs what it builds; its pip package is ``onnxruntime``, so the container table already holds its release
in every container, and the container check and the bench's ceiling run it on one thread as well.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tritongen.buildspec import BuildSpec, RuntimeSettings
from tritongen.buildspec.sections import setting
from tritongen.configs.model_config import ModelConfig
from tritongen.containers import container
from tritongen.errors import ParityError, SpecError
from tritongen.gates.compat import ContainerCheck, ContainerReport, check_in_container
from tritongen.runtimes import Export, ModelStep, Runtime, Variant
from tritongen.tasks import BuildPlan

MARKER = "single_thread.txt"  # what write_files leaves beside the model, to show the build called it

# The compat worker's opening: ONNX Runtime on one intra-op thread, importing nothing but onnxruntime.
OPENING = r"""
import onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
version, run = ort.__version__, session.run
label = "ONNX Runtime " + version + " on one thread"
"""


@dataclass(frozen=True)
class SingleThreadSettings(RuntimeSettings):
    """The ``single_thread`` section: the words the marker file carries (``--toy-marker``)."""

    section: ClassVar[str] = "single_thread"

    marker: str = setting("one thread", flag="toy_marker", help="toy runtime: the marker's words")

    def validate(self) -> None:
        if not self.marker:
            raise SpecError("the toy runtime's marker must not be empty")


class SingleThread(Runtime):
    """FP32 only; ONNX Runtime pinned to one intra-op thread, here, in the containers and in the ceiling."""

    name = "onnx-single-thread"
    title = "ONNX Runtime, one thread"
    backend = "onnxruntime"
    owns_backend = False  # ONNX Runtime's backend serves it: a config naming it is the onnx runtime's
    model_file = "model.onnx"
    package = "onnxruntime"
    settings = (SingleThreadSettings,)
    thread_parameter = "intra_op_thread_count"
    fold_refused = "the toy runtime serves the export alone"

    def check_spec(self, spec: BuildSpec) -> None:
        if spec.precision != "fp32" or spec.optimize:
            raise SpecError("runtime onnx-single-thread serves the FP32 export as it is: drop precision and optimize")

    def container_opening(self) -> str:
        return OPENING

    def ceiling_session(self, path: Path) -> Callable[[dict[str, Any]], object]:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return functools.partial(session.run, None)

    def optimise(self, plan: BuildPlan, onnx: Export, console: Any) -> None:
        shutil.copyfile(onnx.fp32_path, onnx.target)  # served as exported: no variant to gate

    def container_check(
        self, plan: BuildPlan, onnx: Export, variant: Variant | None, console: Any, release: str, python: Path
    ) -> ContainerReport:
        """The served file's outputs in the container's ONNX Runtime, on one thread, against ours."""
        feeds = plan.bound.modality.feeds(plan, onnx.encoder)
        check = ContainerCheck(feeds, plan.spec.parity_tolerance, container=container(release).release)
        with self.container_session(onnx.target, python) as session:
            report = check_in_container(session, check)
        if not report.passed:
            raise ParityError(report.summary())
        return report

    def write_files(self, plan: BuildPlan, version_dir: Path) -> None:
        marker = plan.spec.section(SingleThreadSettings).marker
        (version_dir / MARKER).write_text(f"{plan.spec.name}: {marker}\n", encoding="utf-8")

    def model_config(self, step: ModelStep) -> ModelConfig:
        return ModelConfig(
            **step.common(),
            backend=self.backend,
            default_model_filename=self.model_file,
            instance_group=step.instances(),
            parameters={self.thread_parameter: "1"},
        )
