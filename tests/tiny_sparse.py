"""Tiny, randomly initialised sparse and multi-vector embedders on local disk, for tests.

* ``make_splade(out_dir)``: a ``*ForMaskedLM`` (BERT by default) with sentence-transformers' ``SparseEncoder``
  files as 5.x saves them (``modules.json`` with a fill-mask ``Transformer`` and ``SpladePooling``,
  ``config_sentence_transformers.json`` with ``model_type: SparseEncoder`` and empty prompts);
  ``layout=False`` leaves them out (a bare fill-mask checkpoint).
* ``make_bge_m3(out_dir)``: a bare XLM-R (``XLMRobertaModel``) with BGE-M3's head files beside it, as FlagEmbedding
  saves them: ``sparse_linear.pt`` (Linear(hidden, 1)) and ``colbert_linear.pt`` (Linear(hidden, colbert_dim)),
  each a ``torch.save``d state dict.

The tokenizers and sizes are ``tests/tiny_checkpoints.py``'s (hidden 32, 2 layers, 64 tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForMaskedLM

try:  # `python -m pytest` from the repository root (or importlib import mode)
    from tests.tiny_checkpoints import HIDDEN_SIZE, write_tokenizer_and_config
except ImportError:  # pytest's default "prepend" import mode puts tests/ itself on sys.path
    from tiny_checkpoints import HIDDEN_SIZE, write_tokenizer_and_config

__all__ = ["make_bge_m3", "make_splade"]

_INITIALIZER_RANGE = 0.5  # as tiny_checkpoints: weights far apart, few near-ties


def make_splade(
    out_dir: Path, *, arch: str = "bert", strategy: str = "max", activation: str = "relu", layout: bool = True
) -> Path:
    """Write a tiny random fill-mask ``arch`` checkpoint, with SparseEncoder files when ``layout``."""
    out_dir = Path(out_dir)
    config = write_tokenizer_and_config(arch, out_dir, 64, _INITIALIZER_RANGE)
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(config).eval().save_pretrained(out_dir)
    if layout:
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
            {
                "idx": 1,
                "name": "1",
                "path": "1_SpladePooling",
                "type": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling",
            },
        ]
        pooling = {"pooling_strategy": strategy, "activation_function": activation, "embedding_dimension": None}
        prompts = {"query": "", "document": ""}  # as SparseEncoder saves them: empty
        st_config = {"model_type": "SparseEncoder", "prompts": prompts, "default_prompt_name": None}
        bert_config = {"transformer_task": "fill-mask", "module_output_name": "token_embeddings"}
        (out_dir / "1_SpladePooling").mkdir(exist_ok=True)
        for name, payload in [
            ("modules.json", modules),
            ("1_SpladePooling/config.json", pooling),
            ("config_sentence_transformers.json", st_config),
            ("sentence_bert_config.json", bert_config),
        ]:
            (out_dir / name).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return out_dir


def make_bge_m3(out_dir: Path, *, colbert_dim: int = HIDDEN_SIZE) -> Path:
    """Write a tiny random XLM-R with ``sparse_linear.pt`` and ``colbert_linear.pt`` beside it."""
    out_dir = Path(out_dir)
    config = write_tokenizer_and_config("xlm-roberta", out_dir, 64, _INITIALIZER_RANGE)
    torch.manual_seed(0)
    AutoModel.from_config(config, add_pooling_layer=False).eval().save_pretrained(out_dir)
    torch.save(torch.nn.Linear(HIDDEN_SIZE, 1).state_dict(), out_dir / "sparse_linear.pt")
    torch.save(torch.nn.Linear(HIDDEN_SIZE, colbert_dim).state_dict(), out_dir / "colbert_linear.pt")
    return out_dir
