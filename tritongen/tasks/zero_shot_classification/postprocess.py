"""Zero-shot postprocess step: NLI ``logits`` of every pair -> ``LABELS`` and ``SCORES`` per text.

Both outputs are JSON lists, best first, as the transformers pipeline returns ``labels`` and ``scores``.
Parameters: ``entailment_id``, ``contradiction_id`` and ``multi_label``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from _tritongen_step import zero_shot
from _tritongen_step._common import decode_texts
from _tritongen_step.contract import CANDIDATE_LABELS, LABELS, LOGITS, SCORES
from _tritongen_step.parameters import ZeroShotParameters
from _tritongen_step.postprocess import RequestPostprocess, input_array

__all__ = ["TritonPythonModel"]


class TritonPythonModel(RequestPostprocess):
    """The zero-shot postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read which logits are entailment and contradiction, and how scores normalise."""
        classes = ZeroShotParameters.from_parameters(params)
        self.entailment, self.contradiction = classes.entailment_id, classes.contradiction_id
        self.multi_label = classes.multi_label

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """Each text's labels ranked by score (the tokenizer step already checked the request)."""
        logits = input_array(request, LOGITS)
        owners = input_array(request, "pair_text").reshape(-1)
        rows = decode_texts(input_array(request, CANDIDATE_LABELS), CANDIDATE_LABELS)
        parsed = [zero_shot.candidate_labels(raw, row) for row, raw in enumerate(rows)]
        texts = int(owners.max()) + 1 if owners.size else 0
        labels_out, scores_out = [], []
        for text in range(texts):
            labels = parsed[0] if len(parsed) == 1 else parsed[text]
            rows_of_text = logits[owners == text]
            text_scores = zero_shot.scores(rows_of_text, self.entailment, self.contradiction, self.multi_label)
            ranked_labels, ranked_scores = zero_shot.ranked(labels, text_scores)
            labels_out.append([json.dumps(ranked_labels, ensure_ascii=False).encode("utf-8")])
            scores_out.append([json.dumps(ranked_scores).encode("utf-8")])
        return {
            LABELS: np.array(labels_out, dtype=np.object_).reshape(-1, 1),
            SCORES: np.array(scores_out, dtype=np.object_).reshape(-1, 1),
        }
