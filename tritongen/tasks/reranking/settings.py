"""The build spec's section for reranking: its settings, their checks and their command-line flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError

__all__ = ["DEFAULT_INSTRUCTION", "RerankingSettings"]

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


_INSTRUCTION_HELP = f'reranking: the instruction (default "{DEFAULT_INSTRUCTION}")'


@dataclass(frozen=True)
class RerankingSettings(TaskSettings):
    """The ``reranking`` section: the instruction every (query, document) pair is judged under."""

    section: ClassVar[str] = "reranking"

    instruction: str = setting(DEFAULT_INSTRUCTION, flag="rerank_instruction", help=_INSTRUCTION_HELP)

    def validate(self) -> None:
        if not self.instruction.strip():
            raise SpecError("the reranking instruction must not be empty")
