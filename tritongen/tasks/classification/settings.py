"""The build spec's section for classification: its settings, their checks and their command-line flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError

__all__ = ["ClassificationSettings"]


@dataclass(frozen=True)
class ClassificationSettings(TaskSettings):
    """The ``classification`` section: which labels of a multi-label model go into ``LABELS``."""

    section: ClassVar[str] = "classification"

    multi_label_threshold: float = setting(  # labels at or above this score
        0.5, flag="multi_label_threshold", type=float, help="multi-label: labels scoring at least this (default 0.5)"
    )
    multi_label_top_k: int = setting(  # at most this many (0: no limit)
        0, flag="multi_label_top_k", type=int, help="multi-label: at most this many labels (default 0: all)"
    )

    def validate(self) -> None:
        if not 0 <= self.multi_label_threshold <= 1 or self.multi_label_top_k < 0:
            raise SpecError("multi-label threshold must be in [0, 1] and top_k >= 0")
