"""Sequence classification: one label per text (``*ForSequenceClassification``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.contract import LABEL, LABELS, LOGITS, PROBABILITIES, SCORE
from tritongen.parameters import ClassifierParameters, LabelsParameters, SelectionParameters, written
from tritongen.tasks._base import Binding, Task, TensorSpec, exportable, labels_line, load_pretrained
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.classification.settings import ClassificationSettings

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint
    from tritongen.model.fold import GraphTail

__all__ = ["Classification", "ClassificationSettings"]


@register_task
class Classification(Task):
    """Sequence classification: ``TEXT`` -> ``LABEL``, ``SCORE``, ``PROBABILITIES`` [, ``LABELS``]."""

    name = "classification"
    onnx_output = LOGITS
    head = "ForSequenceClassification"
    bench_baselines = True
    postprocess_step = "tritongen.tasks.classification.postprocess"
    section = "classification"
    Settings = ClassificationSettings

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (len(checkpoint.id2label),)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        outputs = [
            public(LABEL),
            public(SCORE),
            public(PROBABILITIES, (len(checkpoint.id2label),)),
        ]
        if _multi_label(checkpoint):
            outputs.append(public(LABELS))  # JSON list of the labels that apply
        return outputs

    def gate_function(self, checkpoint: Checkpoint) -> str:
        # The transformers pipeline's rule for picking the activation.
        return "sigmoid" if _multi_label(checkpoint) or len(checkpoint.id2label) == 1 else "softmax"

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return written(ClassifierParameters(self.gate_function(checkpoint)), LabelsParameters())

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        settings, checkpoint = bound.settings, bound.checkpoint
        if not _multi_label(checkpoint):
            return {}, {}
        return {}, SelectionParameters(settings.multi_label_threshold, settings.multi_label_top_k).to_parameters()

    def graph_tail(self, checkpoint: Checkpoint) -> GraphTail | None:
        if _multi_label(checkpoint):
            return None  # LABELS is a JSON list built per row: it stays a Python step
        from tritongen.model.fold import classification_tail

        labels = list(checkpoint.id2label.values())
        return classification_tail(self.onnx_output, labels, function=self.gate_function(checkpoint))

    def card_lines(self, bound: Binding) -> list[str]:
        checkpoint = bound.checkpoint
        return [labels_line(checkpoint)]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForSequenceClassification

        model = load_pretrained(AutoModelForSequenceClassification, checkpoint)
        return exportable(model, lambda outputs, mask: outputs.logits)


def _multi_label(checkpoint: Checkpoint) -> bool:
    return checkpoint.config.get("problem_type") == "multi_label_classification"
