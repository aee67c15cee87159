"""The build spec's section for token classification: its settings, their checks and their command-line flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError
from tritongen.tasks.token_classification.ner import STRATEGIES

__all__ = ["TokenClassificationSettings"]


@dataclass(frozen=True)
class TokenClassificationSettings(TaskSettings):
    """The ``token_classification`` section: entity grouping and the overlap of long-text windows."""

    section: ClassVar[str] = "token_classification"

    aggregation_strategy: str = setting(  # none, simple, first, average or max (the transformers pipeline's)
        "simple",
        flag="aggregation_strategy",
        choices=STRATEGIES,
        help="token classification: how tokens are grouped into entities (default simple)",
    )
    stride: int | None = setting(  # tokens neighbouring windows share; None: window/4 (<= 128), 0 for `none`
        None,
        flag="ner_stride",
        type=int,
        help="token classification: tokens neighbouring windows share (default window/4)",
    )

    def validate(self) -> None:
        if self.aggregation_strategy not in STRATEGIES:
            raise SpecError(
                f"aggregation strategy `{self.aggregation_strategy}` is unknown; use one of {', '.join(STRATEGIES)}"
            )
        if self.stride is not None and self.stride < 0:
            raise SpecError(f"ner_stride must be >= 0, got {self.stride}")
        if self.stride and self.aggregation_strategy == "none":
            raise SpecError(
                "aggregation strategy `none` cannot merge overlapping windows (nor can the transformers pipeline): "
                "set ner_stride to 0 or choose simple, first, average or max"
            )
