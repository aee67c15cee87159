"""A toy task, ``cls-vector``: the encoder's first-token vector and its L2 norm.

The whole task is this folder: the entry below and its postprocess step (``postprocess.py``); the tokenizer
step is the shared plain one. ``tests/test_toy_task.py`` registers it with one line, ``register_task(ClsVector)``.
"""

from __future__ import annotations

from typing import Any

from tritongen.gates.accuracy import CosineGate
from tritongen.tasks._base import Task, TensorSpec, exportable, load_pretrained


class ClsVector(Task):
    """``TEXT`` -> ``VECTOR`` (the first token's last hidden state) and ``NORM`` (its L2 norm)."""

    name = "cls-vector"
    onnx_output = "cls_vector"
    gate = CosineGate
    postprocess_step = "tests.toy_task.cls_vector.postprocess"

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
