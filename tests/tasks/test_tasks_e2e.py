"""Text-pair and multi-label classification, detected from the checkpoint and served for real."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.tiny_variants import make_multilabel_classifier, make_pair_classifier
from tritongen.model.checkpoint import inspect_checkpoint
from tritongen.serve.client import infer
from tritongen.tasks import detect_task

PAIRS = [
    ("A man is playing a guitar.", "Someone makes music."),
    ("The café in Zürich is closed today.", "Le café est fermé 😞"),
    ("東京は大きい", "Tokyo is big."),
    ("short", "a much longer second segment that goes on and on " * 20),
]
TEXTS = ["I love it", "Terrible, awful, bad.", "Ünïcödé and emoji 🎉", "word " * 200]


@pytest.fixture(scope="module")
def checkpoints(checkpoint_cache):
    return {
        "pair_bert": checkpoint_cache(make_pair_classifier, "bert"),
        "pair_roberta": checkpoint_cache(make_pair_classifier, "roberta"),
        # The same BERT pair model (same seed, same weights) with its tokenizer saved as transformers 5 saves one
        # nobody configured: no model_input_names. Served, it must still get the second segment's type ids.
        "pair_bert_undeclared": checkpoint_cache(make_pair_classifier, "bert", declare_inputs=False),
        "multi": checkpoint_cache(make_multilabel_classifier, "xlm-roberta"),
    }


def test_detect_task_picks_pair_and_multilabel(checkpoints):
    assert detect_task(inspect_checkpoint(str(checkpoints["pair_bert"]))).name == "text-pair-classification"
    assert detect_task(inspect_checkpoint(str(checkpoints["multi"]))).name == "classification"


@pytest.fixture(scope="module")
def served(checkpoints, builds, shared_server):
    return shared_server.serve(*(builds(path, name, multi_label_threshold=0.5) for name, path in checkpoints.items()))


def _pipeline_rows(path: Path, inputs: list, **kwargs) -> np.ndarray:
    from transformers import AutoConfig, pipeline

    pipe = pipeline("text-classification", model=str(path), top_k=None, device="cpu")
    label2id = {v: int(k) for k, v in AutoConfig.from_pretrained(str(path)).id2label.items()}
    rows = []
    for result in pipe(inputs, truncation=True, **kwargs):
        row = np.zeros(len(label2id), np.float32)
        for item in result:
            row[label2id[item["label"]]] = item["score"]
        rows.append(row)
    return np.stack(rows)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("name", "reference"),
    [("pair_bert", "pair_bert"), ("pair_roberta", "pair_roberta"), ("pair_bert_undeclared", "pair_bert")],
)
def test_text_pair_matches_pipeline(served, checkpoints, name, reference):
    rows = infer([a for a, _ in PAIRS], name=name, url=served.grpc_url, inputs={"TEXT_PAIR": [b for _, b in PAIRS]})
    expected = _pipeline_rows(checkpoints[reference], [{"text": a, "text_pair": b} for a, b in PAIRS])
    np.testing.assert_allclose([r["PROBABILITIES"] for r in rows], expected, atol=1e-4)
    labels = ["entailment", "neutral", "contradiction"]
    assert [r["LABEL"] for r in rows] == [labels[i] for i in expected.argmax(1)]


def test_undeclared_tokenizer_would_drop_type_ids_which_changes_the_answer(checkpoints):
    """Not vacuous: transformers 5 leaves the type ids out for the undeclared tokenizer, and that changes scores."""
    from transformers import AutoTokenizer

    pairs = [{"text": a, "text_pair": b} for a, b in PAIRS]
    assert "token_type_ids" not in AutoTokenizer.from_pretrained(str(checkpoints["pair_bert_undeclared"]))("a", "b")
    without_types = _pipeline_rows(checkpoints["pair_bert_undeclared"], pairs)
    assert np.abs(without_types - _pipeline_rows(checkpoints["pair_bert"], pairs)).max() > 1e-2


@pytest.mark.e2e
def test_text_pair_request_without_pair_gets_clear_error(served):
    from tritongen.errors import ServerError

    with pytest.raises(ServerError, match="TEXT_PAIR"):
        infer(["only one text"], name="pair_bert", url=served.grpc_url)
    assert infer(["a"], name="pair_bert", url=served.grpc_url, inputs={"TEXT_PAIR": ["b"]})[0]["LABEL"]


@pytest.mark.e2e
def test_multilabel_uses_sigmoid_and_threshold(served, checkpoints):
    rows = infer(TEXTS, name="multi", url=served.grpc_url)
    expected = _pipeline_rows(checkpoints["multi"], TEXTS)
    np.testing.assert_allclose([r["PROBABILITIES"] for r in rows], expected, atol=1e-4)
    labels = json.loads((checkpoints["multi"] / "config.json").read_text())["id2label"]
    for row, probs in zip(rows, expected, strict=True):
        chosen = json.loads(row["LABELS"])
        want = [labels[str(i)] for i in np.argsort(-probs, kind="stable") if probs[i] >= 0.5]
        assert [c["label"] for c in chosen] == want
