"""Zero-shot classification as the transformers pipeline does it: labels -> hypotheses, NLI logits -> scores.

Shared by the zero-shot tokenizer and postprocess steps (copied next to their ``model.py``) and imported by
the tests; numpy only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from _tritongen_step.vectors import softmax

__all__ = ["candidate_labels", "hypotheses", "ranked", "scores"]


def candidate_labels(raw: str, row: int = 0) -> list[str]:
    """The labels of one ``CANDIDATE_LABELS`` value: a JSON list of non-empty strings (ValueError otherwise)."""
    where = f"CANDIDATE_LABELS[{row}]"
    try:
        labels = json.loads(raw)
    except ValueError:
        raise ValueError(f'{where} is not JSON; send a JSON list of labels, e.g. ["sports", "politics"]') from None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"{where} must be a JSON list of strings, got {raw[:80]!r}")
    if not labels:
        raise ValueError(f"{where} is empty; send at least one candidate label")
    if not all(label.strip() for label in labels):
        raise ValueError(f"{where} holds an empty label")
    return labels


def hypotheses(template: str, labels: Sequence[str]) -> list[str]:
    """Each label put into the hypothesis template (``"This example is {}."``)."""
    return [template.format(label) for label in labels]


def scores(logits: np.ndarray, entailment: int, contradiction: int, multi_label: bool) -> np.ndarray:
    """The pipeline's score of each label from one text's NLI logits [labels, num_nli_labels].

    Single-label: a softmax of the entailment logits across the labels. Multi-label, or a single candidate:
    each label's softmax over its [contradiction, entailment] logits, the entailment share.
    """
    logits = logits.astype(np.float32)
    if multi_label or logits.shape[0] == 1:
        return softmax(logits[:, [contradiction, entailment]])[:, 1]
    return softmax(logits[:, entailment])


def ranked(labels: Sequence[str], label_scores: np.ndarray) -> tuple[list[str], list[float]]:
    """Labels and scores, best first, in the pipeline's order (``reversed(argsort())``, ties included)."""
    order = list(reversed(label_scores.argsort()))
    return [labels[i] for i in order], [float(label_scores[i]) for i in order]
