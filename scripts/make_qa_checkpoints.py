"""Build the tiny extractive-QA test checkpoints under ``tests/assets/qa/<arch>/``.

Run with the project's venv (transformers 5): ``.venv/bin/python scripts/make_qa_checkpoints.py``.

Each checkpoint is a randomly initialised ``*ForQuestionAnswering`` model (hidden 32, 2 layers, weights
depending only on the seed) with the offline tokenizer of ``tests/tiny_checkpoints.py`` for that
architecture: WordPiece + token_type_ids for BERT, byte-level BPE for RoBERTa, Unigram for XLM-R, and
Unigram with an accent-stripping, lower-casing normaliser + token_type_ids for ALBERT. The
maximum length is 128 positions, so long contexts need several windows.

The files are written so that both transformers 4.57 (which still has ``QuestionAnsweringPipeline``,
used by ``scripts/make_qa_golden.py``) and transformers 5 load them: ``tokenizer_config.json`` names the
generic ``PreTrainedTokenizerFast`` (both versions know it; v5 maps it to its ``TokenizersBackend``), so
``tokenizer.json`` alone defines the tokenization in both.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForQuestionAnswering

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.tiny_checkpoints import (  # noqa: E402  (tokenizer helpers of the tiny-checkpoint factory)
    _ARCHS,
    _INITIALIZER_RANGE,
    _KINDS,
    HIDDEN_SIZE,
    _make_tokenizer,
)

QA_ARCHS = ("bert", "roberta", "xlm-roberta", "albert")
# Saved as transformers 5 saves a tokenizer nobody configured: no `model_input_names`. transformers 5 then
# reports input_ids and attention_mask only, although these models embed two segments (type_vocab_size 2);
# transformers 4.57 (the golden answers) still returns token_type_ids. The build must take the inputs from
# the model, not from that list.
UNDECLARED_INPUTS = ("bert", "albert")
# ALBERT runs one shared layer's weights at every depth, so the tiny models' large initializer range compounds
# into float32 noise above the parity tolerance; a smaller range keeps its logits varied and its export exact.
_INIT_SCALE = {"albert": 0.5}
MAX_LENGTH = 128
SEED = 20240601
OUT = ROOT / "tests" / "assets" / "qa"


def build(arch: str, out_dir: Path, *, max_length: int = MAX_LENGTH, seed: int = SEED) -> Path:
    """Write the tiny QA checkpoint for ``arch`` into ``out_dir``."""
    spec = _ARCHS[arch]
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.iterdir():
        if stale.is_file():
            stale.unlink()

    tokenizer = _make_tokenizer(arch, max_length)
    tokenizer.backend_tokenizer.save(str(out_dir / "tokenizer.json"))
    specials = _KINDS[spec.tokenizer].specials
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        "padding_side": "right",
        "truncation_side": "right",
        "clean_up_tokenization_spaces": False,
        **{f"{role}_token": token for role, token in specials.items()},
    }
    if arch not in UNDECLARED_INPUTS:
        tok_config["model_input_names"] = list(tokenizer.model_input_names)
    if specials["cls"] == "<s>":
        tok_config.update(bos_token=specials["cls"], eos_token=specials["sep"])
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, sort_keys=True) + "\n")

    ids = {role: tokenizer.convert_tokens_to_ids(token) for role, token in specials.items()}
    config = AutoConfig.for_model(
        arch,
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        max_position_embeddings=max_length + spec.position_offset,
        initializer_range=_INITIALIZER_RANGE * _INIT_SCALE.get(arch, 1.0),
        pad_token_id=ids["pad"],
        bos_token_id=ids["cls"],
        eos_token_id=ids["sep"],
        **spec.config,
    )
    torch.manual_seed(seed)
    model = AutoModelForQuestionAnswering.from_config(config).eval()
    model.save_pretrained(out_dir)
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for arch in QA_ARCHS:
        path = build(arch, args.out / arch)
        size = sum(f.stat().st_size for f in path.iterdir())
        print(f"{arch}: {path} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
