"""Tiny, randomly initialised decoder-based sentence embedders (Qwen3-Embedding and EmbeddingGemma style).

``make_decoder_embedder(arch, out_dir)`` writes a complete checkpoint without touching the network, as
``tests/tiny_checkpoints.py`` does for encoders (and from the same corpus):

* ``qwen3``: ``Qwen3Model``, a byte-level BPE tokenizer whose post-processor appends ``<|endoftext|>``
  (as Qwen3-Embedding's does), ``padding_side: left``, last-token pooling, L2 normalisation, and the
  query/document prompts of Qwen3-Embedding's ``config_sentence_transformers.json``;
* ``gemma3_text``: ``Gemma3TextModel`` with bidirectional attention (EmbeddingGemma), a SentencePiece-like
  BPE tokenizer (``▁`` for spaces, byte fallback) adding ``<bos>`` and ``<eos>``, right padding, mean pooling,
  normalisation and prompts; ``dense=True`` adds EmbeddingGemma's two ``Dense`` modules (2_Dense, 3_Dense).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

from tests.tiny_checkpoints import HIDDEN_SIZE, corpus

__all__ = ["DECODERS", "QWEN3_PROMPTS", "decoder_embedders", "make_decoder_embedder"]

DECODERS: tuple[str, ...] = ("qwen3", "gemma3_text")
QWEN3_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages\nQuery: ", "document": ""}
GEMMA_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: "}
_VOCAB_SIZE = 500
_CACHE: dict[str, Tokenizer] = {}


def _qwen3_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    eos = ("<|endoftext|>", tok.token_to_id("<|endoftext|>"))
    tok.post_processor = processors.TemplateProcessing(
        single="$A:0 <|endoftext|>:0", pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1", special_tokens=[eos]
    )
    return tok


def _gemma_tokenizer() -> Tokenizer:
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=specials + [f"<0x{b:02X}>" for b in range(256)],
        show_progress=False,
    )
    tok.train_from_iterator([line.replace(" ", "▁") for line in corpus()], trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    bos, eos = ("<bos>", tok.token_to_id("<bos>")), ("<eos>", tok.token_to_id("<eos>"))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos>:0 $A:0 <eos>:0", pair="<bos>:0 $A:0 <eos>:0 $B:1 <eos>:1", special_tokens=[bos, eos]
    )
    return tok


def _tokenizer(arch: str, max_length: int, padding_side: str) -> PreTrainedTokenizerFast:
    if arch not in _CACHE:
        _CACHE[arch] = _qwen3_tokenizer() if arch == "qwen3" else _gemma_tokenizer()
    roles: dict[str, Any] = (
        {"pad_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
        if arch == "qwen3"
        else {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>"}
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=_CACHE[arch], model_max_length=max_length, padding_side=padding_side, **roles
    )


def _config(arch: str, vocab_size: int, max_length: int, ids: dict[str, int]) -> Any:
    common = {
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": 37,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "max_position_embeddings": max_length,
        "initializer_range": 0.5,
        **ids,
    }
    if arch == "qwen3":
        return AutoConfig.for_model("qwen3", **common, tie_word_embeddings=True)
    return AutoConfig.for_model(
        "gemma3_text",
        **common,
        sliding_window=8,  # shorter than the texts, so the sliding layer is exercised
        layer_types=["sliding_attention", "full_attention"],
        use_bidirectional_attention=True,
        query_pre_attn_scalar=16,
    )


def _st_files(out_dir: Path, arch: str, max_length: int, dense: bool, seed: int) -> None:
    mode = "pooling_mode_lasttoken" if arch == "qwen3" else "pooling_mode_mean_tokens"
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if dense:
        generator = torch.Generator().manual_seed(seed + 1)
        for index, (name, features, bias) in enumerate([("2_Dense", 48, False), ("3_Dense", HIDDEN_SIZE, True)]):
            inputs = HIDDEN_SIZE if index == 0 else 48
            folder = out_dir / name
            folder.mkdir(exist_ok=True)
            config = {
                "in_features": inputs,
                "out_features": features,
                "bias": bias,
                "activation_function": "torch.nn.modules.linear.Identity",
            }
            (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
            weights = {"linear.weight": torch.randn(features, inputs, generator=generator) * 0.3}
            if bias:
                weights["linear.bias"] = torch.randn(features, generator=generator) * 0.1
            from safetensors.torch import save_file

            save_file(weights, str(folder / "model.safetensors"))
            modules.append(
                {"idx": 2 + index, "name": str(2 + index), "path": name, "type": "sentence_transformers.models.Dense"}
            )
    modules.append(
        {
            "idx": len(modules),
            "name": str(len(modules)),
            "path": "2_Normalize",
            "type": "sentence_transformers.models.Normalize",
        }
    )
    pooling = {
        "word_embedding_dimension": HIDDEN_SIZE,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
        mode: True,
    }
    prompts = QWEN3_PROMPTS if arch == "qwen3" else GEMMA_PROMPTS
    st_config = {"prompts": prompts, "default_prompt_name": None, "similarity_fn_name": "cosine"}
    (out_dir / "1_Pooling").mkdir(exist_ok=True)
    for name, payload in [
        ("modules.json", modules),
        ("1_Pooling/config.json", pooling),
        ("sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False}),
        ("config_sentence_transformers.json", st_config),
    ]:
        (out_dir / name).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def make_decoder_embedder(
    arch: str, out_dir: Path, *, seed: int = 0, max_length: int = 64, dense: bool = False, padding_side: str = ""
) -> Path:
    """Write a tiny random decoder embedder ``arch`` (``qwen3`` or ``gemma3_text``) into ``out_dir``.

    ``padding_side`` overrides the tokenizer's (left for Qwen3-Embedding, right for EmbeddingGemma).
    """
    if arch not in DECODERS:
        raise ValueError(f"unknown decoder {arch!r}; choose one of {', '.join(DECODERS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    side = padding_side or ("left" if arch == "qwen3" else "right")
    tokenizer = _tokenizer(arch, max_length, side)
    tokenizer.save_pretrained(out_dir)
    # Qwen3's config names no pad token (its tokenizer pads with <|endoftext|>, which is also every text's last
    # token): a padding_idx there would zero that token's embedding.
    ids = {
        "pad_token_id": tokenizer.pad_token_id if arch != "qwen3" else None,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id,
    }
    config = _config(arch, len(tokenizer), max_length, ids)
    torch.manual_seed(seed)
    AutoModel.from_config(config).eval().save_pretrained(out_dir)
    _st_files(out_dir, arch, max_length, dense, seed)
    return out_dir


def decoder_embedders(checkpoint_cache: Callable[..., Path]) -> dict[str, Path]:
    """The decoder embedders the tests share, by architecture, each made once per session by ``checkpoint_cache``.

    Qwen3 as Qwen3-Embedding (last token, left padding, prompts); Gemma3 as EmbeddingGemma, with its two Dense
    modules. The unit tests and the end-to-end ones ask for these two, so they are written in one place.
    """
    return {
        "qwen3": checkpoint_cache(make_decoder_embedder, "qwen3"),
        "gemma3_text": checkpoint_cache(make_decoder_embedder, "gemma3_text", dense=True),
    }
