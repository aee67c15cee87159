"""Classification of a text pair (NLI, cross-encoder re-rankers): ``TEXT`` and ``TEXT_PAIR``.

The steps are classification's: the plain tokenizer reads ``TEXT_PAIR`` when its config lists it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.contract import TEXT, TEXT_PAIR
from tritongen.tasks._base import TensorSpec
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.classification import Classification

if TYPE_CHECKING:
    from tritongen.model.checkpoint import Checkpoint

__all__ = ["TextPairClassification"]

_PAIR_LABELS = {"entailment", "contradiction", "not_entailment"}


@register_task
class TextPairClassification(Classification):
    """Classification of a text pair: detected from NLI labels or a cross-encoder's config."""

    name = "text-pair-classification"
    pair_input = True
    bench_baselines = False

    def matches(self, checkpoint: Checkpoint) -> bool:
        labels = {label.lower() for label in checkpoint.id2label.values()}
        cross_encoder = "sbert_ce_default_activation_function" in checkpoint.config or (
            (checkpoint.config.get("sentence_transformers") or {}).get("model_type") == "CrossEncoder"
        )
        return super().matches(checkpoint) and (cross_encoder or bool(labels & _PAIR_LABELS))

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return self.text_inputs(public(TEXT), public(TEXT_PAIR))
