r"""Reranking with a decoder reranker (Qwen3-Reranker style): ``TEXT`` (query) + ``TEXT_PAIR`` (document) -> ``SCORE``.

As the Qwen3-Reranker model card specifies: the query and document are put into
``<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}``, tokenised and truncated to fit, and the
prompt's prefix and suffix token ids go around it; the score is P(yes), the softmax of the ``no`` and ``yes``
logits at the last token. The graph outputs only those two logits, taken at the last real token (found from the
attention mask, so the padding side does not matter; rows are right-padded, which is exact for a causal model).
BERT-style cross-encoders (one logit) stay ``text-pair-classification``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tritongen.contract import SCORE, TEXT, TEXT_PAIR
from tritongen.errors import CheckpointError, UnsupportedModelError
from tritongen.parameters import RerankPromptParameters
from tritongen.tasks._base import Binding, Task, TensorSpec, load_pretrained
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.reranking.settings import DEFAULT_INSTRUCTION, RerankingSettings

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint

__all__ = [
    "DEFAULT_INSTRUCTION",
    "PROMPT_PREFIX",
    "PROMPT_SUFFIX",
    "Reranking",
    "RerankingSettings",
    "format_pair",
    "last_token_answers",
]

PROMPT_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
)
PROMPT_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
ANSWERS = ("no", "yes")  # the two logits the graph outputs, in this order


def format_pair(instruction: str, query: str, document: str) -> str:
    """The model card's ``format_instruction``: what goes between the prompt's prefix and suffix."""
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"


@dataclass(frozen=True)
class _PromptTokens:
    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    answers: tuple[int, int]  # the no and yes token ids


def _prompt_tokens(path: str) -> _PromptTokens:
    """The prompt's prefix and suffix ids and the answer ids, from the checkpoint's own tokenizer (as the card)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # tokenizer loading raises many types for bad files
        raise CheckpointError(f"cannot load the tokenizer of {{path}}: {str(exc).splitlines()[0]}", path=path) from None
    vocab = tokenizer.get_vocab()
    missing = [word for word in ANSWERS if word not in vocab]
    if missing:
        raise UnsupportedModelError(
            f"a reranker's tokenizer needs `yes` and `no` as single tokens; {{path}} lacks {missing}", path=path
        )
    return _PromptTokens(
        prefix=tuple(tokenizer.encode(PROMPT_PREFIX, add_special_tokens=False)),
        suffix=tuple(tokenizer.encode(PROMPT_SUFFIX, add_special_tokens=False)),
        answers=(vocab["no"], vocab["yes"]),
    )


@register_task
class Reranking(Task):
    """Decoder reranking: P(yes) that the document meets the query, from the last token's yes/no logits."""

    name = "reranking"
    onnx_output = "answer_logits"
    head = "ForCausalLM"
    pair_input = True  # parity and the accuracy gate feed text pairs
    tokenizer_step = "tritongen.tasks.reranking.tokenizer"
    postprocess_step = "tritongen.tasks.reranking.postprocess"
    section = "reranking"
    Settings = RerankingSettings

    def matches(self, checkpoint: Checkpoint) -> bool:
        return False  # a causal LM may be anything: reranking is asked for by name

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (len(ANSWERS),)

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [public(TEXT), public(TEXT_PAIR)]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [public(SCORE)]

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        settings, checkpoint, row_length = bound.settings, bound.checkpoint, bound.row_length
        tokens = _prompt_tokens(str(checkpoint.path))
        budget = row_length - len(tokens.prefix) - len(tokens.suffix)
        if budget < 8:
            raise UnsupportedModelError(
                f"the reranker prompt takes {len(tokens.prefix) + len(tokens.suffix)} of the {row_length} tokens a "
                "row holds, too few are left for the query and document"
            )
        return RerankPromptParameters(settings.instruction, tokens.prefix, tokens.suffix).to_parameters(), {}

    def card_lines(self, bound: Binding) -> list[str]:
        settings, checkpoint = bound.settings, bound.checkpoint
        tokens = _prompt_tokens(str(checkpoint.path))
        return [
            f"- reranker prompt: the Qwen3-Reranker template, {len(tokens.prefix)} prefix and {len(tokens.suffix)} "
            f"suffix tokens; instruction {settings.instruction!r}",
            f"- score: P(yes) = softmax of the `no` ({tokens.answers[0]}) and `yes` ({tokens.answers[1]}) logits "
            "at the last real token",
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        answers = _prompt_tokens(str(checkpoint.path)).answers  # refuse a tokenizer without yes/no first
        return last_token_answers(load_pretrained(AutoModelForCausalLM, checkpoint), answers)


def last_token_answers(model: Any, answers: tuple[int, int]) -> torch.nn.Module:
    """``forward(input_ids, attention_mask)`` -> the [no, yes] logits at each row's last real token.

    The last real token is the last 1 of the attention mask, whichever side pads; only its hidden state goes
    through the two rows of the LM head that matter.
    """
    import torch

    class LastTokenAnswers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.register_buffer("answers", torch.tensor(answers, dtype=torch.long), persistent=False)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.model.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0]
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            # ArgMax over int32: the container's ONNX Runtime 1.19 has no int64 kernel, and a float cast could
            # become FP16 (inexact past 2048 tokens) in an FP16 build.
            last = (positions * attention_mask).to(torch.int32).argmax(dim=1)
            last_hidden = hidden.gather(1, last.view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])).squeeze(1)
            head = self.model.lm_head
            logits = last_hidden @ head.weight.index_select(0, self.answers).T
            if getattr(head, "bias", None) is not None:
                logits = logits + head.bias.index_select(0, self.answers)
            return logits

    return LastTokenAnswers().eval()
