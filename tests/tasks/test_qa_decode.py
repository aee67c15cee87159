"""``tritongen/tasks/question_answering/qa.py`` against the transformers 4.57 question-answering pipeline.

``tests/assets/qa/golden.json`` holds the v4 pipeline's answers for the tiny QA checkpoints next to it
(``scripts/make_qa_golden.py``). Here the same pairs are split with ``encode_windows``, run through the same
checkpoint with transformers 5 (all windows of all pairs in one padded batch) and decoded with
``decode_answers``; answers, character offsets and scores must match.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from tritongen.model.facts import model_inputs
from tritongen.tasks.question_answering import qa

pytestmark = pytest.mark.build  # the tests make or load tiny models

ASSETS = Path(__file__).parents[1] / "assets" / "qa"
GOLDEN = json.loads((ASSETS / "golden.json").read_text(encoding="utf-8"))
ARCHS = sorted(GOLDEN["checkpoints"])
SETTINGS = GOLDEN["settings"]
SCORE_TOLERANCE = 1e-4

_ENCODE_KEYS = ("max_seq_len", "doc_stride", "max_question_len")
_DECODE_KEYS = ("top_k", "max_answer_len", "handle_impossible_answer", "align_to_words")


@cache
def _checkpoint(arch: str):
    from transformers import AutoModelForQuestionAnswering

    path = ASSETS / arch
    config = json.loads((path / "tokenizer_config.json").read_text())
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    model = AutoModelForQuestionAnswering.from_pretrained(path).eval()
    return tokenizer, model, config


def _encode(arch: str, questions: list[str], contexts: list[str], **settings) -> qa.QAWindows:
    tokenizer, _, config = _checkpoint(arch)
    return qa.encode_windows(
        tokenizer,
        questions,
        contexts,
        qa.WindowSettings(
            pad_id=tokenizer.token_to_id(config["pad_token"]),
            model_max_length=config["model_max_length"],
            cls_id=tokenizer.token_to_id(config["cls_token"]),
            **settings,
        ),
    )


def _logits(arch: str, windows: qa.QAWindows) -> tuple[np.ndarray, np.ndarray]:
    _, model, _ = _checkpoint(arch)
    # The inputs the model takes (type ids for BERT and ALBERT), not the tokenizer config's list: the bert and
    # albert assets are saved without one, and transformers 5 would then leave the type ids out.
    inputs = {k: torch.from_numpy(v) for k, v in windows.model_inputs(model_inputs(model)).items()}
    with torch.inference_mode():
        out = model(**inputs)
    return out.start_logits.numpy(), out.end_logits.numpy()


def _as_list(result) -> list[dict]:
    return [result] if isinstance(result, dict) else list(result)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("arch", ARCHS)
def test_matches_v4_pipeline(arch: str, setting: str) -> None:
    kwargs = SETTINGS[setting]
    golden = GOLDEN["checkpoints"][arch]
    cases = golden["cases"]
    questions = [c["question"] for c in cases]
    contexts = [c["context"] for c in cases]

    windows = _encode(arch, questions, contexts, **{k: v for k, v in kwargs.items() if k in _ENCODE_KEYS})
    assert windows.num_examples == len(cases)
    start, end = _logits(arch, windows)
    answers = qa.AnswerSettings(**{k: v for k, v in kwargs.items() if k in _DECODE_KEYS})
    results = qa.decode_answers(start, end, windows, contexts, answers)

    assert len(results) == len(cases)
    for index, (got, want) in enumerate(zip(results, golden["outputs"][setting], strict=True)):
        where = f"{arch}/{setting} case {index} ({cases[index]['question']!r})"
        assert type(got) is type(want), f"{where}: {got!r} != {want!r}"
        got_list, want_list = _as_list(got), _as_list(want)
        assert [(a["answer"], a["start"], a["end"]) for a in got_list] == [
            (a["answer"], a["start"], a["end"]) for a in want_list
        ], where
        for g, w in zip(got_list, want_list, strict=True):
            assert list(g) == list(w), where  # same keys, same order
            assert abs(g["score"] - w["score"]) <= SCORE_TOLERANCE, f"{where}: {g} vs {w}"


def test_long_context_makes_several_windows() -> None:
    cases = GOLDEN["checkpoints"]["bert"]["cases"]
    longest = max(cases, key=lambda c: len(c["context"]))
    windows = _encode("bert", [longest["question"]], [longest["context"]], max_seq_len=64, doc_stride=16)
    assert windows.num_windows > 10
    assert windows.input_ids.shape[1] == 64
    defaults = _encode("bert", [longest["question"]], [longest["context"]])
    assert (defaults.max_seq_len, defaults.doc_stride) == (128, 64)  # v4: min(model_max_length, 384), half


@pytest.mark.parametrize("arch", ARCHS)
def test_windows_match_transformers_overflow(arch: str) -> None:
    """The windows equal the fast tokenizer's overflowing batch, and p_mask follows v4's rule."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ASSETS / arch)
    cases = GOLDEN["checkpoints"][arch]["cases"]
    case = max(cases, key=lambda c: len(c["context"]))
    windows = _encode(arch, [case["question"]], [case["context"]], max_seq_len=64, doc_stride=16)
    enc = tok(
        case["question"],
        case["context"],
        truncation="only_second",
        max_length=64,
        stride=16,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        return_token_type_ids=True,
    )
    assert windows.num_windows == len(enc["input_ids"])
    for row in range(windows.num_windows):
        n = int(windows.lengths[row])
        assert windows.input_ids[row, :n].tolist() == enc["input_ids"][row]
        assert windows.token_type_ids[row, :n].tolist() == enc["token_type_ids"][row]
        assert windows.offsets[row, :n].tolist() == [list(o) for o in enc["offset_mapping"][row]]
        v4_p_mask = [s != 1 for s in enc.sequence_ids(row)]
        for i, token in enumerate(enc["input_ids"][row]):
            if token == tok.cls_token_id:
                v4_p_mask[i] = False
        assert windows.p_mask[row, :n].tolist() == v4_p_mask
        assert windows.p_mask[row, n:].all() and not windows.attention_mask[row, n:].any()
        assert (windows.input_ids[row, n:] == tok.pad_token_id).all()


