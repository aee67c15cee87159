"""Sparse (SPLADE) embeddings: a ``*ForMaskedLM`` checkpoint, pooled as sentence-transformers' ``SparseEncoder`` does.

The pooling runs inside the exported graph (``tritongen.pooling.methods.splade``): the model step returns one
vocabulary-sized row of weights per text. The postprocess step keeps the non-zero ones (or the ``sparse`` section's
``top_k`` largest, or those above its ``threshold``) as ``SPARSE_INDICES`` and ``SPARSE_VALUES``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tritongen.contract import PROMPT_NAME, SPARSE_INDICES, SPARSE_VALUES
from tritongen.gates.accuracy import CosineGate
from tritongen.parameters import EnsembleParameters, SelectionParameters
from tritongen.tasks._base import Binding, Task, TensorSpec, exportable, load_pretrained, prompt_parameters
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.sparse_embedding.settings import SparseSettings

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint

__all__ = ["PROMPT_INPUT", "SPARSE_OUTPUTS", "SparseEmbedding", "SparseTask", "sparse_parameters"]

# Per text, indices ascending; the texts of one request padded to the longest with index -1 and value 0.
SPARSE_OUTPUTS = (public(SPARSE_INDICES), public(SPARSE_VALUES))
PROMPT_INPUT = public(PROMPT_NAME)


def sparse_parameters(settings: SparseSettings) -> dict[str, str]:
    """The ``sparse`` section as the postprocess step's parameters."""
    return SelectionParameters(threshold=settings.threshold, top_k=settings.top_k).to_parameters()


def sparse_card_line(settings: SparseSettings) -> str:
    """The model card's line saying which weights are kept."""
    kept = "every non-zero weight" if not settings.threshold else f"weights above {settings.threshold}"
    return f"- sparse weights kept: {kept}" + (f", at most the {settings.top_k} largest" if settings.top_k else "")


class SparseTask(Task):
    """The base of the tasks that return sparse weights: the ``sparse`` section, the step helper that applies it.

    Not registered itself: each subclass is a task entry, detected where ``DETECTION_ORDER`` names it.
    """

    helper_modules = ("tritongen.steps.sparse",)
    section = "sparse"
    Settings = SparseSettings
    takes_token_ids = True

    def max_length(self, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None) -> int:
        """The model's limit, lowered to sentence-transformers' ``max_seq_length`` where the checkpoint has one.

        Both sparse layouts are sentence-transformers': SPLADE's ``SparseEncoder``, and BGE-M3's files (8192).
        """
        limit = super().max_length(checkpoint, position_limit, tokenizer_max)
        return min(limit, checkpoint.pooling.max_seq_length or limit)


@register_task
class SparseEmbedding(SparseTask):
    """Sparse embeddings: ``TEXT`` -> ``SPARSE_INDICES``, ``SPARSE_VALUES``."""

    name = "sparse-embedding"
    onnx_output = "sparse_weights"
    head = "ForMaskedLM"
    gate = CosineGate
    postprocess_step = "tritongen.tasks.sparse_embedding.postprocess"

    def matches(self, checkpoint: Checkpoint) -> bool:
        # Only the sentence-transformers layout says so: a bare *ForMaskedLM is a fill-mask model.
        return checkpoint.pooling.splade is not None

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return super().ensemble_inputs(checkpoint) + ([PROMPT_INPUT] if _prompts(checkpoint) else [])

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (int(checkpoint.config["vocab_size"]),)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return list(SPARSE_OUTPUTS)

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        tokenizer = prompt_parameters(bound.checkpoint.pooling) if _prompts(bound.checkpoint) else {}
        assert isinstance(bound.settings, SparseSettings)
        return tokenizer, sparse_parameters(bound.settings)

    def card_lines(self, bound: Binding) -> list[str]:
        splade = _splade(bound.checkpoint)
        assert isinstance(bound.settings, SparseSettings)
        return [
            f"- SPLADE pooling: {splade.strategy} over the real tokens of log(1 + {splade.activation}(MLM logits))",
            sparse_card_line(bound.settings),
        ]

    def ensemble_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return EnsembleParameters(pooling="splade").to_parameters()

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForMaskedLM

        from tritongen.pooling.methods import splade

        model = load_pretrained(AutoModelForMaskedLM, checkpoint)
        pooling = _splade(checkpoint)

        def pool(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            return splade(outputs.logits, attention_mask, pooling.strategy, pooling.activation)

        return exportable(model, pool)


def _splade(checkpoint: Checkpoint) -> Any:
    """The checkpoint's SpladePooling, else sentence-transformers' default (max, relu)."""
    from tritongen.model.checkpoint import Splade

    return checkpoint.pooling.splade or Splade()


def _prompts(checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint declares a prompt that adds text (SparseEncoder saves empty ones by default)."""
    return any(text for _, text in checkpoint.pooling.prompts)
