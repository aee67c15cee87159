"""Extractive QA: ``QUESTION`` + ``CONTEXT`` -> ``ANSWER``, ``SCORE``, ``START``, ``END``.

Long contexts become several windows, so one request is several model rows: the model's start
and end logits are exported as one ``span_logits`` tensor [batch, seq, 2].
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tritongen.contract import ANSWER, ATTENTION_MASK, CONTEXT, END, QUESTION, SCORE, START
from tritongen.errors import UnsupportedModelError
from tritongen.gates.accuracy import SpanGate
from tritongen.parameters import QaAnswerParameters, QaWindowParameters, WindowsParameters, written
from tritongen.tasks import _base as base
from tritongen.tasks._base import Binding, Task, TensorSpec
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.question_answering.qa import QAInputError, resolve_window_sizes
from tritongen.tasks.question_answering.settings import QuestionAnsweringSettings

if TYPE_CHECKING:
    import torch

    from tritongen.buildspec import BuildSpec
    from tritongen.model.checkpoint import Checkpoint

__all__ = ["QuestionAnswering", "QuestionAnsweringSettings"]


@register_task
class QuestionAnswering(Task):
    """Extractive QA: the best answer of each pair over all its windows."""

    name = "question-answering"
    onnx_output = "span_logits"
    batched_io = False
    truncates = False  # long contexts become windows
    pair_input = True
    gate = SpanGate
    helper_modules = ("tritongen.tasks.question_answering.qa",)
    head = "ForQuestionAnswering"
    tokenizer_step = "tritongen.tasks.question_answering.tokenizer"
    postprocess_step = "tritongen.tasks.question_answering.postprocess"
    section = "question_answering"
    Settings = QuestionAnsweringSettings

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (-1, 2)

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [public(QUESTION), public(CONTEXT)]

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            TensorSpec(ATTENTION_MASK, "TYPE_INT64", (-1,)),  # even for models that do not take it
            base.WINDOW_EXAMPLE,
            TensorSpec("sequence_ids", "TYPE_INT64", (-1,)),
            TensorSpec("p_mask", "TYPE_BOOL", (-1,)),
            *base.TOKEN_METADATA[1:],  # word_ids, offsets
        ]

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            public(CONTEXT),
            *super().postprocess_inputs(checkpoint),
            *self.tokenizer_outputs(checkpoint),
        ]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            public(ANSWER),
            public(SCORE),
            public(START),
            public(END),
        ]

    def row_length(
        self,
        spec: BuildSpec,
        settings: QuestionAnsweringSettings,
        checkpoint: Checkpoint,
        position_limit: int,
        tokenizer_max: int | None,
    ) -> int:
        """The window length: ``max_seq_len``, else v4's min(model limit, 384)."""
        limit = self.max_length(checkpoint, position_limit, tokenizer_max)
        if settings.max_seq_len is not None and settings.max_seq_len > limit:
            raise UnsupportedModelError(
                f"qa_max_seq_len {settings.max_seq_len} is above the model's limit of {limit} tokens"
            )
        try:
            window, _ = resolve_window_sizes(settings.max_seq_len, settings.doc_stride, limit)
        except QAInputError as exc:
            raise UnsupportedModelError(f"QA windows: {exc}") from None
        return window

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        spec, settings, row_length, facts = bound.spec, bound.settings, bound.row_length, bound.facts
        cls_id = facts.get("cls_id", "")
        windows = QaWindowParameters(row_length, _doc_stride(settings, row_length), int(cls_id) if cls_id else None)
        tokenizer = written(windows, WindowsParameters(base.max_windows(spec), mode="qa"))
        answers = QaAnswerParameters(settings.max_answer_len, settings.handle_impossible_answer)
        return tokenizer, answers.to_parameters()

    def card_lines(self, bound: Binding) -> list[str]:
        settings, row_length = bound.settings, bound.row_length
        return [
            f"- windows: {row_length} tokens, stride {_doc_stride(settings, row_length)}; "
            f"longest answer {settings.max_answer_len} tokens; no answer allowed: {settings.handle_impossible_answer}"
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        import torch
        from transformers import AutoModelForQuestionAnswering

        model = base.load_pretrained(AutoModelForQuestionAnswering, checkpoint)

        def spans(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            return torch.stack([outputs.start_logits, outputs.end_logits], dim=-1)

        return base.exportable(model, spans)


def _doc_stride(settings: QuestionAnsweringSettings, window: int) -> int:
    return resolve_window_sizes(window, settings.doc_stride)[1]
