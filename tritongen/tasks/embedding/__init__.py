"""Sentence embeddings: a bare encoder or decoder, pooled as its sentence-transformers files say.

Pooling (mean, CLS, max, last token) and the Dense modules after it run inside the exported graph; the
normalisation and the Matryoshka truncation (``DIMENSIONS``) in the postprocess step. Prompts declared in
``config_sentence_transformers.json`` are prepended by the tokenizer step (``PROMPT_NAME``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from tritongen.gates.accuracy import CosineGate
from tritongen.pooling.methods import pooling_method
from tritongen.tasks._base import Binding, Task, TensorSpec, exportable, load_pretrained
from tritongen.tasks._registry import register_task

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint, Dense
    from tritongen.model.fold import GraphTail

__all__ = ["DIMENSIONS", "PROMPT_NAME", "Embedding"]

# Optional per-request inputs (a client that sends neither gets the checkpoint's defaults).
PROMPT_NAME = TensorSpec("PROMPT_NAME", "TYPE_STRING", (1,), optional=True)
DIMENSIONS = TensorSpec("DIMENSIONS", "TYPE_INT32", (1,), optional=True)


@register_task
class Embedding(Task):
    """Sentence embeddings: ``TEXT`` -> ``EMBEDDING``."""

    name = "embedding"
    onnx_output = "sentence_embedding"
    detect_order = 90  # a bare encoder is the fallback
    gate = CosineGate
    bench_baselines = True
    postprocess_step = "tritongen.tasks.embedding.postprocess"
    # Families trained with a Matryoshka loss (Qwen3-Embedding, EmbeddingGemma): their embeddings can be cut to
    # their first N values, so the ensemble takes an optional DIMENSIONS (and EMBEDDING has a variable width).
    matryoshka_model_types: ClassVar[tuple[str, ...]] = ("gemma3_text", "qwen3")

    def matryoshka(self, checkpoint: Checkpoint) -> bool:
        """Whether the build offers ``DIMENSIONS``."""
        return checkpoint.model_type in self.matryoshka_model_types

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        inputs = super().ensemble_inputs(checkpoint)
        if checkpoint.pooling.prompts:
            inputs.append(PROMPT_NAME)
        if self.matryoshka(checkpoint):
            inputs.append(DIMENSIONS)
        return inputs

    def tokenizer_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [t for t in self.ensemble_inputs(checkpoint) if t != DIMENSIONS]  # the postprocess step reads it

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return super().postprocess_inputs(checkpoint) + ([DIMENSIONS] if self.matryoshka(checkpoint) else [])

    def matches(self, checkpoint: Checkpoint) -> bool:
        if checkpoint.pooling.from_sentence_transformers:
            return True
        heads = ("For", "LMHead")
        return not checkpoint.architectures or all(not any(h in a for h in heads) for a in checkpoint.architectures)

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (checkpoint.pooling.width(checkpoint.hidden_size),)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        width = -1 if self.matryoshka(checkpoint) else checkpoint.pooling.width(checkpoint.hidden_size)
        return [TensorSpec("EMBEDDING", "TYPE_FP32", (width,))]

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return {"normalize": "true" if checkpoint.pooling.normalize else "false"}

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        checkpoint = bound.checkpoint
        pooling = checkpoint.pooling
        tokenizer = {}
        if pooling.prompts:
            tokenizer = {
                "prompts": json.dumps(dict(pooling.prompts)),
                "default_prompt_name": pooling.default_prompt_name or "",
            }
        return tokenizer, {}

    def graph_tail(self, checkpoint: Checkpoint) -> GraphTail | None:
        if self.matryoshka(checkpoint):
            return None  # DIMENSIONS is per-request logic: the postprocess step stays
        from tritongen.pooling.heads import embedding_tail

        width = checkpoint.pooling.width(checkpoint.hidden_size)
        return embedding_tail(self.onnx_output, width, normalize=checkpoint.pooling.normalize)

    def card_lines(self, bound: Binding) -> list[str]:
        checkpoint = bound.checkpoint
        pooling = checkpoint.pooling
        dense = " -> ".join(f"Dense {d.in_features}->{d.out_features}" for d in pooling.dense)
        lines = [f"- pooling: {pooling.mode}{', ' + dense if dense else ''}, normalised: {pooling.normalize}"]
        if pooling.prompts:
            names = ", ".join(f"`{name}`" for name, _ in pooling.prompts)
            lines.append(f"- prompts (`PROMPT_NAME`): {names}; default: {pooling.default_prompt_name or 'none'}")
        if self.matryoshka(checkpoint):
            lines.append("- `DIMENSIONS`: the embedding cut to its first N values and renormalised (Matryoshka)")
        return lines

    def max_length(self, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None) -> int:
        limit = super().max_length(checkpoint, position_limit, tokenizer_max)
        if checkpoint.pooling.max_seq_length:
            limit = min(limit, checkpoint.pooling.max_seq_length)
        return limit

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        import torch

        # pooling reads the hidden states, never a pooler
        model = load_pretrained(_encoder_class(checkpoint), checkpoint, unused=("pooler.",))
        method = pooling_method(checkpoint.pooling.mode)
        dense = torch.nn.Sequential(*(_linear(d) for d in checkpoint.pooling.dense)).eval()

        def pool(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            return dense(method(outputs.last_hidden_state, attention_mask))

        module = exportable(model, pool)
        module.dense = dense  # registered, so the Dense weights travel with the exported module
        return module


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


def _linear(layer: Dense) -> torch.nn.Module:
    """A sentence-transformers Dense module (identity activation) as ``torch.nn.Linear``."""
    import torch
    from safetensors.torch import load_file

    linear = torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias)
    weights = load_file(str(layer.path / "model.safetensors"))
    linear.load_state_dict({k.removeprefix("linear."): v for k, v in weights.items()})
    return linear
