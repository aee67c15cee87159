"""A toy task, ``cls-vector``: the encoder's first-token vector, scaled, and its L2 norm.

The whole task is this folder: its spec section (with its command-line flag), the entry below and its
postprocess step (``postprocess.py``); the tokenizer step is the shared plain one. ``tests/tasks/test_toy_task.py``
registers it with one line, ``register_task(ClsVector)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tritongen.buildspec import TaskSettings
from tritongen.buildspec.sections import setting
from tritongen.errors import SpecError
from tritongen.gates.accuracy import CosineGate
from tritongen.tasks._base import Binding, Task, TensorSpec, exportable, load_pretrained


@dataclass(frozen=True)
class ClsVectorSettings(TaskSettings):
    """The ``cls_vector`` section: what the served vector is multiplied by (``--cls-scale``)."""

    section: ClassVar[str] = "cls_vector"

    scale: float = setting(1.0, flag="cls_scale", type=float, help="cls-vector: the vector's scale (default 1)")

    def validate(self) -> None:
        if self.scale <= 0:
            raise SpecError(f"cls-vector scale must be > 0, got {self.scale}")


class ClsVector(Task):
    """``TEXT`` -> ``VECTOR`` (the first token's last hidden state) and ``NORM`` (its L2 norm)."""

    name = "cls-vector"
    onnx_output = "cls_vector"
    gate = CosineGate
    postprocess_step = "tests.toy_task.cls_vector.postprocess"
    section, Settings = ClsVectorSettings.section, ClsVectorSettings

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        from tests.toy_task.cls_vector.postprocess import ScaleParameters

        return {}, ScaleParameters(bound.settings.scale).to_parameters()

    def onnx_output_dims(self, checkpoint: Any) -> tuple[int, ...]:
        return (checkpoint.hidden_size,)

    def postprocess_outputs(self, checkpoint: Any) -> list[TensorSpec]:
        return [
            TensorSpec("VECTOR", "TYPE_FP32", (checkpoint.hidden_size,)),
            TensorSpec("NORM", "TYPE_FP32", (1,)),
        ]

    def load_module(self, checkpoint: Any) -> Any:
        from transformers import AutoModel

        model = load_pretrained(AutoModel, checkpoint)
        return exportable(model, lambda outputs, mask: outputs.last_hidden_state[:, 0])
