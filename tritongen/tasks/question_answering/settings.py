"""The build spec's section for question answering: its settings, their checks and their command-line flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError
from tritongen.parameters import QaAnswerParameters

__all__ = ["QuestionAnsweringSettings"]

_ANSWER_LEN = QaAnswerParameters().max_answer_len  # the step's default, declared with its parameter


@dataclass(frozen=True)
class QuestionAnsweringSettings(TaskSettings):
    """The ``question_answering`` section: windows over long contexts, and which answers may win."""

    section: ClassVar[str] = "question_answering"

    max_seq_len: int | None = setting(  # window length; None: min(model max length, 384) as in transformers
        None, flag="qa_max_seq_len", type=int, help="QA window length in tokens (default min(max, 384))"
    )
    doc_stride: int | None = setting(  # window overlap; None: min(window // 2, 128) as in transformers
        None, flag="qa_doc_stride", type=int, help="QA tokens shared by neighbouring windows (default 128)"
    )
    max_answer_len: int = setting(  # longest answer, in tokens
        _ANSWER_LEN, flag="qa_max_answer_len", type=int, help=f"QA longest answer in tokens (default {_ANSWER_LEN})"
    )
    handle_impossible_answer: bool = setting(  # the empty answer may win ("no answer")
        False,
        flag="qa_handle_impossible_answer",
        action=argparse.BooleanOptionalAction,
        help='QA: allow the empty "no answer" to win',
    )

    def validate(self) -> None:
        if self.max_answer_len < 1:
            raise SpecError(f"qa_max_answer_len must be >= 1, got {self.max_answer_len}")
        if self.max_seq_len is not None and self.max_seq_len < 8:
            raise SpecError(f"qa_max_seq_len must be >= 8, got {self.max_seq_len}")
        if self.doc_stride is not None and not 0 <= self.doc_stride < (self.max_seq_len or 1 << 30):
            raise SpecError(f"qa_doc_stride must be >= 0 and below qa_max_seq_len, got {self.doc_stride}")