def test_auto_cls_id_is_the_leading_special_token() -> None:
    for arch in ARCHS:
        tokenizer, _, config = _checkpoint(arch)
        assert qa._first_special_id(tokenizer) == tokenizer.token_to_id(config["cls_token"])


def test_top_k_above_one_gives_a_list_and_logit_width_may_exceed_windows() -> None:
    tokenizer, _, _ = _checkpoint("bert")
    context = "The cat loves fresh coffee today and the dog loves the weather."
    windows = qa.encode_windows(tokenizer, ["Who loves coffee?"], [context])
    start, end = _logits("bert", windows)
    wide = [np.pad(a, ((0, 0), (0, 7)), constant_values=99.0) for a in (start, end)]  # bucket padding
    narrow = qa.decode_answers(start, end, windows, [context], qa.AnswerSettings(top_k=4))
    assert qa.decode_answers(*wide, windows, [context], qa.AnswerSettings(top_k=4)) == narrow
    assert isinstance(narrow[0], list) and len(narrow[0]) == 4
    assert [a["score"] for a in narrow[0]] == sorted((a["score"] for a in narrow[0]), reverse=True)
    for answer in narrow[0]:
        assert answer["answer"] == context[answer["start"] : answer["end"]]


def test_null_score_is_the_minimum_over_windows() -> None:
    """v4 keeps the smallest p_start[CLS] * p_end[CLS] of all windows as the "no answer" score."""
    tokenizer, _, _ = _checkpoint("bert")
    context = GOLDEN["checkpoints"]["bert"]["cases"][-1]["context"]
    windows = qa.encode_windows(tokenizer, ["Where?"], [context], qa.WindowSettings(max_seq_len=64, doc_stride=16))
    assert windows.num_windows >= 3
    cls_logits = np.full(windows.num_windows, 9.0, dtype=np.float32)
    cls_logits[1] = 6.0  # neither the first nor the last window
    logits = np.zeros(windows.input_ids.shape, dtype=np.float32)
    logits[:, 0] = cls_logits
    allowed = (~windows.p_mask).sum(axis=1)  # context tokens + CLS
    p_cls = np.exp(cls_logits) / (np.exp(cls_logits) + allowed - 1)
    settings = qa.AnswerSettings(top_k=3, handle_impossible_answer=True)
    answers = qa.decode_answers(logits, logits, windows, [context], settings)[0]
    null = answers[0]
    assert (null["answer"], null["start"], null["end"]) == ("", 0, 0)
    assert null["score"] == pytest.approx(float((p_cls**2).min()), rel=1e-5)
    assert null["score"] < float(p_cls[0] ** 2) and null["score"] < float(p_cls[-1] ** 2)


