"""The three tiny ensembles the gateway tests serve: an embedder, a one-label cross-encoder, a classifier."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.tiny_checkpoints import make_checkpoint

__all__ = ["make_gateway_checkpoints"]


def _cross_encoder(out_dir: Path) -> Path:
    """A one-label BERT cross-encoder (sentence-transformers' CrossEncoder config key makes it a pair model)."""
    path = make_checkpoint("bert", out_dir, task="classification", num_labels=1, seed=7)
    config = json.loads((path / "config.json").read_text())
    config["sbert_ce_default_activation_function"] = "torch.nn.modules.activation.Sigmoid"
    (path / "config.json").write_text(json.dumps(config))
    return path


def _unnormalised(source: Path, out_dir: Path) -> Path:
    """``source``'s embedder without its sentence-transformers Normalize module (mean pooling only)."""
    path = Path(shutil.copytree(source, out_dir))
    modules = json.loads((path / "modules.json").read_text())
    (path / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Normalize")]))
    return path


def make_gateway_checkpoints(root: Path) -> dict[str, Path]:
    """``{ensemble name: checkpoint}`` built under ``root``.

    ``embedder`` (normalised), ``embedder_raw`` (the same weights, not normalised), ``reranker`` (a one-label
    cross-encoder) and ``classifier`` (three labels).
    """
    embedder = make_checkpoint("bert", root / "embedder", task="embedding", seed=1)
    return {
        "embedder": embedder,
        "embedder_raw": _unnormalised(embedder, root / "embedder_raw"),
        "reranker": _cross_encoder(root / "reranker"),
        "classifier": make_checkpoint("roberta", root / "classifier", task="classification", num_labels=3, seed=2),
    }
