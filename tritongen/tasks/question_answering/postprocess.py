"""Question-answering postprocess step: ``CONTEXT``, ``span_logits`` and the window metadata -> the answer.

``ANSWER``, ``SCORE``, ``START``, ``END``: the best answer of each pair over all its windows
(``qa.decode_answers``). Parameters: ``max_answer_len`` and ``handle_impossible_answer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from _tritongen_step import qa
from _tritongen_step._common import decode_texts
from _tritongen_step.contract import (
    ANSWER,
    ATTENTION_MASK,
    CONTEXT,
    END,
    OFFSETS,
    SCORE,
    START,
    WINDOW_EXAMPLE,
    WORD_IDS,
)
from _tritongen_step.parameters import QaAnswerParameters
from _tritongen_step.postprocess import RequestPostprocess, input_array

__all__ = ["TritonPythonModel", "answer_arrays"]


def answer_arrays(answers: Sequence[dict | list]) -> dict[str, np.ndarray]:
    """``qa.decode_answers``' best answer per pair as [N, 1] arrays; no span left gives "", 0, -1, -1."""
    best = [a if isinstance(a, dict) else (a[0] if a else None) for a in answers]
    return {
        ANSWER: np.array([[(b["answer"] if b else "").encode("utf-8")] for b in best], dtype=np.object_),
        SCORE: np.array([[b["score"] if b else 0.0] for b in best], dtype=np.float32),
        START: np.array([[b["start"] if b else -1] for b in best], dtype=np.int64),
        END: np.array([[b["end"] if b else -1] for b in best], dtype=np.int64),
    }


class TritonPythonModel(RequestPostprocess):
    """The question-answering postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read the longest answer and whether "no answer" may win."""
        answers = QaAnswerParameters.from_parameters(params)
        self.answers = qa.AnswerSettings(
            max_answer_len=answers.max_answer_len, handle_impossible_answer=answers.handle_impossible_answer
        )

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """The best answer of every pair of one request."""
        contexts = decode_texts(input_array(request, CONTEXT), CONTEXT)
        spans = input_array(request, "span_logits")
        attention = input_array(request, ATTENTION_MASK)
        windows = qa.QAWindows(
            input_ids=attention,  # decoding reads only its shape
            attention_mask=attention,
            token_type_ids=np.zeros_like(attention),
            example_index=input_array(request, WINDOW_EXAMPLE).reshape(-1),
            lengths=attention.sum(axis=1),
            offsets=input_array(request, OFFSETS),
            sequence_ids=input_array(request, "sequence_ids"),
            word_ids=input_array(request, WORD_IDS),
            p_mask=input_array(request, "p_mask").astype(bool),
            num_examples=len(contexts),
            max_seq_len=attention.shape[1],
            doc_stride=0,
        )
        answers = qa.decode_answers(spans[..., 0], spans[..., 1], windows, contexts, self.answers)
        return answer_arrays(answers)
