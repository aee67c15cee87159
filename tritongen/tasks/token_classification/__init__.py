"""Token classification (NER): ``TEXT`` -> ``ENTITIES``, a JSON list as the transformers pipeline returns.

Long texts become the pipeline's overlapping windows (one request, several model rows): nothing is cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.contract import ENTITIES, INPUT_IDS, LOGITS, TEXT
from tritongen.errors import SpecError
from tritongen.gates.accuracy import TokenLabelGate
from tritongen.parameters import (
    LabelsParameters,
    NerParameters,
    StrideParameters,
    TokenizerFileParameters,
    WindowsParameters,
    written,
)
from tritongen.tasks._base import (
    TOKEN_METADATA,
    WINDOW_EXAMPLE,
    Binding,
    Task,
    TensorSpec,
    exportable,
    labels_line,
    load_pretrained,
    max_windows,
)
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.token_classification.settings import TokenClassificationSettings

if TYPE_CHECKING:
    import torch

    from tritongen.buildspec import BuildSpec
    from tritongen.model.checkpoint import Checkpoint

__all__ = ["TokenClassification", "TokenClassificationSettings", "stride_of"]


def stride_of(settings: TokenClassificationSettings | BuildSpec, window: int) -> int:
    """Tokens neighbouring NER windows share: ``stride``, else a quarter window (at most 128); 0 for ``none``.

    The pipeline refuses a stride with ``none`` (it could not merge repeated tokens), so ``none`` gets
    windows that do not overlap. ``settings`` may be a whole build spec (its ``token_classification`` section).
    """
    if not isinstance(settings, TokenClassificationSettings):
        settings = TokenClassification().settings(settings)
    if settings.stride is not None:
        return settings.stride
    return 0 if settings.aggregation_strategy == "none" else min(window // 4, 128)


@register_task
class TokenClassification(Task):
    """Token classification: one request's windows are decoded together into entities."""

    name = "token-classification"
    onnx_output = LOGITS
    gate = TokenLabelGate
    helper_modules = ("tritongen.tasks.token_classification.ner",)
    head = "ForTokenClassification"
    batched_io = False
    truncates = False
    tokenizer_step = "tritongen.tasks.token_classification.tokenizer"
    postprocess_step = "tritongen.tasks.token_classification.postprocess"
    postprocess_files = ("tokenizer.json",)
    section = "token_classification"
    Settings = TokenClassificationSettings

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (-1, len(checkpoint.id2label))

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [*TOKEN_METADATA, WINDOW_EXAMPLE]

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            public(TEXT),
            *super().postprocess_inputs(checkpoint),
            TensorSpec(INPUT_IDS, "TYPE_INT64", (-1,)),
            *self.tokenizer_outputs(checkpoint),
        ]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [public(ENTITIES)]  # JSON list of entities

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return written(LabelsParameters(), TokenizerFileParameters())

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        spec, settings, row_length, facts = bound.spec, bound.settings, bound.row_length, bound.facts
        stride = stride_of(settings, row_length)
        room = row_length - int(facts.get("special_tokens", "0"))
        if stride >= room:
            raise SpecError(
                f"ner_stride {stride} must be below the {room} text tokens of a {row_length}-token window; lower it"
            )
        tokenizer = written(StrideParameters(stride), WindowsParameters(max_windows(spec), mode="windows"))
        postprocess = NerParameters(settings.aggregation_strategy, facts.get("unk_token") or None)
        return tokenizer, postprocess.to_parameters()

    def card_lines(self, bound: Binding) -> list[str]:
        settings, checkpoint, row_length = bound.settings, bound.checkpoint, bound.row_length
        return [
            labels_line(checkpoint),
            f"- aggregation strategy: {settings.aggregation_strategy} (ignored labels: O)",
            f"- long texts: windows of {row_length} tokens sharing {stride_of(settings, row_length)} tokens, "
            "entities merged as the transformers pipeline does with `stride` (nothing is truncated)",
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForTokenClassification

        model = load_pretrained(AutoModelForTokenClassification, checkpoint)
        return exportable(model, lambda outputs, mask: outputs.logits)
