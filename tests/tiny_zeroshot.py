"""Tiny, randomly initialised NLI checkpoints (``*ForSequenceClassification`` with an entailment label), for tests.

``make_nli_checkpoint(arch, out_dir)`` writes the tiny classifier of ``tests/tiny_checkpoints.py`` (same offline
tokenizers, sizes and seeds; its builders are reused) with NLI labels, which is what the transformers
``zero-shot-classification`` pipeline and our zero-shot task need.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification

try:  # `python -m pytest` from the repository root (or importlib import mode)
    from tests.tiny_checkpoints import _INITIALIZER_RANGE, write_tokenizer_and_config
except ImportError:  # pytest's default "prepend" import mode puts tests/ itself on sys.path
    from tiny_checkpoints import _INITIALIZER_RANGE, write_tokenizer_and_config

__all__ = ["MNLI_LABELS", "make_nli_checkpoint"]

MNLI_LABELS: tuple[str, ...] = ("contradiction", "neutral", "entailment")  # the order of roberta-large-mnli


def make_nli_checkpoint(
    arch: str, out_dir: Path, *, labels: Sequence[str] = MNLI_LABELS, seed: int = 0, max_length: int = 64
) -> Path:
    """Write a tiny random ``arch`` NLI classifier with ``labels`` (in id order) into ``out_dir``."""
    config = write_tokenizer_and_config(
        arch,
        Path(out_dir),
        max_length,
        _INITIALIZER_RANGE,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    torch.manual_seed(seed)
    AutoModelForSequenceClassification.from_config(config).eval().save_pretrained(out_dir)
    return Path(out_dir)
