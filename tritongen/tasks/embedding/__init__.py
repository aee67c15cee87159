"""Sentence embeddings: a bare encoder or decoder, pooled as its sentence-transformers files say.

Pooling (mean, CLS, max, last token) and the Dense modules after it run inside the exported graph; the
normalisation and the Matryoshka truncation (``DIMENSIONS``) in the postprocess step. Prompts declared in
``config_sentence_transformers.json`` are prepended by the tokenizer step (``PROMPT_NAME``).

A text longer than the model is cut there (``long_text: truncate``, ``TRUNCATED`` says so) or, with
``long_text: chunk``, embedded in overlapping windows (:class:`ChunkedEmbedding`) whose pooled embeddings the
postprocess step averages, weighted by the text tokens of each window, before it normalises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from tritongen import contract
from tritongen.buildspec.sections import TaskSettings
from tritongen.contract import DIMENSIONS, EMBEDDING, PROMPT_NAME, SENTENCE_EMBEDDING
from tritongen.errors import SpecError
from tritongen.gates.accuracy import CosineGate
from tritongen.parameters import (
    EmbeddingParameters,
    EnsembleParameters,
    StrideParameters,
    WindowsParameters,
    written,
)
from tritongen.pooling.methods import pooling_method
from tritongen.tasks._base import (
    TOKEN_COUNT_OUTPUT,
    TRUNCATED_OUTPUT,
    WINDOW_EXAMPLE,
    Binding,
    Task,
    TensorSpec,
    exportable,
    load_pretrained,
    max_windows,
    prompt_parameters,
)
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.embedding.settings import EmbeddingSettings

if TYPE_CHECKING:
    import torch

    from tritongen.buildspec import BuildSpec
    from tritongen.model.checkpoint import Checkpoint, Dense
    from tritongen.model.fold import GraphTail

__all__ = ["DIMENSIONS_INPUT", "PROMPT_INPUT", "WINDOW_TOKENS", "ChunkedEmbedding", "Embedding", "chunk_overlap"]

# Optional per-request inputs (a client that sends neither gets the checkpoint's defaults).
PROMPT_INPUT = public(PROMPT_NAME)
DIMENSIONS_INPUT = public(DIMENSIONS)
# Chunked builds: the text tokens (special tokens not counted) of each window, its weight in its text's mean.
WINDOW_TOKENS = TensorSpec(contract.WINDOW_TOKENS, "TYPE_INT64", (1,))


def chunk_overlap(settings: EmbeddingSettings | BuildSpec, window: int) -> int:
    """Tokens neighbouring windows of a chunked text share: ``chunk_overlap``, else a quarter window (at most 128).

    ``settings`` may be a whole build spec (its ``embedding`` section).
    """
    if not isinstance(settings, EmbeddingSettings):
        settings = Embedding().settings(settings)
    return settings.chunk_overlap if settings.chunk_overlap is not None else min(window // 4, 128)


@register_task
class Embedding(Task):
    """Sentence embeddings: ``TEXT`` -> ``EMBEDDING``."""

    name = "embedding"
    onnx_output = SENTENCE_EMBEDDING
    gate = CosineGate
    bench_baselines = True
    takes_token_ids = True
    postprocess_step = "tritongen.tasks.embedding.postprocess"
    section = "embedding"
    Settings = EmbeddingSettings
    # Families trained with a Matryoshka loss (Qwen3-Embedding, EmbeddingGemma): their embeddings can be cut to
    # their first N values, so the ensemble takes an optional DIMENSIONS (and EMBEDDING has a variable width).
    matryoshka_model_types: ClassVar[tuple[str, ...]] = ("gemma3_text", "qwen3")

    def for_settings(self, settings: TaskSettings) -> Task:
        """Texts in windows (:class:`ChunkedEmbedding`) with ``long_text: chunk``.

        A task built on this entry (another output than ``EMBEDDING``) does not know how to combine windows.
        """
        if not (isinstance(settings, EmbeddingSettings) and settings.long_text == "chunk"):
            return self
        if type(self) is not Embedding:
            raise SpecError(f"embedding long_text chunk is for the embedding task, not {self.name}; use truncate")
        return ChunkedEmbedding()

    def matryoshka(self, checkpoint: Checkpoint) -> bool:
        """Whether the build offers ``DIMENSIONS``."""
        return checkpoint.model_type in self.matryoshka_model_types

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        inputs = super().ensemble_inputs(checkpoint)
        if checkpoint.pooling.prompts:
            inputs.append(PROMPT_INPUT)
        if self.matryoshka(checkpoint):
            inputs.append(DIMENSIONS_INPUT)
        return inputs

    def tokenizer_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [t for t in self.ensemble_inputs(checkpoint) if t != DIMENSIONS_INPUT]  # the postprocess step reads it

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return super().postprocess_inputs(checkpoint) + ([DIMENSIONS_INPUT] if self.matryoshka(checkpoint) else [])

    def matches(self, checkpoint: Checkpoint) -> bool:
        if checkpoint.pooling.from_sentence_transformers:
            return True
        heads = ("For", "LMHead")
        return not checkpoint.architectures or all(not any(h in a for h in heads) for a in checkpoint.architectures)

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (checkpoint.pooling.width(checkpoint.hidden_size),)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        width = -1 if self.matryoshka(checkpoint) else checkpoint.pooling.width(checkpoint.hidden_size)
        return [public(EMBEDDING, (width,))]

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return EmbeddingParameters(normalize=checkpoint.pooling.normalize).to_parameters()

    def ensemble_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        """The pooling, by Text Embeddings Inference's name for it where it has one (``last_token``)."""
        pooling = {"lasttoken": "last_token"}.get(checkpoint.pooling.mode, checkpoint.pooling.mode)
        return EnsembleParameters(pooling=pooling).to_parameters()

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        checkpoint = bound.checkpoint
        pooling = checkpoint.pooling
        if pooling.splade is not None:  # asked for by --task embedding: its dense pooling would be made up
            raise SpecError(
                "this checkpoint is a sparse (SPLADE) encoder: it has no dense pooling to serve as embeddings; "
                "build it with --task sparse-embedding"
            )
        return (prompt_parameters(pooling) if pooling.prompts else {}), {}

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


