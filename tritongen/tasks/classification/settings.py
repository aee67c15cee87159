"""The build spec's section for classification: its settings, their checks and their command-line flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tritongen.buildspec.sections import TaskSettings
from tritongen.errors import SpecError

__all__ = ["ClassificationSettings"]


@dataclass(frozen=True)
class ClassificationSettings(TaskSettings):
    """The ``classification`` section: which labels of a multi-label model go into ``LABELS``."""

    section: ClassVar[str] = "classification"

    multi_label_threshold: float = 0.5  # labels at or above this score
    multi_label_top_k: int = 0  # at most this many (0: no limit)

    flat_names: ClassVar[dict[str, str]] = {
        "multi_label_threshold": "multi_label_threshold",
        "multi_label_top_k": "multi_label_top_k",
    }

    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "multi_label_threshold": {"type": float, "help": "multi-label: labels scoring at least this (default 0.5)"},
        "multi_label_top_k": {"type": int, "help": "multi-label: at most this many labels (default 0: all)"},
    }

    def validate(self) -> None:
        if not 0 <= self.multi_label_threshold <= 1 or self.multi_label_top_k < 0:
            raise SpecError("multi-label threshold must be in [0, 1] and top_k >= 0")
