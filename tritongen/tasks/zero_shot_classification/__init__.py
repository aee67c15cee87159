"""Zero-shot classification from an NLI checkpoint, as the transformers ``zero-shot-classification`` pipeline.

``TEXT`` and ``CANDIDATE_LABELS`` (a JSON list of strings) -> ``LABELS`` (the candidate labels, best first) and
``SCORES`` (their scores), both JSON lists. Each (text, hypothesis) pair is one model row, so one request is a
varying number of rows: the Python steps take whole requests, and the model step batches the pairs across
requests. The pairs are NLI inputs, so parity and the accuracy gate compare the model's three logits on pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tritongen.contract import CANDIDATE_LABELS, LABELS, LOGITS, SCORES, TEXT
from tritongen.errors import UnsupportedModelError
from tritongen.parameters import WindowsParameters, ZeroShotParameters, ZeroShotWindowParameters, written
from tritongen.tasks._base import Binding, Task, TensorSpec, exportable, labels_line, load_pretrained, max_windows
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.zero_shot_classification.settings import ZeroShotSettings

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint

__all__ = ["ZeroShotClassification", "ZeroShotSettings", "entailment_ids"]

_PARITY_LABELS = ("sports", "politics", "cuisine française", "東京の天気", "good news 🎉")
PAIR_TEXT = TensorSpec("pair_text", "TYPE_INT64", (1,))  # the request row (text) each pair belongs to


def entailment_ids(checkpoint: Checkpoint) -> tuple[int, int]:
    """(entailment, contradiction) logit indices, found as the transformers pipeline finds them.

    The entailment label is the first in ``label2id`` whose name starts with "entail"; contradiction is index 0,
    or the last when entailment is 0. A checkpoint without one is not an NLI model.
    """
    label2id = checkpoint.config.get("label2id") or {name: i for i, name in checkpoint.id2label.items()}
    for label, index in label2id.items():
        if str(label).lower().startswith("entail"):
            entailment = int(index)
            return entailment, (len(checkpoint.id2label) - 1 if entailment == 0 else 0)
    raise UnsupportedModelError(
        f"zero-shot classification needs an NLI checkpoint with an `entailment` label; {{path}} has labels "
        f"{list(checkpoint.id2label.values())}",
        path=checkpoint.path,
    )


@register_task
class ZeroShotClassification(Task):
    """Zero-shot classification: each candidate label scored as the hypothesis of an NLI pair."""

    name = "zero-shot-classification"
    onnx_output = LOGITS
    head = "ForSequenceClassification"
    batched_io = False  # one text becomes one row per candidate label
    truncates = False  # the text of a pair is cut to fit (only_first, as the pipeline); no TRUNCATED output
    pair_input = True
    helper_modules = ("tritongen.tasks.zero_shot_classification.zero_shot",)
    tokenizer_step = "tritongen.tasks.zero_shot_classification.tokenizer"
    postprocess_step = "tritongen.tasks.zero_shot_classification.postprocess"
    section = "zero_shot_classification"
    Settings = ZeroShotSettings

    def matches(self, checkpoint: Checkpoint) -> bool:
        return False  # NLI checkpoints are detected as text-pair classification; zero-shot is asked for by name

    def parity_pairs(self, settings: ZeroShotSettings, texts: Sequence[str]) -> list[str]:
        """Each text with a hypothesis made from the template, as the served pairs are."""
        return [settings.hypothesis_template.format(_PARITY_LABELS[i % len(_PARITY_LABELS)]) for i in range(len(texts))]

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (len(checkpoint.id2label),)

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [public(TEXT), public(CANDIDATE_LABELS)]

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [PAIR_TEXT]

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [*super().postprocess_inputs(checkpoint), public(CANDIDATE_LABELS), PAIR_TEXT]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [public(LABELS), public(SCORES)]

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        spec, settings, checkpoint = bound.spec, bound.settings, bound.checkpoint
        entailment, contradiction = entailment_ids(checkpoint)
        tokenizer = written(
            ZeroShotWindowParameters(settings.hypothesis_template), WindowsParameters(max_windows(spec))
        )
        return tokenizer, ZeroShotParameters(entailment, contradiction, settings.multi_label).to_parameters()

    def card_lines(self, bound: Binding) -> list[str]:
        settings, checkpoint = bound.settings, bound.checkpoint
        entailment, contradiction = entailment_ids(checkpoint)
        labels = checkpoint.id2label
        return [
            labels_line(checkpoint),
            f"- zero-shot: hypothesis {settings.hypothesis_template!r}; entailment logit {entailment} "
            f"(`{labels[entailment]}`), contradiction {contradiction} (`{labels[contradiction]}`); "
            + (
                "multi-label: each label's softmax over [contradiction, entailment]"
                if settings.multi_label
                else "single-label: softmax of the entailment logits across the labels (one label: as multi-label)"
            ),
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForSequenceClassification

        entailment_ids(checkpoint)  # refuse a checkpoint that is no NLI model before loading it
        model = load_pretrained(AutoModelForSequenceClassification, checkpoint)
        return exportable(model, lambda outputs, mask: outputs.logits)
