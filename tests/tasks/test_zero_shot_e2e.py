"""Zero-shot classification through the real server, against the transformers ``zero-shot-classification`` pipeline.

Tiny random NLI checkpoints (``tests/tiny_zeroshot.py``): a BERT (WordPiece, type ids) and a RoBERTa (byte-level
BPE, entailment first, so contradiction is the last logit), built single-label, multi-label with another
hypothesis template, and with a small ``max_batch_size`` for the too-many-pairs error. Requests hold several
texts with different label counts, so pairs of different requests and texts share model batches.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.tiny_zeroshot import make_nli_checkpoint
from tritongen.builder.spec import load_spec
from tritongen.cli import main
from tritongen.errors import ServerError, SpecError
from tritongen.model.checkpoint import inspect_checkpoint
from tritongen.serve.client import infer
from tritongen.tasks import detect_task
from tritongen.tasks.zero_shot_classification import zero_shot

SCORE_TOLERANCE = 1e-4
TEMPLATE = "Das Thema ist {}."
# ensemble -> (checkpoint, settings)
BUILDS = {
    "zs_bert": ("bert", {}),
    "zs_roberta": ("roberta", {}),
    "zs_bert_multi": ("bert", {"zero_shot_multi_label": True, "hypothesis_template": TEMPLATE}),
    "zs_small": ("roberta", {"max_batch_size": 4}),
}
CASES = [  # (text, candidate labels): 1 to 6 labels, non-ASCII, a text longer than the model (truncated)
    ("I have a problem with my iphone that needs to be resolved asap!!", ["urgent", "not urgent", "phone"]),
    ("Zoë ate crème brûlée at the café in São Paulo 🎉", ["food", "travel", "sports", "politics", "東京", "music"]),
    ("The match ended in a draw.", ["sports"]),
    ("ok", ["empty", "blank"]),
    (" ".join(f"word{i} is followed by a comma, a dash - and more text." for i in range(40)), ["long", "short"]),
    ("Same label twice", ["tie", "tie", "other"]),
]


@pytest.fixture(scope="module")
def checkpoints(checkpoint_cache):
    return {
        "bert": checkpoint_cache(make_nli_checkpoint, "bert", seed=3),
        "roberta": checkpoint_cache(make_nli_checkpoint, "roberta", labels=("ENTAILMENT", "NEUTRAL", "CONTRADICTION")),
    }


@pytest.fixture(scope="module")
def served(checkpoints, builds, shared_server):
    return shared_server.serve(
        *(
            builds(checkpoints[arch], name, task="zero-shot-classification", **settings)
            for name, (arch, settings) in BUILDS.items()
        )
    )


def _classify(served, name: str, cases, protocol: str = "grpc") -> list[dict]:
    url = served.grpc_url if protocol == "grpc" else served.http_url
    labels = [json.dumps(labels) for _, labels in cases]
    rows = infer([t for t, _ in cases], name=name, url=url, protocol=protocol, inputs={"CANDIDATE_LABELS": labels})
    return [{"labels": json.loads(r["LABELS"]), "scores": json.loads(r["SCORES"])} for r in rows]


def _pipeline_results(checkpoint, cases, **kwargs) -> list[dict]:
    from transformers import pipeline

    pipe = pipeline("zero-shot-classification", model=str(checkpoint))
    return [pipe(text, candidate_labels=labels, **kwargs) for text, labels in cases]


def _same(got: dict, want: dict) -> None:
    assert got["labels"] == want["labels"], (got, want)
    np.testing.assert_allclose(got["scores"], want["scores"], atol=SCORE_TOLERANCE)


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["zs_bert", "zs_roberta", "zs_bert_multi"])
def test_zero_shot_output_matches_pipeline_when_requests_have_different_label_counts(served, checkpoints, name):
    arch, settings = BUILDS[name]
    multi = settings.get("zero_shot_multi_label", False)
    kwargs = {"multi_label": multi, "hypothesis_template": settings.get("hypothesis_template", "This example is {}.")}
    want = _pipeline_results(checkpoints[arch], CASES, **kwargs)
    got = _classify(served, name, CASES[:2]) + _classify(served, name, CASES[2:])  # two requests, 9 and 8 pairs
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        _same(g, w)
    if not multi:  # single-label scores of a text sum to 1
        assert all(sum(g["scores"]) == pytest.approx(1.0, abs=1e-5) for g in got if len(g["scores"]) > 1)


@pytest.mark.e2e
def test_zero_shot_matches_pipeline_over_http_when_one_label_list_serves_every_text(served, checkpoints):
    texts = ["A goal in the last minute.", "Parliament passed the budget.", "ok"]
    labels = ["sports", "politics", "economy"]
    rows = infer(
        texts, name="zs_roberta", url=served.http_url, protocol="http",
        inputs={"CANDIDATE_LABELS": [json.dumps(labels)]},
    )  # fmt: skip
    want = _pipeline_results(checkpoints["roberta"], [(t, labels) for t in texts])
    assert len(rows) == len(want)
    for row, w in zip(rows, want, strict=True):
        _same({"labels": json.loads(row["LABELS"]), "scores": json.loads(row["SCORES"])}, w)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ("sports, politics", "CANDIDATE_LABELS\\[0\\] is not JSON"),
        ('{"a": 1}', "must be a JSON list of strings"),
        ('["a", 3]', "must be a JSON list of strings"),
        ("[]", "is empty"),
        ('["sports", ""]', "holds an empty label"),
        (json.dumps(["a", "b", "c", "d", "e"]), "needs 5 \\(text, label\\) pairs, more than the 4"),
        (json.dumps(["word " * 80]), "does not fit in the model's 64 tokens"),
    ],
)
def test_zero_shot_request_gets_invalid_argument_when_labels_are_bad(served, labels, message):
    with pytest.raises(ServerError, match=f"INVALID_ARGUMENT.*{message}"):
        infer(["Some text."], name="zs_small", url=served.grpc_url, inputs={"CANDIDATE_LABELS": [labels]})
    good = infer(["Some text."], name="zs_small", url=served.grpc_url, inputs={"CANDIDATE_LABELS": ['["a", "b"]']})
    assert sorted(json.loads(good[0]["LABELS"])) == ["a", "b"]  # the server keeps serving


@pytest.mark.e2e
def test_zero_shot_request_gets_invalid_argument_when_label_rows_do_not_match_texts(served):
    with pytest.raises(ServerError, match=r"INVALID_ARGUMENT.*CANDIDATE_LABELS has 2 rows for 3 texts"):
        infer(["a", "b", "c"], name="zs_bert", url=served.grpc_url, inputs={"CANDIDATE_LABELS": ['["x"]', '["y"]']})


@pytest.mark.e2e
def test_zero_shot_request_gets_invalid_argument_when_a_text_is_empty(served):
    # The pipeline refuses an empty sequence as well ("at least one sequence").
    with pytest.raises(ServerError, match=r"INVALID_ARGUMENT.*TEXT\[1\] is empty"):
        infer(["a", ""], name="zs_bert", url=served.grpc_url, inputs={"CANDIDATE_LABELS": ['["x"]']})


def test_detect_task_keeps_nli_checkpoints_as_text_pair_classification(checkpoints):
    assert detect_task(inspect_checkpoint(str(checkpoints["bert"]))).name == "text-pair-classification"


def test_build_exits_2_when_zero_shot_asked_of_a_checkpoint_without_entailment(tiny_factory, tmp_path, capsys):
    model = tiny_factory("bert")
    argv = ["build", "--model", str(model), "--task", "zero-shot-classification", "--repository", str(tmp_path / "r")]
    assert main(argv) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("error: zero-shot classification needs an NLI checkpoint with an `entailment` label")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("template", ["no placeholder", "{label} is it", "{0} and {1}"])
def test_zero_shot_settings_raise_spec_error_when_template_cannot_take_a_label(template):
    with pytest.raises(SpecError, match="hypothesis_template"):
        load_spec(model="x", hypothesis_template=template)


def test_zero_shot_scores_follow_pipeline_rule_when_one_label_or_multi_label():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.1, 0.3]], dtype=np.float32)  # entailment 0, contradiction 2
    single = zero_shot.scores(logits, 0, 2, multi_label=False)
    np.testing.assert_allclose(single, np.exp([2.0, 0.5]) / np.exp([2.0, 0.5]).sum(), rtol=1e-6)
    multi = zero_shot.scores(logits, 0, 2, multi_label=True)
    np.testing.assert_allclose(multi, [1 / (1 + np.exp(-3.0)), 1 / (1 + np.exp(-0.2))], rtol=1e-6)
    np.testing.assert_allclose(zero_shot.scores(logits[:1], 0, 2, multi_label=False), multi[:1], rtol=1e-6)


def test_zero_shot_parity_pairs_are_hypotheses_when_the_build_checks_parity():
    from tritongen.tasks import get_task
    from tritongen.tasks.zero_shot_classification import ZeroShotSettings

    pairs = get_task("zero-shot-classification").parity_pairs(ZeroShotSettings(hypothesis_template="It is {}."), "abc")
    assert pairs == ["It is sports.", "It is politics.", "It is cuisine française."]


@pytest.mark.e2e
def test_infer_command_prints_ranked_labels_when_candidate_labels_given(served, capsys):
    argv = ["infer", "--name", "zs_bert", "--url", served.grpc_url, "--text", "A goal!", "--text", "A vote."]
    assert main([*argv, "--candidate-labels", '["sports", "politics"]']) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["TEXT"] for r in rows] == ["A goal!", "A vote."]
    assert all(sorted(json.loads(r["LABELS"])) == ["politics", "sports"] for r in rows)
