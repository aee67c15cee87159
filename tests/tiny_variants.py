"""Tiny checkpoints with one thing changed: pair models, cross-encoders, multi-label, unnormalised embedders.

Each is a maker like ``make_checkpoint`` (``maker(..., out_dir)`` -> ``out_dir``), so the session's
checkpoint cache (``tests/builds.py``) makes it once for every module that asks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tiny_checkpoints import make_checkpoint

__all__ = [
    "NLI_LABELS",
    "make_cross_encoder",
    "make_multilabel_classifier",
    "make_pair_classifier",
    "make_unnormalised_embedder",
]

NLI_LABELS = {"0": "entailment", "1": "neutral", "2": "contradiction"}


def _patch(path: Path, filename: str = "config.json", **changes: Any) -> Path:
    file = path / filename
    config = json.loads(file.read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del config[key]
    file.write_text(json.dumps(config))
    return path


def make_pair_classifier(arch: str, out_dir: Path, *, seed: int = 3, declare_inputs: bool = True) -> Path:
    """A tiny ``arch`` classifier with NLI labels (detected as a text-pair model).

    ``declare_inputs=False``: its tokenizer saved as transformers 5 saves one nobody configured, with no
    ``model_input_names`` (same weights).
    """
    path = make_checkpoint(arch, out_dir, task="classification", seed=seed)
    _patch(path, id2label=NLI_LABELS, label2id={v: int(k) for k, v in NLI_LABELS.items()})
    return path if declare_inputs else _patch(path, "tokenizer_config.json", model_input_names=None)


def make_cross_encoder(out_dir: Path, *, seed: int = 0) -> Path:
    """A one-label BERT cross-encoder (sentence-transformers' CrossEncoder config key makes it a pair model)."""
    path = make_checkpoint("bert", out_dir, task="classification", num_labels=1, seed=seed)
    return _patch(path, sbert_ce_default_activation_function="torch.nn.modules.activation.Sigmoid")


def make_multilabel_classifier(arch: str, out_dir: Path, *, seed: int = 5) -> Path:
    """A tiny ``arch`` classifier whose config says ``multi_label_classification`` (sigmoid scores)."""
    path = make_checkpoint(arch, out_dir, task="classification", seed=seed)
    return _patch(path, problem_type="multi_label_classification")


def make_unnormalised_embedder(arch: str, out_dir: Path, *, seed: int = 0) -> Path:
    """``make_checkpoint(arch, task="embedding", seed=seed)`` without its Normalize module (mean pooling only)."""
    path = make_checkpoint(arch, out_dir, task="embedding", seed=seed)
    modules = json.loads((path / "modules.json").read_text())
    (path / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Normalize")]))
    return path
