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
    "BF16_TIE_STEP",
    "NLI_LABELS",
    "make_bf16_tied_classifier",
    "make_cross_encoder",
    "make_multilabel_classifier",
    "make_pair_classifier",
    "make_unnormalised_embedder",
]

NLI_LABELS = {"0": "entailment", "1": "neutral", "2": "contradiction"}
# How much the tied classifier's second weight row exceeds the first in magnitude, where it does: under half of
# BF16's step between 1 and 2 (2**-7), far above FP32's there (2**-23).
BF16_TIE_STEP = 0.003


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


def make_bf16_tied_classifier(out_dir: Path, *, seed: int = 0) -> Path:
    """A tiny BERT classifier whose two labels BF16 cannot tell apart, while FP32 splits texts between them.

    The premise of a BF16 refusal, built rather than found, so that it holds on every CPU that computes in BF16:

    - the first row of the classifier's weights is BF16 numbers of magnitude 1.0625 to 1.9375 (BF16's step there is
      2**-7); the second row is the first, each element's magnitude grown by :data:`BF16_TIE_STEP` at a random half of
      the positions. Rounded to BF16, to nearest or by truncation, the second row is the first again, so in BF16 both
      logits come from the same products and only the biases differ: every text gets one label;
    - in FP32 the grown elements decide, and the second bias puts the threshold at the median of that difference over
      the built-in validation texts, so about half of them take each label: BF16 agrees with FP32 on about 50%.

    OpenVINO computes a FullyConnected layer in the inference precision (it keeps only the graph's tail after the last
    matmul in FP32), so the classifier runs in BF16 wherever OpenVINO computes in BF16.
    """
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tritongen.gates.accuracy import default_texts

    path = make_checkpoint("bert", out_dir, task="classification", num_labels=2, seed=seed)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    rng = np.random.default_rng(seed)
    width = model.classifier.in_features
    magnitudes = 1.0625 + rng.integers(0, 112, width) * 2.0**-7  # BF16's grid from 1.0625 to 1.9375
    first = np.where(rng.random(width) < 0.5, -1.0, 1.0) * magnitudes
    grown = rng.random(width) < 0.5
    second = first + np.sign(first) * BF16_TIE_STEP * grown
    features = _classifier_inputs(model, AutoTokenizer.from_pretrained(path), default_texts("validation"))
    margins = features @ (second - first)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.tensor(np.stack([first, second]), dtype=torch.float32))
        model.classifier.bias.copy_(torch.tensor([0.0, -float(np.median(margins))], dtype=torch.float32))
    model.save_pretrained(path)
    return path


def _classifier_inputs(model: Any, tokenizer: Any, texts: list[str]) -> Any:
    """What the classifier layer of ``model`` reads for each of ``texts`` (FP32 PyTorch)."""
    import numpy as np
    import torch

    seen: list[Any] = []
    hook = model.classifier.register_forward_hook(lambda module, args, output: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            for start in range(0, len(texts), 32):
                model(**tokenizer(texts[start : start + 32], padding=True, truncation=True, return_tensors="pt"))
    finally:
        hook.remove()
    return np.concatenate([batch.numpy() for batch in seen]).astype(np.float64)
