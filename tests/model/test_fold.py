"""The postprocess step folded into the served graph: the tail math, its proof, and served folded ensembles."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.tiny_variants import make_multilabel_classifier
from tritongen.builder.pipeline import build_repository
from tritongen.builder.spec import load_spec
from tritongen.gates.compat import ContainerSession
from tritongen.model.fold import FoldProof, classification_tail, fold_graph, fold_served, prove
from tritongen.pooling.heads import embedding_tail
from tritongen.repository.contents import served_steps
from tritongen.serve.client import infer
from tritongen.tasks import reference_postprocess

LABELS = ["négatif", "neutral", "positive 🎉"]
TEXTS = ["I love it", "Terrible, awful, bad.", "Ünïcödé and emoji 🎉", "", "word " * 200]


def _identity_model(source: str, width: int, dtype: int | None = None):
    """A graph that outputs its input ``x`` [B, width] as ``source``: the fold's tail sees exactly ``x``."""
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT if dtype is None else dtype
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], [source])],
        "identity",
        [helper.make_tensor_value_info("x", elem, ["batch", width])],
        [helper.make_tensor_value_info(source, elem, ["batch", width])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _session(model):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _step(module: str, **parameters: str):
    bound = SimpleNamespace(step_modules={"postprocess": module}, postprocess_parameters=parameters)
    return reference_postprocess(bound, LABELS)


def _rows(width: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    rows = rng.normal(0, 3, (6, width)).astype(np.float32)
    rows[1] = 0.0  # an all-zero vector: the 1e-12 floor of the norm, equal scores in a classifier
    return [{"x": rows}, {"x": rows[:1]}]


@pytest.mark.parametrize("normalize", [True, False])
def test_embedding_tail_equals_the_python_step(normalize):
    model = fold_graph(_identity_model("sentence_embedding", 8), "sentence_embedding", embedding_tail(
        "sentence_embedding", 8, normalize=normalize))  # fmt: skip
    step = _step("tritongen.tasks.embedding.postprocess", normalize="true" if normalize else "false")
    why, worst = prove(_session(model).run, "sentence_embedding", ["EMBEDDING"], step, _rows(8))
    assert why is None and worst <= 1e-6
    vectors = _session(model).run(["EMBEDDING"], _rows(8)[0])[0]
    norms = np.linalg.norm(vectors, axis=1)
    assert np.allclose(norms[[0, 2, 3]], 1.0, atol=1e-6) if normalize else not np.allclose(norms, 1.0)


@pytest.mark.parametrize("function", ["softmax", "sigmoid"])
def test_classification_tail_equals_the_python_step_strings_included(function):
    outputs = ["PROBABILITIES", "SCORE", "LABEL"]
    model = fold_graph(_identity_model("logits", 3), "logits", classification_tail("logits", LABELS, function=function))
    step = _step("tritongen.tasks.classification.postprocess", function=function)
    why, _ = prove(_session(model).run, "logits", outputs, step, _rows(3))
    assert why is None
    feed = _rows(3)[0]
    probabilities, score, label = _session(model).run(outputs, feed)
    assert probabilities.shape == (6, 3) and score.shape == (6, 1) and label.shape == (6, 1)
    best = probabilities.argmax(1)
    assert [x.decode() if isinstance(x, bytes) else x for x in label[:, 0]] == [LABELS[i] for i in best]
    assert np.allclose(probabilities.sum(1), 1.0, atol=1e-6) if function == "softmax" else True


def test_a_wrong_tail_fails_its_proof():
    """Not vacuous: a tail with the other activation does not prove equal to the step."""
    model = fold_graph(
        _identity_model("logits", 3), "logits", classification_tail("logits", LABELS, function="sigmoid")
    )
    step = _step("tritongen.tasks.classification.postprocess", function="softmax")
    why, worst = prove(_session(model).run, "logits", ["PROBABILITIES", "SCORE", "LABEL"], step, _rows(3))
    assert why is not None and "differs from the step" in why and worst > 1e-3


def test_fold_served_replaces_the_model_file_only_when_the_fold_proves_itself(tmp_path):
    import onnx

    path = tmp_path / "model.onnx"
    onnx.save_model(_identity_model("logits", 3), str(path))
    unfolded = path.read_bytes()
    tail = classification_tail("logits", LABELS, function="sigmoid")
    wrong = FoldProof("logits", _step("tritongen.tasks.classification.postprocess", function="softmax"), _rows(3), 6)
    refused = fold_served(path, tail, wrong)
    assert not refused.folded and "did not match the Python step" in refused.why
    assert path.read_bytes() == unfolded and sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    right = FoldProof("logits", _step("tritongen.tasks.classification.postprocess", function="sigmoid"), _rows(3), 6)
    here = functools.partial(ContainerSession, python=Path(sys.executable))  # this venv standing in for a container
    report = fold_served(path, tail, right, container=here)
    assert report.folded and "on 6 parity texts" in report.why and len(report.runtimes) == 2
    assert "LABEL" in [o.name for o in onnx.load(str(path)).graph.output]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_a_half_precision_model_output_is_cast_before_the_tail():
    from onnx import TensorProto

    model = fold_graph(
        _identity_model("sentence_embedding", 4, TensorProto.FLOAT16),
        "sentence_embedding",
        embedding_tail("sentence_embedding", 4, normalize=True),
    )
    feed = {"x": np.array([[1, 2, 2, 0]], dtype=np.float16)}
    (vector,) = _session(model).run(["EMBEDDING"], feed)
    assert vector.dtype == np.float32
    np.testing.assert_allclose(vector, [[1 / 3, 2 / 3, 2 / 3, 0]], atol=1e-6)


def test_fold_graph_refuses_an_unknown_output_and_an_old_opset():
    with pytest.raises(ValueError, match="no output `logits`"):
        fold_graph(_identity_model("sentence_embedding", 4), "logits", embedding_tail("logits", 4, normalize=False))
    old = _identity_model("logits", 4)
    old.opset_import[0].version = 17
    with pytest.raises(ValueError, match="opset 17 is below 18"):
        fold_graph(old, "logits", embedding_tail("logits", 4, normalize=True))


# --- built and served ---------------------------------------------------------------------------------------


def _labelled_classifier(out_dir: Path) -> Path:
    """A tiny BERT classifier whose labels are not ASCII (the folded graph holds them as strings)."""
    from tests.tiny_checkpoints import make_checkpoint

    path = make_checkpoint("bert", out_dir, task="classification", seed=11)
    config = json.loads((path / "config.json").read_text())
    config.update(id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})
    (path / "config.json").write_text(json.dumps(config, ensure_ascii=False))
    return path


@pytest.fixture(scope="module")
def checkpoints(checkpoint_cache):
    return {
        "single": checkpoint_cache(_labelled_classifier),
        "multi": checkpoint_cache(make_multilabel_classifier, "bert"),
    }


@pytest.fixture(scope="module")
def built(checkpoints, builds):
    return {
        # the container check on: the fold proves itself in the container's ONNX Runtime too
        "folded": builds(checkpoints["single"], "folded", fold=True, container_check=True),
        "unfolded": builds(checkpoints["single"], "unfolded"),  # the default
        "multi": builds(checkpoints["multi"], "multi", fold=True),
    }


@pytest.fixture(scope="module")
def repo(built, builds, tmp_path_factory):
    return builds.repository(*built.values(), into=tmp_path_factory.mktemp("fold") / "repo")


def _build_record(repo: Path, name: str, version: int = 1) -> dict:
    return json.loads((repo / name / str(version) / "build.json").read_text())


def test_the_build_folds_a_single_label_classifier_and_records_why(repo):
    assert served_steps(repo, "folded") == ("tokenizer", "model")
    assert not (repo / "folded_postprocess").exists()
    record = _build_record(repo, "folded")
    assert record["fold"]["folded"] and record["steps"] == ["tokenizer", "model"]
    assert len(record["fold"]["runtimes"]) >= 1 and record["fold"]["max_abs_diff"] <= 1e-5
    card = (repo / "folded" / "1" / "model_card.md").read_text()
    assert "- served path: tokenizer → model (the postprocess step is folded into the graph" in card
    config = (repo / "folded_model" / "config.pbtxt").read_text()
    for output in ("LABEL", "SCORE", "PROBABILITIES", "logits"):
        assert f'name: "{output}"' in config  # logits stays: the roll-out canary compares it


def test_no_fold_and_multi_label_keep_the_postprocess_step(repo):
    assert served_steps(repo, "unfolded") == ("tokenizer", "model", "postprocess")
    assert _build_record(repo, "unfolded")["fold"] == {
        "folded": False, "why": "not asked for (`--fold`, spec `fold: true`)", "max_abs_diff": 0.0, "runtimes": []
    }  # fmt: skip
    multi = _build_record(repo, "multi")["fold"]
    assert served_steps(repo, "multi") == ("tokenizer", "model", "postprocess") and not multi["folded"]
    assert "not tensor math" in multi["why"]
    card = (repo / "unfolded" / "1" / "model_card.md").read_text()
    assert "- served path: tokenizer → model → postprocess (not asked for (`--fold`, spec `fold: true`))" in card


@pytest.mark.e2e
def test_served_folded_ensemble_answers_as_the_unfolded_one(built, shared_server):
    server = shared_server.serve(built["folded"], built["unfolded"])
    folded = infer(TEXTS, name="folded", url=server.grpc_url)
    unfolded = infer(TEXTS, name="unfolded", url=server.grpc_url)
    over_http = infer(TEXTS[:2], name="folded", url=server.http_url, protocol="http")
    assert [r["LABEL"] for r in folded] == [r["LABEL"] for r in unfolded]
    assert all(r["LABEL"] in LABELS for r in folded)
    np.testing.assert_allclose([r["PROBABILITIES"] for r in folded], [r["PROBABILITIES"] for r in unfolded], atol=1e-5)
    np.testing.assert_allclose([r["SCORE"] for r in folded], [r["SCORE"] for r in unfolded], atol=1e-5)
    assert [r["TRUNCATED"] for r in folded] == [r["TRUNCATED"] for r in unfolded]
    assert [r["LABEL"] for r in over_http] == [r["LABEL"] for r in folded[:2]]


def test_a_name_keeps_one_ensemble_shape_across_versions(built, builds, checkpoints, tmp_path):
    """A second version follows the first: --fold stays off beside an unfolded name, and no fold is refused
    beside a folded one (the step folders are shared across versions and switched step by step)."""
    repo = builds.copy(built["folded"], built["unfolded"], into=tmp_path / "repo")
    result = build_repository(load_spec(model=str(checkpoints["single"]), name="unfolded", repository=repo, fold=True))
    assert result.version == 2 and served_steps(repo, "unfolded") == ("tokenizer", "model", "postprocess")
    assert "already built serve a postprocess step" in _build_record(repo, "unfolded", 2)["fold"]["why"]
    command = [sys.executable, "-m", "tritongen", "build", "--model", str(checkpoints["single"]), "--name", "folded",
               "--repository", str(repo), "--no-fold"]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode != 0, run.stdout
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in run.stderr and "build it under a new --name" in lines[-1]
    assert not (repo / "folded" / "2").exists() and served_steps(repo, "folded") == ("tokenizer", "model")