def test_encode_restores_tokenizer_settings() -> None:
    tokenizer = Tokenizer.from_file(str(ASSETS / "bert" / "tokenizer.json"))
    tokenizer.enable_truncation(10)
    tokenizer.enable_padding(pad_id=0, length=12)
    before = (tokenizer.truncation, tokenizer.padding)
    qa.encode_windows(
        tokenizer, ["Who?"], ["Zoë lives in São Paulo. " * 20], qa.WindowSettings(max_seq_len=32, doc_stride=8)
    )
    assert (tokenizer.truncation, tokenizer.padding) == before


@pytest.mark.parametrize(
    ("questions", "contexts", "message", "index"),
    [
        ([""], ["some context"], "`question` cannot be empty", 0),
        (["q?", "q2?"], ["ctx", ""], "`context` cannot be empty", 1),
        (["q?", "q2?"], ["ctx", None], "`context` cannot be None", 1),
        ([None], ["ctx"], "`question` cannot be None", 0),
        (["q?"], [b"bytes"], "`context` must be a string", 0),
        (["q?", "q?"], ["ctx"], "don't have the same lengths", None),
        ([], [], "no (question, context) pairs", None),
    ],
)
def test_bad_pairs_raise_value_error(questions, contexts, message, index) -> None:
    tokenizer, _, _ = _checkpoint("bert")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        qa.encode_windows(tokenizer, questions, contexts)
    assert isinstance(info.value, qa.QAInputError) and info.value.example_index == index


def test_question_too_long_for_the_window_is_an_input_error() -> None:
    tokenizer, _, _ = _checkpoint("bert")
    long_question = "where is the market and the river station " * 4  # ~70 tokens
    context = "The market is by the river. " * 20
    with pytest.raises(ValueError, match="question is too long") as info:
        qa.encode_windows(
            tokenizer, ["Where?", long_question], [context, context], qa.WindowSettings(max_seq_len=64, doc_stride=16)
        )
    assert info.value.example_index == 1
    # room left (128 - 3 - ~70) but not more than the stride: tokenizers would panic, not raise
    with pytest.raises(ValueError, match="must be more than doc_stride=64"):
        qa.encode_windows(tokenizer, [long_question], [context], qa.WindowSettings(max_seq_len=128, doc_stride=64))
    # a context that fits needs no truncation, so v4 (and qa.py) accept the same question
    wide = qa.WindowSettings(max_seq_len=128, doc_stride=64)
    windows = qa.encode_windows(tokenizer, [long_question], ["By the river."], wide)
    assert windows.num_windows == 1


def test_bad_settings_raise_value_error() -> None:
    tokenizer, _, _ = _checkpoint("bert")
    with pytest.raises(ValueError, match="is larger than `max_seq_len`"):
        qa.encode_windows(tokenizer, ["q?"], ["ctx"], qa.WindowSettings(max_seq_len=32, doc_stride=33))
    windows = qa.encode_windows(tokenizer, ["q?"], ["ctx"])
    logits = np.zeros(windows.input_ids.shape, dtype=np.float32)
    with pytest.raises(ValueError, match="top_k parameter should be >= 1"):
        qa.decode_answers(logits, logits, windows, ["ctx"], qa.AnswerSettings(top_k=0))
    with pytest.raises(ValueError, match="max_answer_len parameter should be >= 1"):
        qa.decode_answers(logits, logits, windows, ["ctx"], qa.AnswerSettings(max_answer_len=0))
    with pytest.raises(ValueError, match="contexts given"):
        qa.decode_answers(logits, logits, windows, ["ctx", "more"])
    with pytest.raises(ValueError, match="start_logits has shape"):
        qa.decode_answers(logits[:, :1], logits, windows, ["ctx"])
