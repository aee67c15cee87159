"""Tiny, randomly initialised ``*ForTokenClassification`` checkpoints (NER labels) on local disk, for tests.

``make_token_classifier(arch, out_dir)`` writes ``config.json``, ``model.safetensors``, ``tokenizer.json`` and
``tokenizer_config.json`` with the same offline tokenizers, sizes and seeds as ``tests/tiny_checkpoints.py``
(whose builders it reuses), but a token-classification head over ``NER_LABELS``. The large initializer range
of those checkpoints makes the argmax label vary from token to token, so every entity type, ``B-``/``I-``
runs and subwords that disagree all appear.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForTokenClassification

try:  # `python -m pytest` from the repository root (or importlib import mode)
    from tests.tiny_checkpoints import _ARCHS, _INITIALIZER_RANGE, write_tokenizer_and_config
except ImportError:  # pytest's default "prepend" import mode puts tests/ itself on sys.path
    from tiny_checkpoints import _ARCHS, _INITIALIZER_RANGE, write_tokenizer_and_config

__all__ = ["NER_LABELS", "make_token_classifier"]

NER_LABELS: tuple[str, ...] = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG")


def make_token_classifier(
    arch: str, out_dir: Path, seed: int = 0, *, max_length: int = 32, initializer_range: float = _INITIALIZER_RANGE
) -> Path:
    """Write a tiny random ``arch`` token classifier into ``out_dir`` and return ``out_dir``.

    ``max_length`` is the tokenizer's ``model_max_length`` (so the pipeline truncates there) and the model's
    position limit. Same arguments give identical weights.
    """
    if arch not in _ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(_ARCHS)}")
    config = write_tokenizer_and_config(
        arch,
        Path(out_dir),
        max_length,
        initializer_range,
        num_labels=len(NER_LABELS),
        id2label=dict(enumerate(NER_LABELS)),
        label2id={label: i for i, label in enumerate(NER_LABELS)},
    )

    torch.manual_seed(seed)
    model = AutoModelForTokenClassification.from_config(config).eval()
    model.save_pretrained(out_dir)
    return Path(out_dir)
