"""How a sentence-embedding model turns its token states into one vector: one function per method, by name.

The names are sentence-transformers' ``Pooling`` modes (``1_Pooling/config.json``); :func:`pooling_method` is the
one factory, and an unknown name lists the supported ones. The functions run inside the exported graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tritongen.errors import UnsupportedModelError

if TYPE_CHECKING:
    import torch

__all__ = ["METHODS", "pooling_method", "splade"]

Method = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]  # (hidden [B, T, H], mask [B, T]) -> [B, H]


def _cls(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    return hidden[:, 0]


def _mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def _max(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    import torch

    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return torch.where(mask > 0, hidden, torch.full_like(hidden, -1e9)).max(dim=1).values


def _last_token(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The last real token, from the mask: right whichever side the rows are padded on."""
    import torch

    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask * positions).amax(dim=1)  # ReduceMax: the container's ORT has no int ArgMax
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


METHODS: dict[str, Method] = {"cls": _cls, "lasttoken": _last_token, "max": _max, "mean": _mean}


def pooling_method(name: str) -> Method:
    """The pooling function called ``name``; UnsupportedModelError names the supported ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise UnsupportedModelError(
            f"pooling `{name}` is not supported; supported: {', '.join(sorted(METHODS))}"
        ) from None


def splade(
    logits: torch.Tensor, attention_mask: torch.Tensor, strategy: str = "max", activation: str = "relu"
) -> torch.Tensor:
    """sentence-transformers' SpladePooling: ``log(1 + relu(logits))`` per real token, then max or sum over tokens.

    ``logits`` are the MLM head's, [B, T, V]; the result is one weight per vocabulary entry, [B, V]. Padding
    counts as weight 0, which changes neither the max (every weight is >= 0) nor the sum. ``log1p_relu`` (the
    OpenSearch models) applies ``log1p`` once more.
    """
    import torch

    weights = torch.log1p(torch.relu(logits * attention_mask.unsqueeze(-1).to(logits.dtype)))
    if activation == "log1p_relu":
        weights = torch.log1p(weights)
    return weights.amax(dim=1) if strategy == "max" else weights.sum(dim=1)
