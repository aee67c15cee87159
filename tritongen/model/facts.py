"""What the loaded PyTorch model itself says about its inputs: which tensors it takes and how many tokens.

Both facts come from the model, never from the tokenizer's config: transformers 5 saves tokenizers
without ``model_input_names`` (it then reports ``input_ids`` and ``attention_mask`` only, even for a
BERT that embeds two segments) and with ``model_max_length`` 1e30 when none was declared.

* **Inputs**: ``input_ids`` and ``attention_mask``, plus ``token_type_ids`` when the model's
  ``forward`` takes it *and* it embeds more than one segment (``type_vocab_size > 1``, else the size
  of its token-type embedding). RoBERTa-likes accept the argument but have one type: feeding the
  tokenizer's type ids (1 for the second segment) would index past their embedding.
* **Position limit**: the longest input the model runs, from its own position scheme. A learned
  absolute position embedding with ``padding_idx`` numbers positions from ``padding_idx + 1``
  (RoBERTa, XLM-R, CamemBERT, MPNet), so it holds ``num_embeddings - padding_idx - 1`` tokens;
  without ``padding_idx`` it holds ``num_embeddings``. Relative or rotary schemes have no table;
  there the trained context (``max_position_embeddings``) applies. The result is then proven by
  running the model once at that length, and lowered until it runs if the scheme was not as read.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from tritongen.contract import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS
from tritongen.errors import UnsupportedModelError

__all__ = ["ModelFacts", "model_inputs", "position_limit", "read_model_facts"]

_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length")


@dataclass(frozen=True)
class ModelFacts:
    """The model's inputs and the longest input it runs (with where that number came from)."""

    inputs: tuple[str, ...]
    position_limit: int
    limit_source: str


def _forward_parameters(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _embedding_sizes(model: Any, suffix: str) -> list[tuple[str, Any]]:
    import torch

    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Embedding) and name.endswith(suffix)
    ]


def model_inputs(model: Any) -> tuple[str, ...]:
    """The token tensors ``model`` (a transformers ``PreTrainedModel``) reads, in export order."""
    accepted = _forward_parameters(model)
    if INPUT_IDS not in accepted:
        raise UnsupportedModelError(f"`{type(model).__name__}` takes no input_ids; only token models are supported")
    inputs = [INPUT_IDS]
    if ATTENTION_MASK in accepted:
        inputs.append(ATTENTION_MASK)
    if TOKEN_TYPE_IDS in accepted:
        types = getattr(model.config, "type_vocab_size", None)
        if types is None:
            tables = _embedding_sizes(model, "token_type_embeddings")
            types = max((module.num_embeddings for _, module in tables), default=0)
        if int(types) > 1:
            inputs.append(TOKEN_TYPE_IDS)
    return tuple(inputs)


def _structural_limit(model: Any) -> tuple[int | None, str]:
    """The limit read from the position table, else the config's trained context, else None."""
    tables = _embedding_sizes(model, "position_embeddings")
    if tables:
        limits = []
        for _, table in tables:
            offset = 0 if table.padding_idx is None else int(table.padding_idx) + 1
            limits.append(int(table.num_embeddings) - offset)
        name, table = tables[0]
        scheme = (
            f"{table.num_embeddings} learned positions numbered from padding_idx + 1 = {table.padding_idx + 1}"
            if table.padding_idx is not None
            else f"{table.num_embeddings} learned positions"
        )
        return min(limits), f"{scheme} (`{name}`)"
    for key in _POSITION_KEYS:
        value = getattr(model.config, key, None)
        if isinstance(value, int) and value > 0:
            return value, f"no position table; the config's {key}"
    return None, "no position table and no maximum in the config"


def _runs_at(module: Any, inputs: tuple[str, ...], length: int, token_id: int) -> bool:
    """Whether ``module`` (the exportable wrapper) runs on one row of ``length`` tokens."""
    import torch

    ids = torch.full((1, length), token_id, dtype=torch.long)
    feeds = {INPUT_IDS: ids, ATTENTION_MASK: torch.ones_like(ids)}
    if TOKEN_TYPE_IDS in inputs:
        feeds[TOKEN_TYPE_IDS] = torch.zeros_like(ids)
    try:
        with torch.no_grad():
            module(**{name: feeds[name] for name in inputs})
    except (IndexError, RuntimeError, ValueError):  # out-of-range positions surface as any of these
        return False
    return True


def position_limit(
    module: Any, model: Any, inputs: tuple[str, ...], token_id: int, cap: int | None = None
) -> tuple[int, str]:
    """The longest input ``module`` runs, and how it was found (see the module docstring).

    ``cap`` is the most tokens a row will hold (the build spec's ``max_length``, the tokenizer's or
    sentence-transformers' declared limit): the proof runs at ``min(limit, cap)``, since no row is longer. A
    decoder's trained context (Qwen3: 40,960 tokens) would otherwise cost one quadratic forward pass at that length.
    """
    limit, source = _structural_limit(model)
    if limit is None:
        if cap is None:
            raise UnsupportedModelError(
                f"`{type(model).__name__}` declares no maximum length ({source}); set max_length in the build spec"
            )
        limit, source = cap, f"{source}; the declared maximum length"
    probe = limit if cap is None else min(limit, cap)
    if _runs_at(module, inputs, probe, token_id):
        return limit, source if probe == limit else f"{source}; run at {probe}, the most a row holds"
    low, high = 1, probe - 1  # the scheme was not as read: find the longest length that runs
    if not _runs_at(module, inputs, low, token_id):
        raise UnsupportedModelError(f"`{type(model).__name__}` does not run even on one token")
    while low < high:
        middle = (low + high + 1) // 2
        if _runs_at(module, inputs, middle, token_id):
            low = middle
        else:
            high = middle - 1
    return low, f"{source}, lowered to the longest input the model runs"


def read_model_facts(module: Any, token_id: int, *, model: Any = None, cap: int | None = None) -> ModelFacts:
    """Facts of ``module``, the task's exportable wrapper around a transformers model (``module.model``).

    ``model`` is the part that reads the tokens when it is not ``module.model`` itself (the text tower of an
    image-text model). The inputs are those the model reads that the wrapper's ``forward`` also takes. ``cap``:
    see :func:`position_limit`.
    """
    model = module.model if model is None else model
    fed = _forward_parameters(module)
    inputs = tuple(name for name in model_inputs(model) if name in fed)
    limit, source = position_limit(module, model, inputs, token_id, cap)
    return ModelFacts(inputs=inputs, position_limit=limit, limit_source=source)
