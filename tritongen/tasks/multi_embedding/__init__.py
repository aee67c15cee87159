"""Dense, sparse and ColBERT embeddings of one encoder (BGE-M3): one ensemble, three kinds of output.

The checkpoint is a bare encoder (BGE-M3's ``XLMRobertaModel``) with FlagEmbedding's two head files beside it:
``sparse_linear.pt`` (Linear(hidden, 1)) and ``colbert_linear.pt`` (Linear(hidden, colbert dim)), each a saved
state dict. The exported graph runs the encoder and both heads and returns one packed row per token
(:func:`pack`); the postprocess step (``postprocess.py``) turns it into ``EMBEDDING``, ``SPARSE_INDICES``/
``SPARSE_VALUES`` and ``COLBERT``/``COLBERT_LENGTH`` as FlagEmbedding's ``BGEM3FlagModel`` computes them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritongen.contract import ATTENTION_MASK, COLBERT, COLBERT_LENGTH, EMBEDDING, INPUT_IDS
from tritongen.errors import CheckpointError
from tritongen.gates.accuracy import TokenCosineGate
from tritongen.parameters import MultiVectorParameters
from tritongen.tasks._base import Binding, TensorSpec, exportable, load_pretrained
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public
from tritongen.tasks.sparse_embedding import SPARSE_OUTPUTS, SparseTask, sparse_card_line, sparse_parameters
from tritongen.tasks.sparse_embedding.settings import SparseSettings

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint

__all__ = ["COLBERT_LENGTH_OUTPUT", "HEAD_FILES", "MultiEmbedding", "pack"]

HEAD_FILES = ("sparse_linear.pt", "colbert_linear.pt")
COLBERT_LENGTH_OUTPUT = public(COLBERT_LENGTH)
# The special tokens FlagEmbedding's _process_token_weights leaves out of the sparse weights.
UNUSED_TOKENS = ("cls_token", "eos_token", "pad_token", "unk_token")


@register_task
class MultiEmbedding(SparseTask):
    """``TEXT`` -> ``EMBEDDING``, ``SPARSE_INDICES``, ``SPARSE_VALUES``, ``COLBERT``, ``COLBERT_LENGTH``."""

    name = "multi-embedding"
    onnx_output = "token_vectors"
    gate = TokenCosineGate
    postprocess_step = "tritongen.tasks.multi_embedding.postprocess"

    def matches(self, checkpoint: Checkpoint) -> bool:
        return all((checkpoint.path / name).is_file() for name in HEAD_FILES)

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (-1, 1 + max(checkpoint.hidden_size, _colbert_dim(checkpoint)))

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        tokens = [TensorSpec(name, "TYPE_INT64", (-1,)) for name in (INPUT_IDS, ATTENTION_MASK)]
        return super().postprocess_inputs(checkpoint) + tokens

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            public(EMBEDDING, (checkpoint.hidden_size,)),
            *SPARSE_OUTPUTS,
            public(COLBERT, (-1, _colbert_dim(checkpoint))),
            COLBERT_LENGTH_OUTPUT,
        ]

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        checkpoint = bound.checkpoint
        assert isinstance(bound.settings, SparseSettings)
        heads = MultiVectorParameters(checkpoint.hidden_size, _colbert_dim(checkpoint), _unused_ids(checkpoint))
        return {}, {**heads.to_parameters(), **sparse_parameters(bound.settings)}

    def card_lines(self, bound: Binding) -> list[str]:
        assert isinstance(bound.settings, SparseSettings)
        return [
            "- dense (`EMBEDDING`): the first token's state, normalised",
            "- sparse: relu(sparse_linear) per token, the max per token id, leaving out the special ids "
            f"{_unused_ids(bound.checkpoint)}",
            sparse_card_line(bound.settings),
            f"- ColBERT (`COLBERT`, `COLBERT_LENGTH`): colbert_linear of every real token but the first, "
            f"{_colbert_dim(bound.checkpoint)} values each, normalised",
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModel

        model = load_pretrained(AutoModel, checkpoint, unused=("pooler.",))
        sparse_linear, colbert_linear = (_linear(checkpoint, name) for name in HEAD_FILES)
        if sparse_linear.out_features != 1:
            raise CheckpointError(
                f"{{path}} gives {sparse_linear.out_features} values per token; a sparse weight is one",
                path=checkpoint.path / HEAD_FILES[0],
            )

        def heads(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            return pack(outputs.last_hidden_state, sparse_linear, colbert_linear)

        module = exportable(model, heads)
        module.sparse_linear, module.colbert_linear = sparse_linear, colbert_linear  # travel with the export
        return module


def pack(hidden: torch.Tensor, sparse_linear: torch.nn.Module, colbert_linear: torch.nn.Module) -> torch.Tensor:
    """One row per token, [B, T, 1 + max(H, D)]: its sparse weight, then a vector (zero-padded to the width).

    Token 0's vector is its hidden state (the dense embedding, before normalising); every other token's is its
    ColBERT vector (``colbert_linear``, before masking and normalising). Padding tokens are left for the
    postprocess step, which reads the attention mask.
    """
    import torch

    sparse = torch.relu(sparse_linear(hidden))
    colbert = colbert_linear(hidden[:, 1:])
    width = max(hidden.shape[-1], colbert.shape[-1])
    dense = torch.nn.functional.pad(hidden[:, :1], (0, width - hidden.shape[-1]))
    colbert = torch.nn.functional.pad(colbert, (0, width - colbert.shape[-1]))
    return torch.cat([sparse, torch.cat([dense, colbert], dim=1)], dim=-1)


@lru_cache(maxsize=16)
def _head_weights(path: Path) -> dict[str, Any]:
    """A head file's state dict (``weight``, ``bias``); a missing or unreadable one is the checkpoint's error."""
    import torch

    if not path.is_file():
        raise CheckpointError(
            f"{{path}} is missing: multi-embedding needs {' and '.join(HEAD_FILES)} beside the checkpoint, "
            "as FlagEmbedding saves BGE-M3",
            path=path,
        )
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types for damaged files
        raise CheckpointError(f"cannot read {{path}}: {str(exc).splitlines()[0]}", path=path) from None
    if not isinstance(state, dict) or getattr(state.get("weight"), "ndim", 0) != 2:
        raise CheckpointError("{path} is not the state dict of a torch.nn.Linear", path=path)
    return dict(state)


def _linear(checkpoint: Checkpoint, name: str) -> torch.nn.Module:
    """A head file as ``torch.nn.Linear``; its input must be the encoder's width."""
    import torch

    state = _head_weights(checkpoint.path / name)
    out_features, in_features = state["weight"].shape
    if in_features != checkpoint.hidden_size:
        raise CheckpointError(
            f"{{path}} reads {in_features} values; the encoder gives {checkpoint.hidden_size}",
            path=checkpoint.path / name,
        )
    linear = torch.nn.Linear(in_features, out_features, bias="bias" in state)
    linear.load_state_dict(state)
    return linear.eval()


def _colbert_dim(checkpoint: Checkpoint) -> int:
    """The width of a ColBERT vector: ``colbert_linear.pt``'s output."""
    return int(_head_weights(checkpoint.path / HEAD_FILES[1])["weight"].shape[0])


def _unused_ids(checkpoint: Checkpoint) -> list[int]:
    """The ids of the tokenizer's cls, eos, pad and unk tokens, as FlagEmbedding finds them."""
    from tritongen.tasks._inputs import TextInputs

    tokenizer = TextInputs().load(checkpoint)
    named = tokenizer.special_tokens_map
    return sorted({int(tokenizer.convert_tokens_to_ids(str(named[role]))) for role in UNUSED_TOKENS if role in named})
