"""The tensors a task declares for its steps' configs; the public ones by their contract (``tritongen.contract``)."""

from __future__ import annotations

from dataclasses import dataclass

from tritongen.contract import PUBLIC, TOKEN_COUNT, TOKEN_IDS, TRUNCATE_LEFT, TRUNCATED

__all__ = [
    "PASSED_THROUGH",
    "TOKEN_COUNT_OUTPUT",
    "TOKEN_IDS_INPUT",
    "TRUNCATED_OUTPUT",
    "TRUNCATE_LEFT_INPUT",
    "TensorSpec",
    "public",
]


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a model's config: name, Triton data type and dims (without batch); inputs may be optional."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False


def public(name: str, dims: tuple[int, ...] | None = None) -> TensorSpec:
    """The public tensor ``name`` as the contract types it; ``dims`` where the model sets them (a width)."""
    declared = PUBLIC[name]
    shape = declared.dims if dims is None else dims
    if shape is None:
        raise ValueError(f"{name} takes the model's dims: give them")
    return TensorSpec(name, declared.data_type, tuple(shape), declared.optional)


TRUNCATED_OUTPUT = public(TRUNCATED)  # True where the text was cut at the model's length
TOKEN_COUNT_OUTPUT = public(TOKEN_COUNT)  # the tokens the model read of each text (the gateway's usage)
# What the tokenizer step tells clients directly: the ensemble passes these on wherever that step gives them.
PASSED_THROUGH = (TRUNCATED_OUTPUT, TOKEN_COUNT_OUTPUT)
# The plain tokenizer step's optional per-row inputs: the model's token ids in place of the text, and which rows
# keep their last tokens (``tritongen.steps.tokenizer``).
TOKEN_IDS_INPUT = public(TOKEN_IDS)
TRUNCATE_LEFT_INPUT = public(TRUNCATE_LEFT)