class ChunkedEmbedding(Embedding):
    """Embeddings of long texts in windows (``long_text: chunk``): nothing is truncated.

    The tokenizer step splits each request's texts into overlapping windows of the model's length, each with the
    special tokens the model expects (``[CLS] ... [SEP]``); one request's windows go to the model step as one
    batch, which the model step's dynamic batcher joins with other requests' (as token classification's windows).
    The postprocess step averages each text's pooled window embeddings weighted by the text tokens of each
    window, then normalises and cuts (``DIMENSIONS``) as for a truncated text. Bound by :meth:`Embedding.bind`
    for that setting; not registered.
    """

    batched_io = False  # one text becomes as many model rows as it has windows
    truncates = False
    tokenizer_step = "tritongen.tasks.embedding.tokenizer"

    def for_settings(self, settings: TaskSettings) -> Task:
        return self

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        # TRUNCATED: always false, the contract kept; TOKEN_COUNT: each text's tokens, once each
        return [TRUNCATED_OUTPUT, TOKEN_COUNT_OUTPUT, WINDOW_EXAMPLE, WINDOW_TOKENS]

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [*super().postprocess_inputs(checkpoint), WINDOW_EXAMPLE, WINDOW_TOKENS]

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        if bound.spec.fold:
            raise SpecError(
                "embedding long_text chunk averages each text's windows in the postprocess step, which fold "
                "removes: build with fold off, or with long_text truncate"
            )
        overlap = chunk_overlap(bound.settings, bound.row_length)
        room = bound.row_length - int(bound.facts.get("special_tokens", "0"))
        if overlap >= room:
            raise SpecError(
                f"embedding chunk_overlap {overlap} must be below the {room} text tokens of a "
                f"{bound.row_length}-token window; lower it"
            )
        tokenizer, postprocess = super().step_parameters(bound)
        windows = written(StrideParameters(overlap), WindowsParameters(max_windows(bound.spec)))
        return {**tokenizer, **windows}, postprocess

    def graph_tail(self, checkpoint: Checkpoint) -> GraphTail | None:
        return None  # combining a text's windows is per-request logic

    def card_lines(self, bound: Binding) -> list[str]:
        overlap = chunk_overlap(bound.settings, bound.row_length)
        normalised = ", then L2-normalised" if bound.checkpoint.pooling.normalize else ""
        return [
            *super().card_lines(bound),
            f"- long texts (long_text chunk): windows of {bound.row_length} tokens, special tokens in each, "
            f"neighbours sharing {overlap} tokens; `EMBEDDING` is the mean of a text's pooled window embeddings "
            f"weighted by each window's text tokens (special tokens not counted){normalised}; `TRUNCATED` is "
            f"always false; one request's windows are one model batch (at most max_batch_size)",
        ]


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
