"""The build spec's section for sparse weights (sparse-embedding, multi-embedding's sparse output), with its flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError

__all__ = ["SparseSettings"]


@dataclass(frozen=True)
class SparseSettings(TaskSettings):
    """The ``sparse`` section: which weights of a sparse embedding the postprocess step keeps.

    Read by ``sparse-embedding`` and by the sparse output of ``multi-embedding``. By default every non-zero weight.
    """

    section: ClassVar[str] = "sparse"

    top_k: int = setting(  # at most this many weights per text, the largest (0: no limit)
        0, flag="sparse_top_k", type=int, help="sparse embeddings: at most this many weights per text (default 0: all)"
    )
    threshold: float = setting(  # only weights above this
        0.0, flag="sparse_threshold", type=float, help="sparse embeddings: only weights above this (default 0)"
    )

    def validate(self) -> None:
        if self.top_k < 0:
            raise SpecError(f"sparse top_k must be >= 0 (0: no limit), got {self.top_k}")
        if self.threshold < 0:
            raise SpecError(f"sparse threshold must be >= 0, got {self.threshold}")
