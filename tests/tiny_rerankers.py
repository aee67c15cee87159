"""Tiny, randomly initialised decoder rerankers (Qwen3-Reranker style ``Qwen3ForCausalLM``) on local disk, for tests.

``make_qwen3_reranker(out_dir)`` writes ``config.json``, ``model.safetensors``, ``tokenizer.json`` and
``tokenizer_config.json``: a 2-layer Qwen3 (hidden 32, grouped-query attention, rotary positions) and an offline
byte-level BPE tokenizer in Qwen's layout (no special tokens added around a text, ``<|endoftext|>`` pads) that
has the chat tokens of the reranker's prompt (``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``</think>``) and
``yes`` and ``no`` as single tokens, trained on the corpus of ``tests/tiny_checkpoints.py``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

try:  # `python -m pytest` from the repository root (or importlib import mode)
    from tests.tiny_checkpoints import HIDDEN_SIZE, corpus
except ImportError:  # pytest's default "prepend" import mode puts tests/ itself on sys.path
    from tiny_checkpoints import HIDDEN_SIZE, corpus

__all__ = ["CHAT_TOKENS", "make_qwen3_reranker"]

CHAT_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_THINK_TOKENS = ("<think>", "</think>")  # added, but not special, as in Qwen3's tokenizer
_VOCAB_SIZE = 700
# The words of the reranker's prompt, and the answers, so that BPE learns them (``yes``/``no`` as one token each).
_PROMPT_LINES = [
    "system",
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided.",
    'Note that the answer can only be "yes" or "no".',
    "user",
    "assistant",
    "<Instruct>: Given a web search query, retrieve relevant passages that answer the query",
    "<Query>: what is the capital of China?",
    "<Document>: The capital of China is Beijing.",
]


def _train_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=list(CHAT_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = corpus() + _PROMPT_LINES * 20 + ["yes", "no"] * 200
    tokenizer.train_from_iterator(lines, trainer=trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CHAT_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in _THINK_TOKENS])
    for word in ("yes", "no"):
        if tokenizer.token_to_id(word) is None:
            raise RuntimeError(f"the tiny BPE did not learn `{word}` as one token")
    return tokenizer


def make_qwen3_reranker(out_dir: Path, *, seed: int = 0, max_length: int = 256) -> Path:
    """Write a tiny random Qwen3 reranker into ``out_dir`` and return ``out_dir``.

    ``max_length`` is both ``max_position_embeddings`` and the tokenizer's ``model_max_length``. Same arguments
    give identical weights.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(),
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        model_max_length=max_length,
        model_input_names=["input_ids", "attention_mask"],
    )
    tokenizer.save_pretrained(out_dir)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=max_length,
        initializer_range=0.5,  # as tiny_checkpoints: outputs of different inputs clearly differ
        tie_word_embeddings=True,  # as Qwen3-Reranker-0.6B
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        architectures=["Qwen3ForCausalLM"],
    )
    torch.manual_seed(seed)
    Qwen3ForCausalLM(config).eval().save_pretrained(out_dir)
    return out_dir
