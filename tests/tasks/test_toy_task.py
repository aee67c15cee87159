"""A task added from outside the package: one folder (``tests/toy_task/cls_vector``) and one registry line.

Built from a tiny checkpoint, served by the real tritonserver, and compared with PyTorch.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.toy_task.cls_vector import ClsVector, ClsVectorSettings
from tritongen.builder.spec import load_spec
from tritongen.cli import main
from tritongen.errors import SpecError, UnsupportedModelError
from tritongen.serve.client import infer
from tritongen.tasks import TASKS, get_task, register_task

TEXTS = ["hello world", "Ünïcödé and emoji 🎉", "word " * 100, ""]


@pytest.fixture
def toy_task():
    register_task(ClsVector)  # the one registry line a new task needs
    yield TASKS[ClsVector.name]
    TASKS.pop(ClsVector.name)


def test_registry_lists_toy_task_only_while_registered(toy_task):
    assert get_task("cls-vector") is toy_task
    TASKS.pop(ClsVector.name)
    with pytest.raises(UnsupportedModelError, match="supported: classification, embedding"):
        get_task("cls-vector")
    register_task(ClsVector)


def test_registry_refuses_a_second_task_of_one_name(toy_task):
    class Impostor(ClsVector):
        pass

    with pytest.raises(ValueError, match="task `cls-vector` is registered already"):
        register_task(Impostor)
    assert get_task("cls-vector") is toy_task


@pytest.mark.parametrize(
    ("section", "flat", "holder"),
    [
        ("greedy", {"qa_doc_stride": "scale"}, "section `question_answering` (QuestionAnsweringSettings)"),
        ("greedy", {"intra_op_threads": "scale"}, "section `onnxruntime` (OnnxRuntimeSettings)"),
        ("greedy", {"max_length": "scale"}, "the spec itself"),
        ("cls_vector", {}, "section `cls_vector` (ClsVectorSettings)"),
    ],
    ids=["another-tasks-flat-key", "a-runtimes-flat-key", "a-spec-setting", "another-class-of-a-section"],
)
def test_registry_refuses_a_task_whose_section_takes_a_spec_key_already_held(toy_task, section, flat, holder):
    settings = type("GreedySettings", (ClsVectorSettings,), {"section": section, "flat_names": flat})
    greedy = type("Greedy", (ClsVector,), {"name": "greedy", "section": section, "Settings": settings})
    key = next(iter(flat), section)
    with pytest.raises(ValueError, match=re.escape(f"`{key}`, which {holder} holds already")):
        register_task(greedy)
    assert "greedy" not in TASKS


def test_toy_task_section_and_flag_come_from_its_declaration_while_registered(toy_task, capsys):
    assert load_spec(None, model="m", cls_scale=2.5).section(ClsVectorSettings).scale == 2.5
    with pytest.raises(SpecError, match="scale must be > 0"):
        load_spec(None, model="m", cls_vector={"scale": 0})
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "--cls-scale CLS_SCALE" in capsys.readouterr().out
    TASKS.pop(ClsVector.name)
    with pytest.raises(SpecError, match=r"unknown setting\(s\) \['cls_scale'\]"):
        load_spec(None, model="m", cls_scale=2.0)
    register_task(ClsVector)


@pytest.mark.e2e
def test_toy_task_served_matches_pytorch_when_registered(toy_task, tiny_factory, builds, shared_server):
    import torch
    from transformers import AutoModel, AutoTokenizer

    checkpoint = tiny_factory("bert", task="embedding")
    toy = builds(checkpoint, "toy", task="cls-vector", cls_scale=2.0)
    result = toy.result
    assert result.task == "cls-vector"
    served = toy.repository / "toy_postprocess" / "1"
    assert (served / "model.py").read_text().startswith('"""``cls-vector`` postprocess step')
    rows = infer(TEXTS, name="toy", url=shared_server.serve(toy).grpc_url)

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=result.max_length, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose([r["VECTOR"] for r in rows], 2.0 * expected, atol=2e-4)  # the section's scale
    np.testing.assert_allclose([r["NORM"] for r in rows], 2.0 * np.linalg.norm(expected, axis=-1), rtol=1e-4)
    assert [r["TRUNCATED"] for r in rows] == [False, False, True, False]
