"""The NER decoder (``tasks/token_classification/ner.py``) against transformers' pipeline, every strategy.

Tiny random token classifiers (``tests/tiny_ner.py``) for the three tokenizer families: WordPiece (bert),
byte-level BPE (roberta) and Unigram/"▁" (xlm-roberta). The numpy postprocessing runs on logits computed by the
PyTorch model on ``encode_tokens``' padded batch; the pipeline runs each text on its own.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: nothing may be downloaded

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, pipeline

from tritongen.tasks.token_classification.ner import (
    STRATEGIES,
    Aggregation,
    TokenVocab,
    aggregate,
    aggregate_batch,
    encode_tokens,
    encoded_row,
)

pytestmark = pytest.mark.build  # the tests make or load tiny models

try:  # `python -m pytest` from the repository root (or importlib import mode)
    from tests.tiny_ner import NER_LABELS, make_token_classifier
except ImportError:  # pytest's default "prepend" import mode puts tests/ itself on sys.path
    from tiny_ner import NER_LABELS, make_token_classifier

ARCHS = ("bert", "roberta", "xlm-roberta")  # WordPiece, byte-level BPE, Unigram
MAX_LENGTH = 32
SCORE_TOL = 1e-4
LONG = " ".join(["Zoë met the señor in São Paulo and 東京 🙂 yesterday."] * 8)
TEXTS = [
    "Zoë met the señor in São Paulo and Köln.",
    "東京の学生 visits 北京の夜 with ソフトウェア, 한국어 문장 too",
    "Emoji 🙂 party 🎉🚀 with 👍🏽 and ❤️!",
    "Hello   world,   repeated    spaces   ",
    "x<unk>y [UNK]z 龍 ŋ <mask> done",  # unknown characters and special-token text
    "",
    "crème brûlée naïve résumé jalapeño piñata\tStraße\nKöln",
    "don't can't won't it's e-mail @ example.com 3.14",
    LONG,
]


class Setup:
    """One checkpoint, its pipeline, and the numpy side's inputs for all of ``TEXTS``."""

    def __init__(self, arch: str, path: Path) -> None:
        self.arch = arch
        self.path = path
        self.pipe = pipeline("token-classification", model=str(path), device="cpu")
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.vocab = TokenVocab.from_files(path / "tokenizer.json", path / "tokenizer_config.json")
        self.id2label = self.pipe.model.config.id2label
        self.encoded = encode_tokens(self.tokenizer, TEXTS, max_length=MAX_LENGTH)
        feed = {name: torch.from_numpy(self.encoded[name]) for name in self.pipe.tokenizer.model_input_names}
        with torch.inference_mode():
            self.logits = self.pipe.model(**feed).logits.numpy()

    def aggregation(self, strategy: str = "simple", **kwargs: Any) -> Aggregation:
        return Aggregation.of(self.id2label, strategy=strategy, tokenizer=kwargs.pop("tokenizer", self.vocab), **kwargs)

    def ours(self, row: int, strategy: str, **kwargs: Any) -> list[dict[str, Any]]:
        return aggregate(
            self.logits[row], encoded_row(self.encoded, row), TEXTS[row], self.aggregation(strategy, **kwargs)
        )

    def reference(self, row: int, strategy: str, **kwargs: Any) -> list[dict[str, Any]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Tokenizer does not support real words" (BPE, Unigram)
            return self.pipe(TEXTS[row], aggregation_strategy=strategy, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def setups(tmp_path_factory: pytest.TempPathFactory, _one_thread) -> dict[str, Setup]:
    root = tmp_path_factory.mktemp("tiny-ner")
    return {arch: Setup(arch, make_token_classifier(arch, root / arch, max_length=MAX_LENGTH)) for arch in ARCHS}


def assert_same_entities(got: list[dict[str, Any]], want: list[dict[str, Any]], context: str) -> None:
    assert len(got) == len(want), f"{context}: {len(got)} entities, pipeline {len(want)}\n{got}\n{want}"
    for i, (ours, theirs) in enumerate(zip(got, want, strict=True)):
        assert set(ours) == set(theirs), f"{context}[{i}]: keys {sorted(ours)} vs {sorted(theirs)}"
        for key in theirs:
            if key == "score":
                assert abs(ours[key] - float(theirs[key])) <= SCORE_TOL, f"{context}[{i}]: {ours} vs {theirs}"
            else:
                assert ours[key] == theirs[key], f"{context}[{i}].{key}: {ours[key]!r} vs {theirs[key]!r}"
                assert type(ours[key]) is type(theirs[key]) or theirs[key] is None, f"{context}[{i}].{key} type"


@pytest.mark.parametrize("arch", ARCHS)
def test_encoding_matches_transformers(setups: dict[str, Setup], arch: str) -> None:
    setup = setups[arch]
    enc = setup.encoded
    assert set(enc) == {"input_ids", "attention_mask", "token_type_ids", "offsets", "special_mask", "word_ids"}
    assert all(array.dtype == np.int64 for array in enc.values())
    assert enc["offsets"].shape == (*enc["input_ids"].shape, 2)
    assert enc["input_ids"].shape[1] == MAX_LENGTH  # the long text fills it: truncated, not overflowed
    auto = AutoTokenizer.from_pretrained(setup.path)
    assert auto.model_max_length == MAX_LENGTH
    for row, text in enumerate(TEXTS):
        # The pipeline's own preprocessing call (truncation=True -> model_max_length).
        ref = auto(text, truncation=True, return_special_tokens_mask=True, return_offsets_mapping=True)
        n = len(ref["input_ids"])
        assert int(enc["attention_mask"][row].sum()) == n
        assert enc["input_ids"][row, :n].tolist() == ref["input_ids"]
        assert enc["special_mask"][row, :n].tolist() == ref["special_tokens_mask"]
        assert [tuple(pair) for pair in enc["offsets"][row, :n].tolist()] == [tuple(p) for p in ref["offset_mapping"]]
        assert enc["word_ids"][row, :n].tolist() == [-1 if w is None else w for w in ref.word_ids()]
        if "token_type_ids" in ref:
            assert enc["token_type_ids"][row, :n].tolist() == ref["token_type_ids"]
        # Padding: pad id, masked out, special, no word.
        assert (enc["input_ids"][row, n:] == auto.pad_token_id).all()
        assert (enc["attention_mask"][row, n:] == 0).all() and (enc["special_mask"][row, n:] == 1).all()
        assert (enc["word_ids"][row, n:] == -1).all()
    assert int(enc["attention_mask"][TEXTS.index(LONG)].sum()) == MAX_LENGTH


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("arch", ARCHS)
def test_matches_pipeline(setups: dict[str, Setup], arch: str, strategy: str) -> None:
    setup = setups[arch]
    found = 0
    for row, text in enumerate(TEXTS):
        want = setup.reference(row, strategy)
        assert_same_entities(setup.ours(row, strategy), want, f"{arch}/{strategy}/{text[:20]!r}")
        found += len(want)
    assert found >= 10, "the tiny model should tag plenty of entities"


@pytest.mark.parametrize("arch", ARCHS)
def test_word_strategies_differ_from_simple(setups: dict[str, Setup], arch: str) -> None:
    """The texts exercise subword grouping: word-level strategies give other entities than ``simple``."""
    setup = setups[arch]
    for strategy in ("first", "average", "max"):
        assert any(setup.ours(row, strategy) != setup.ours(row, "simple") for row in range(len(TEXTS))), strategy


@pytest.mark.parametrize("arch", ARCHS)
def test_ignore_labels_and_unknown_token(setups: dict[str, Setup], arch: str) -> None:
    setup = setups[arch]
    # The unknown token id agrees with transformers' also without tokenizer_config.json.
    assert TokenVocab.from_tokenizer(setup.tokenizer).unk_id == setup.pipe.tokenizer.unk_token_id
    assert setup.vocab.unk_id == setup.pipe.tokenizer.unk_token_id
    for strategy in ("none", "simple", "average"):
        for ignore in ([], ["O", "PER"], ["B-LOC", "I-ORG"]):
            for row in range(len(TEXTS)):
                want = setup.reference(row, strategy, ignore_labels=ignore)
                got = setup.ours(row, strategy, ignore_labels=ignore, tokenizer=setup.tokenizer)
                assert_same_entities(got, want, f"{arch}/{strategy}/ignore={ignore}/{row}")


def test_multi_label_config_still_softmax(setups: dict[str, Setup]) -> None:
    setup = setups["bert"]
    config = setup.pipe.model.config
    saved = config.problem_type
    config.problem_type = "multi_label_classification"
    try:
        for row in range(3):
            assert_same_entities(setup.ours(row, "simple"), setup.reference(row, "simple"), f"multi-label/{row}")
    finally:
        config.problem_type = saved


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_half_precision_and_label_forms(setups: dict[str, Setup], arch: str) -> None:
    setup = setups[arch]
    batch = aggregate_batch(setup.logits, setup.encoded, TEXTS, setup.aggregation("max"))
    assert batch == [setup.ours(row, "max") for row in range(len(TEXTS))]
    as_list = aggregate_batch(
        setup.logits, setup.encoded, TEXTS, Aggregation.of(list(NER_LABELS), tokenizer=setup.tokenizer)
    )
    as_json = Aggregation.of({str(i): n for i, n in enumerate(NER_LABELS)}, tokenizer=setup.vocab)
    as_json = aggregate_batch(setup.logits, setup.encoded, TEXTS, as_json)
    assert as_list == as_json == [setup.ours(row, "simple") for row in range(len(TEXTS))]
    # float16 logits are scored in float32, as the pipeline does.
    by_name = Aggregation.of(NER_LABELS, tokenizer=setup.vocab)
    half = aggregate_batch(setup.logits.astype(np.float16), setup.encoded, TEXTS, by_name)
    assert sum(map(len, half)) > 0


def test_without_offsets_matches_pipeline_internals(setups: dict[str, Setup]) -> None:
    """``offsets=None`` (a tokenizer without offsets) is what the pipeline does for slow tokenizers."""
    setup = setups["bert"]
    pipe = setup.pipe
    enc = setup.encoded
    for row, text in enumerate(TEXTS):
        logits = setup.logits[row]
        exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = exp / exp.sum(axis=-1, keepdims=True)
        for strategy in ("none", "simple"):
            enum = type(pipe._sanitize_parameters(aggregation_strategy=strategy)[2]["aggregation_strategy"])
            pre = pipe.gather_pre_entities(
                text, enc["input_ids"][row], scores, None, enc["special_mask"][row], enum(strategy)
            )
            want = [e for e in pipe.aggregate(pre, enum(strategy)) if e.get("entity", e.get("entity_group")) != "O"]
            tokens = {"special_mask": enc["special_mask"][row], "input_ids": enc["input_ids"][row]}
            got = aggregate(logits, tokens, text, setup.aggregation(strategy))
            assert_same_entities(got, want, f"no-offsets/{strategy}/{row}")
            assert all(e["start"] is None and e["end"] is None for e in got)


def test_errors(setups: dict[str, Setup]) -> None:
    setup = setups["bert"]
    enc = setup.encoded
    logits, tokens = setup.logits[0], encoded_row(enc, 0)
    with pytest.raises(ValueError, match=r"unknown aggregation strategy 'longest'.*none, simple, first, average, max"):
        aggregate(logits, tokens, TEXTS[0], setup.aggregation("longest"))
    with pytest.raises(ValueError, match="valid strategies"):
        aggregate_batch(setup.logits, enc, TEXTS, setup.aggregation(""))
    for strategy in ("first", "average", "max"):
        with pytest.raises(ValueError, match=f"{strategy!r} needs word information"):
            aggregate(logits, {**tokens, "offsets": None}, TEXTS[0], setup.aggregation(strategy))
    with pytest.raises(ValueError, match="needs `tokenizer`"):
        Aggregation.of(setup.id2label, strategy="simple")
    with pytest.raises(ValueError, match="logits have"):
        aggregate(logits[:-1], tokens, TEXTS[0], setup.aggregation())
    with pytest.raises(ValueError, match="max_length"):
        encode_tokens(setup.tokenizer, ["x"], max_length=0)
    # Strategy names are case-insensitive, as in the pipeline.
    assert aggregate(logits, tokens, TEXTS[0], setup.aggregation("SIMPLE")) == setup.ours(0, "simple")
    # encode_tokens leaves the tokenizer's own settings alone.
    setup.tokenizer.enable_truncation(7)
    encode_tokens(setup.tokenizer, ["hello world"], max_length=MAX_LENGTH)
    assert setup.tokenizer.truncation["max_length"] == 7 and setup.tokenizer.padding is None
    setup.tokenizer.no_truncation()
