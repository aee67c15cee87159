"""Sentence embeddings: a bare encoder, pooled as its sentence-transformers files say."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tritongen.accuracy import CosineGate
from tritongen.tasks._base import Task, TensorSpec, exportable, load_pretrained
from tritongen.tasks._registry import register_task

if TYPE_CHECKING:
    import torch

    from tritongen.checkpoint import Checkpoint
    from tritongen.fold import GraphTail
    from tritongen.spec import BuildSpec

__all__ = ["Embedding"]


@register_task
class Embedding(Task):
    """Sentence embeddings: ``TEXT`` -> ``EMBEDDING``."""

    name = "embedding"
    onnx_output = "sentence_embedding"
    detect_order = 90  # a bare encoder is the fallback
    gate = CosineGate
    bench_baselines = True
    postprocess_step = "tritongen.tasks.embedding.postprocess"

    def matches(self, checkpoint: Checkpoint) -> bool:
        if checkpoint.pooling.from_sentence_transformers:
            return True
        heads = ("For", "LMHead")
        return not checkpoint.architectures or all(not any(h in a for h in heads) for a in checkpoint.architectures)

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (checkpoint.hidden_size,)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [TensorSpec("EMBEDDING", "TYPE_FP32", (checkpoint.hidden_size,))]

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return {"normalize": "true" if checkpoint.pooling.normalize else "false"}

    def graph_tail(self, checkpoint: Checkpoint) -> GraphTail:
        from tritongen.fold import embedding_tail

        return embedding_tail(self.onnx_output, checkpoint.hidden_size, normalize=checkpoint.pooling.normalize)

    def card_lines(self, spec: BuildSpec, settings: Any, checkpoint: Checkpoint, row_length: int) -> list[str]:
        return [f"- pooling: {checkpoint.pooling.mode}, normalised: {checkpoint.pooling.normalize}"]

    def max_length(self, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None) -> int:
        limit = super().max_length(checkpoint, position_limit, tokenizer_max)
        if checkpoint.pooling.max_seq_length:
            limit = min(limit, checkpoint.pooling.max_seq_length)
        return limit

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        import torch

        # pooling reads the hidden states, never a pooler
        model = load_pretrained(_encoder_class(checkpoint), checkpoint, unused=("pooler.",))
        mode = checkpoint.pooling.mode

        def pool(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = outputs.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            if mode == "cls":
                return hidden[:, 0]
            if mode == "max":
                return torch.where(mask > 0, hidden, torch.full_like(hidden, -1e9)).max(dim=1).values
            return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)

        return exportable(model, pool)


def _encoder_class(checkpoint: Checkpoint) -> Any:
    """The text encoder transformers has for the checkpoint's type, else its bare model (``AutoModel``).

    For an encoder-decoder that is the encoder alone (T5's ``T5EncoderModel``, as sentence-transformers saves it).
    """
    from transformers import CONFIG_MAPPING, AutoModel, AutoModelForTextEncoding

    if checkpoint.trust_remote_code:  # the class the checkpoint's own code declares, when it declares one
        for auto_class in (AutoModelForTextEncoding, AutoModel):
            if auto_class.__name__ in checkpoint.auto_map:
                return auto_class
    known = checkpoint.model_type in CONFIG_MAPPING
    if known and CONFIG_MAPPING[checkpoint.model_type] in AutoModelForTextEncoding._model_mapping:
        return AutoModelForTextEncoding
    return AutoModel
