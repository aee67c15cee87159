"""The tensors a task declares for its steps' configs, and the one every truncating task adds."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TRUNCATED", "TensorSpec"]


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a model's config: name, Triton data type and dims (without batch); inputs may be optional."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False


TRUNCATED = TensorSpec("TRUNCATED", "TYPE_BOOL", (1,))  # True where the text was cut at the model's length
