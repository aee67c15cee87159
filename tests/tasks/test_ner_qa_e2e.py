"""Token classification and question answering through the real server, against the transformers pipelines.

NER: tiny random ``*ForTokenClassification`` checkpoints (WordPiece, byte-level BPE and Unigram tokenizers),
one ensemble per aggregation strategy, compared with transformers 5's ``TokenClassificationPipeline``.
QA: the tiny checkpoints of ``tests/assets/qa`` against the answers the transformers 4.57 pipeline gave
(``tests/assets/qa/golden.json``, made by ``scripts/make_qa_golden.py``), with default, short and
"no answer" window settings.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.tiny_ner import make_token_classifier
from tritongen.builder.spec import load_spec
from tritongen.errors import ServerError
from tritongen.model.checkpoint import inspect_checkpoint
from tritongen.serve.client import infer
from tritongen.tasks import detect_task

QA_ASSETS = Path(__file__).parents[1] / "assets" / "qa"
GOLDEN = json.loads((QA_ASSETS / "golden.json").read_text(encoding="utf-8"))
SCORE_TOLERANCE = 1e-4

NER_TEXTS = [
    "My name is Wolfgang and I live in Berlin.",
    "Zoë ate crème brûlée at the old café in São Paulo 🎉 with Łukasz.",
    "東京の学生 loves 北京の夜, and the café in Zürich.",
    "The team 👍🏽 sent the new phone 📱 to the family in Москва!",
    "spaces,  tabs\tand\nnewlines   everywhere",
    "",
    # Several times the model's 32 tokens: windows overlapping by the stride, entities merged.
    " ".join(f"Berlin{i} and Paris, then São Paulo" for i in range(30)),
    " ".join(f"Zoë met Łukasz in Zürich 🎉 on day {i}; the café in 東京 was closed." for i in range(12)),
]
# (checkpoint arch, aggregation strategy, ner_stride): every strategy, each tokenizer family more than once,
# the default stride (a quarter window: 8 tokens) and an explicit one.
NER_BUILDS = {
    "ner_bert_simple": ("bert", "simple", None),
    "ner_roberta_first": ("roberta", "first", 5),
    "ner_xlmr_max": ("xlm-roberta", "max", None),
    "ner_bert_average": ("bert", "average", 12),
    "ner_roberta_none": ("roberta", "none", None),  # `none` cannot merge overlaps: windows do not overlap
}
NER_WINDOW = 32
# ensemble name -> (asset checkpoint, golden settings key, build spec settings)
QA_BUILDS = {
    "qa_bert": ("bert", "defaults", {}),
    "qa_roberta": ("roberta", "defaults", {}),
    "qa_xlmr": ("xlm-roberta", "defaults", {}),
    "qa_albert": ("albert", "defaults", {}),  # accent-stripping, lower-casing normaliser; undeclared inputs
    "qa_bert_impossible": ("bert", "impossible", {"qa_handle_impossible_answer": True}),
    "qa_roberta_short": (
        "roberta",
        "short_windows",
        {"qa_max_seq_len": 64, "qa_doc_stride": 16, "max_batch_size": 256},  # ~100 windows per request
    ),
}


@pytest.fixture(scope="module")
def ner_checkpoints(checkpoint_cache):
    archs = {arch for arch, _, _ in NER_BUILDS.values()}
    return {arch: checkpoint_cache(make_token_classifier, arch, seed=1) for arch in archs}


@pytest.fixture(scope="module")
def served(ner_checkpoints, builds, shared_server):
    built = [
        builds(ner_checkpoints[arch], name, aggregation_strategy=strategy, ner_stride=stride)
        for name, (arch, strategy, stride) in NER_BUILDS.items()
    ]
    built += [builds(QA_ASSETS / arch, name, **settings) for name, (arch, _, settings) in QA_BUILDS.items()]
    return shared_server.serve(*built)


def test_detect_task_finds_token_classification_and_question_answering(ner_checkpoints):
    assert detect_task(inspect_checkpoint(str(ner_checkpoints["bert"]))).name == "token-classification"
    assert detect_task(inspect_checkpoint(str(QA_ASSETS / "roberta"))).name == "question-answering"


def _same_entities(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for key, value in w.items():
            if key == "score":
                assert g[key] == pytest.approx(float(value), abs=SCORE_TOLERANCE)
            else:
                assert g[key] == (int(value) if isinstance(value, np.integer) else value), key


def _strided_pipeline(pipe, text: str, stride: int) -> list[dict]:
    """``pipe(text, stride=stride)``; for ``none`` (which the pipeline refuses with a stride) each window on its own.

    ``none`` windows do not overlap (stride 0), so the reference is the pipeline's own per-window result.
    """
    if pipe._postprocess_params.get("aggregation_strategy").value != "none":
        return pipe(text, stride=stride)
    assert stride == 0
    params = {"return_overflowing_tokens": True, "padding": True, "stride": 0}
    entities = []
    for chunk in pipe.preprocess(text, is_split_into_words=False, tokenizer_params=params):
        output = pipe.forward(chunk)
        output["sentence"] = text  # the pipeline hands the text to the first window only
        entities += pipe.postprocess([output], **pipe._postprocess_params)
    return entities


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(NER_BUILDS))
def test_ner_entities_match_strided_pipeline(served, ner_checkpoints, name):
    """Nothing past the model's length is lost: long texts give the strided pipeline's entities."""
    from transformers import pipeline

    from tritongen.tasks.token_classification import stride_of

    arch, strategy, stride = NER_BUILDS[name]
    stride = stride_of(load_spec(model="x", aggregation_strategy=strategy, ner_stride=stride), NER_WINDOW)
    pipe = pipeline("token-classification", model=str(ner_checkpoints[arch]), aggregation_strategy=strategy)
    # A few texts per request (each request's windows go to the model step as one batch, at most 64 rows).
    rows = [
        row for i in range(0, len(NER_TEXTS), 3) for row in infer(NER_TEXTS[i : i + 3], name=name, url=served.grpc_url)
    ]
    found = beyond = 0
    for text, row in zip(NER_TEXTS, rows, strict=True):
        got = json.loads(row["ENTITIES"])
        _same_entities(got, _strided_pipeline(pipe, text, stride))
        for entity in got:  # offsets point into the original text
            assert entity["start"] <= entity["end"] <= len(text)
        found += len(got)
        first_window = pipe.tokenizer(text, truncation=True, return_offsets_mapping=True)["offset_mapping"]
        truncated_at = first_window[-2][1] if text else 0  # where the last real token of the first window ends
        beyond += sum(entity["start"] >= truncated_at for entity in got)
    assert found > 10  # random heads label many tokens: the comparison is not vacuous
    assert beyond > 10  # and many entities lie past the first window, where truncation used to cut them


def _ask(served, name: str, cases: list[dict]) -> list[dict]:
    rows = []
    for start in range(0, len(cases), 4):  # a few pairs per request: their windows go to the model as one batch
        chunk = cases[start : start + 4]
        rows += infer(
            [c["question"] for c in chunk],
            name=name,
            url=served.grpc_url,
            text_input="QUESTION",
            inputs={"CONTEXT": [c["context"] for c in chunk]},
        )
    return rows


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(QA_BUILDS))
def test_qa_answers_match_v4_pipeline_golden(served, name):
    arch, setting, _ = QA_BUILDS[name]
    golden = GOLDEN["checkpoints"][arch]
    rows = _ask(served, name, golden["cases"])
    expected = golden["outputs"][setting]
    assert len(rows) == len(expected)
    for case, row, want in zip(golden["cases"], rows, expected, strict=True):
        if want == []:  # v4 found no span at all (every candidate masked): we answer "" at -1, -1
            assert (row["ANSWER"], row["START"], row["END"], row["SCORE"]) == ("", -1, -1, 0.0), case
            continue
        want = want[0] if isinstance(want, list) else want
        assert (row["ANSWER"], row["START"], row["END"]) == (want["answer"], want["start"], want["end"]), case
        assert row["SCORE"] == pytest.approx(want["score"], abs=SCORE_TOLERANCE)
        assert case["context"][row["START"] : row["END"]] == row["ANSWER"]
    if setting == "impossible":
        assert any(row["ANSWER"] == "" for row in rows)  # "no answer" does win sometimes


def test_qa_golden_cases_include_a_context_that_needs_several_windows():
    # The served comparisons above only exercise window merging if some context spans several windows.
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(QA_ASSETS / "roberta" / "tokenizer.json"))
    longest = max(GOLDEN["checkpoints"]["roberta"]["cases"], key=lambda c: len(c["context"]))
    assert len(tokenizer.encode(longest["context"]).ids) > 3 * 64  # 64: the short-window build's window


@pytest.mark.e2e
def test_qa_bad_requests_get_clear_errors_and_server_keeps_serving(served):
    with pytest.raises(ServerError, match="CONTEXT"):
        infer(["Where?"], name="qa_bert", url=served.grpc_url, text_input="QUESTION")
    with pytest.raises(ServerError, match=r"INVALID_ARGUMENT.*`question` cannot be empty"):
        infer([""], name="qa_bert", url=served.grpc_url, text_input="QUESTION", inputs={"CONTEXT": ["Bob lives here."]})
    with pytest.raises(ServerError, match="`context` cannot be empty"):
        infer(["Who?"], name="qa_bert", url=served.grpc_url, text_input="QUESTION", inputs={"CONTEXT": [""]})
    row = infer(["Who?"], name="qa_bert", url=served.grpc_url, text_input="QUESTION", inputs={"CONTEXT": ["Bob"]})[0]
    assert row["ANSWER"] == "Bob"


@pytest.mark.e2e
def test_qa_request_with_too_many_windows_is_refused_clearly(served):
    context = "word " * 20_000  # hundreds of windows, more than max_batch_size
    with pytest.raises(ServerError, match="windows"):
        infer(
            ["Which word?"], name="qa_bert", url=served.grpc_url, text_input="QUESTION", inputs={"CONTEXT": [context]}
        )
    assert infer(["Who?"], name="qa_bert", url=served.grpc_url, text_input="QUESTION", inputs={"CONTEXT": ["Bob"]})
