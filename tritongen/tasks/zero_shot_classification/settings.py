"""The build spec's section for zero-shot classification: its settings, their checks and their command-line flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError

__all__ = ["ZeroShotSettings"]


@dataclass(frozen=True)
class ZeroShotSettings(TaskSettings):
    """The ``zero_shot_classification`` section: the hypothesis each label becomes, and how scores normalise."""

    section: ClassVar[str] = "zero_shot_classification"

    hypothesis_template: str = setting(
        "This example is {}.",
        flag="hypothesis_template",
        help='zero-shot: the hypothesis a label becomes (default "This example is {}.")',
    )
    multi_label: bool = setting(  # each label on its own (entailment vs contradiction), not a softmax across labels
        False,
        flag="zero_shot_multi_label",
        action=argparse.BooleanOptionalAction,
        help="zero-shot: score each label on its own (entailment vs contradiction) instead of across labels",
    )

    def validate(self) -> None:
        template = self.hypothesis_template
        try:
            formatted = template.format("label")
        except (IndexError, KeyError, ValueError) as exc:
            raise SpecError(f"hypothesis_template {template!r} cannot be formatted with a label: {exc!r}") from None
        if formatted == template:
            raise SpecError(f"hypothesis_template {template!r} has no {{}} where the label goes")
