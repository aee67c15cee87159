"""Checks for ``tests/tiny_checkpoints.py``: the tiny checkpoints load offline and behave like real ones."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: nothing may be downloaded

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline

pytestmark = pytest.mark.build  # the tests make or load tiny models

try:  # `python -m pytest` from the repository root (or importlib import mode)
    from tests.tiny_checkpoints import _KINDS, ARCHITECTURES, _train_tokenizer, label_names, make_checkpoint
except ImportError:  # pytest's default "prepend" import mode puts tests/ itself on sys.path
    from tiny_checkpoints import _KINDS, ARCHITECTURES, _train_tokenizer, label_names, make_checkpoint

MAX_LENGTH = 64
TASKS = ("classification", "embedding")
TOKEN_TYPE_ARCHS = {"bert", "electra", "albert", "deberta-v2", "nomic_bert"}

LONG = " ".join(["The quick brown fox jumps over the lazy dog near the café in 東京 🙂."] * 30)
TEXTS = [
    "",
    "Hello!",
    "I love it.",
    LONG,
    "Café naïve Ünïcödé résumé Straße 東京 北京 こんにちは",
    "I love it 🙂🙂 👍🏽 🚀",
    "   leading and   trailing spaces   ",
    "HeLLo WoRLD, don't <mask> stop!",
]
PAIRS = [
    ("What is this?", "A tiny test 🙂"),
    ("", "only the second text"),
    (LONG, "short pair"),
    (LONG, LONG),
]

Builder = Callable[..., Path]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Builder:
    """Build each (arch, task) checkpoint once per module and return its directory."""
    built: dict[tuple[str, str], Path] = {}
    root = tmp_path_factory.mktemp("tiny")

    def get(arch: str, task: str = "classification") -> Path:
        if (arch, task) not in built:
            built[arch, task] = make_checkpoint(arch, root / f"{arch}-{task}", task=task, max_length=MAX_LENGTH)
        return built[arch, task]

    return get


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_loads_offline(checkpoint: Builder, arch: str, task: str) -> None:
    path = checkpoint(arch, task)
    tokenizer = AutoTokenizer.from_pretrained(path)
    config = AutoConfig.from_pretrained(path)
    model_cls = AutoModelForSequenceClassification if task == "classification" else AutoModel
    model = model_cls.from_pretrained(path)
    assert (path / "tokenizer.json").is_file() and (path / "model.safetensors").is_file()
    assert config.model_type == arch
    assert config.vocab_size == len(tokenizer) and 300 <= config.vocab_size <= 1000
    assert tokenizer.model_max_length == MAX_LENGTH
    offset = 2 if arch in {"roberta", "xlm-roberta", "mpnet"} else 0
    assert config.max_position_embeddings == MAX_LENGTH + offset
    assert config.pad_token_id == tokenizer.pad_token_id
    assert config.architectures[0] == type(model).__name__
    if task == "classification":
        assert config.architectures[0].endswith("ForSequenceClassification")
        assert config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
        assert config.label2id == {"negative": 0, "neutral": 1, "positive": 2}
        assert not (path / "modules.json").exists()
    else:
        assert not config.architectures[0].endswith("ForSequenceClassification")
        modules = json.loads((path / "modules.json").read_text())
        assert [(m["path"], m["type"].rsplit(".", 1)[1]) for m in modules] == [
            ("", "Transformer"),
            ("1_Pooling", "Pooling"),
            ("2_Normalize", "Normalize"),
        ]
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
        assert pooling["pooling_mode_mean_tokens"] is True and pooling["word_embedding_dimension"] == config.hidden_size
        assert not any(
            v for k, v in pooling.items() if k.startswith("pooling_mode") and k != "pooling_mode_mean_tokens"
        )
        st_config = json.loads((path / "sentence_bert_config.json").read_text())
        assert st_config == {"max_seq_length": MAX_LENGTH, "do_lower_case": False}


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tokenizer_json_matches_auto_tokenizer(checkpoint: Builder, arch: str, task: str) -> None:
    path = checkpoint(arch, task)
    hf = AutoTokenizer.from_pretrained(path)
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    raw.enable_truncation(MAX_LENGTH)
    cases: list[tuple[str, str | None]] = [(t, None) for t in TEXTS] + list(PAIRS)
    for text, pair in cases:
        enc = raw.encode(text, pair)
        got = hf(text, pair, truncation=True)
        label = f"{arch}: {text[:30]!r} / {pair and pair[:30]!r}"
        assert got["input_ids"] == enc.ids, label
        assert got["attention_mask"] == enc.attention_mask, label
        if "token_type_ids" in got:
            assert got["token_type_ids"] == enc.type_ids, label
        assert len(enc.ids) <= MAX_LENGTH
        if text == LONG:
            assert len(enc.ids) == MAX_LENGTH, "the long text must be truncated to exactly max_length"
    framing = [hf.cls_token_id, hf.sep_token_id] if hf.cls_token_id is not None else [hf.bos_token_id, hf.eos_token_id]
    assert raw.encode("").ids == framing
    assert hf.unk_token_id not in raw.encode(TEXTS[4]).ids, "corpus characters must all be in the vocabulary"


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_token_type_ids_rule(checkpoint: Builder, arch: str) -> None:
    for task in TASKS:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint(arch, task))
        expected = arch in TOKEN_TYPE_ARCHS
        assert ("token_type_ids" in tokenizer.model_input_names) == expected
        assert ("token_type_ids" in tokenizer("a", "b")) == expected
    if arch in TOKEN_TYPE_ARCHS:
        assert tokenizer("a b", "c")["token_type_ids"][-1] == 1


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_classification(checkpoint: Builder, arch: str) -> None:
    path = checkpoint(arch)
    classifier = pipeline("text-classification", model=str(path), device="cpu")
    config = AutoConfig.from_pretrained(path)
    for text in ["I love it 🙂", "Terrible, awful service.", LONG]:
        (result,) = classifier(text, truncation=True)
        assert result["label"] in config.id2label.values()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    batch = tokenizer(
        ["I love it 🙂", "Terrible, awful service.", LONG], padding=True, truncation=True, return_tensors="pt"
    )
    assert batch["input_ids"].shape[1] == MAX_LENGTH  # a full-length input fits the position embeddings
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (3, 3)
    assert (logits[0] - logits[1]).abs().max() > 1e-3, "different inputs should give different logits"


def test_weights_depend_only_on_seed(tmp_path: Path) -> None:
    first = load_file(make_checkpoint("bert", tmp_path / "a", seed=7) / "model.safetensors")
    again = load_file(make_checkpoint("bert", tmp_path / "b", seed=7) / "model.safetensors")
    other = load_file(make_checkpoint("bert", tmp_path / "c", seed=8) / "model.safetensors")
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "c" / "tokenizer.json").read_bytes()


def test_tokenizers_identical_across_processes() -> None:
    """Training must not depend on hash seeds or threads, so a fresh process builds the same vocabularies."""
    here = "".join(_train_tokenizer(kind).to_str() for kind in _KINDS)
    code = (
        "import hashlib, sys; sys.path.insert(0, sys.argv[1]); import tiny_checkpoints as t; "
        "print(hashlib.sha256(''.join(t._train_tokenizer(k).to_str() for k in t._KINDS).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parents[1])],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip().splitlines()[-1] == hashlib.sha256(here.encode()).hexdigest()


def test_options_and_errors(tmp_path: Path) -> None:
    path = make_checkpoint("roberta", tmp_path / "two", num_labels=2, max_length=32, task="classification")
    config = AutoConfig.from_pretrained(path)
    assert config.id2label == {0: "negative", 1: "positive"} and config.max_position_embeddings == 34
    assert AutoTokenizer.from_pretrained(path).model_max_length == 32
    assert label_names(4) == ["anger", "disgust", "fear", "joy"]
    assert label_names(20)[-1] == "LABEL_19"
    with pytest.raises(ValueError):
        make_checkpoint("gpt2", tmp_path / "bad")
    with pytest.raises(ValueError):
        make_checkpoint("bert", tmp_path / "bad", task="generation")


@pytest.mark.parametrize(
    ("arch", "first", "last", "pad"),
    [
        ("modernbert", "[CLS]", "[SEP]", "[PAD]"),
        ("eurobert", "<|begin_of_text|>", "<|end_of_text|>", "<|end_of_text|>"),  # Llama 3 pads with its eos
    ],
)
def test_tokenizer_frames_text_like_the_real_one(checkpoint: Builder, arch: str, first: str, last: str, pad: str):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint(arch))
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("Hello world")["input_ids"])
    assert (tokens[0], tokens[-1], tokenizer.pad_token) == (first, last, pad)
    assert "Ġworld" in tokens or "Ġwor" in tokens, "byte-level BPE marks the space with Ġ"


def test_modernbert_sliding_window_shapes_long_rows(checkpoint: Builder) -> None:
    """The tiny ModernBERT's local layer sees 8 tokens each side, fewer than a 64-token row holds."""
    path = checkpoint("modernbert", "embedding")
    tokenizer = AutoTokenizer.from_pretrained(path)
    batch = tokenizer([LONG], truncation=True, return_tensors="pt")
    local = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    config = AutoConfig.from_pretrained(path)
    assert config.layer_types == ["full_attention", "sliding_attention"] and config.local_attention == 16
    wide = AutoModel.from_pretrained(path, attn_implementation="eager", local_attention=4 * MAX_LENGTH).eval()
    with torch.no_grad():
        narrow_out = local(**batch).last_hidden_state
        wide_out = wide(**batch).last_hidden_state
    assert batch["input_ids"].shape[1] == MAX_LENGTH
    assert (narrow_out - wide_out).abs().max() > 1e-3, "the window must change what long rows see"


def test_t5_embedder_is_the_encoder_alone_and_closes_texts_with_eos(tmp_path: Path) -> None:
    from transformers import T5EncoderModel

    path = make_checkpoint("t5", tmp_path / "t5", task="embedding", max_length=MAX_LENGTH)
    config = AutoConfig.from_pretrained(path)
    assert config.architectures == ["T5EncoderModel"] and config.n_positions == MAX_LENGTH
    T5EncoderModel.from_pretrained(path)  # every weight present: no decoder is saved
    tokenizer = AutoTokenizer.from_pretrained(path)
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    for text, pair in [(t, None) for t in TEXTS] + list(PAIRS):
        assert tokenizer(text, pair)["input_ids"] == raw.encode(text, pair).ids
    assert raw.encode("").ids == [tokenizer.eos_token_id] and tokenizer.pad_token == "<pad>"
    assert "token_type_ids" not in tokenizer("a", "b")
    with pytest.raises(ValueError, match="embedders only"):
        make_checkpoint("t5", tmp_path / "t5-cls", task="classification")
