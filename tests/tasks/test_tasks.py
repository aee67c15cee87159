"""The task registry and the plan a task binds to, without exporting anything."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tritongen.builder.spec import load_spec
from tritongen.errors import SpecError
from tritongen.gates.accuracy import SpanGate
from tritongen.model.checkpoint import Checkpoint, Pooling
from tritongen.tasks import TASKS, TaskPlan, get_task
from tritongen.tasks._registry import DETECTION_ORDER, FALLBACK


def _checkpoint(architecture: str) -> Checkpoint:
    config = {
        "model_type": "bert",
        "architectures": [architecture],
        "id2label": {"0": "A", "1": "B"},
        "hidden_size": 32,
        "max_position_embeddings": 128,
    }
    return Checkpoint(path=Path("/ckpt"), config=config, pooling=Pooling())


def test_registry_holds_one_entry_per_task_folder():
    assert sorted(TASKS) == [
        "classification",
        "embedding",
        "image-classification",
        "image-embedding",
        "image-embedding-text",
        "multi-embedding",
        "question-answering",
        "reranking",
        "sparse-embedding",
        "text-pair-classification",
        "token-classification",
        "zero-shot-classification",
    ]


def test_detection_names_every_task_once_in_one_table():
    named = [*DETECTION_ORDER, *FALLBACK]
    assert sorted(named) == sorted(TASKS) and len(set(named)) == len(named)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_step_module_is_importable_and_has_a_model(name):
    task = get_task(name)
    for module in (task.tokenizer_step, task.postprocess_step):
        assert hasattr(importlib.import_module(module), "TritonPythonModel")


def test_bind_computes_the_qa_plan_once_from_the_section():
    spec = load_spec(model="m", question_answering={"doc_stride": 16, "max_answer_len": 9})
    plan = get_task("question-answering").bind(
        spec, _checkpoint("BertForQuestionAnswering"), inputs=["input_ids", "attention_mask"], position_limit=128
    )
    assert isinstance(plan, TaskPlan) and isinstance(plan.gate, SpanGate)
    assert plan.row_length == 128
    assert (plan.tokenizer_parameters["doc_stride"], plan.postprocess_parameters["max_answer_len"]) == ("16", "9")
    assert [t.name for t in plan.ensemble_inputs] == ["QUESTION", "CONTEXT"]
    assert plan.tokenizer_outputs[0].name == "input_ids" and plan.onnx_output.dims == (-1, 2)
    assert plan.step_modules["postprocess"] == "tritongen.tasks.question_answering.postprocess"
    helpers = plan.helper_modules["tokenizer"]
    assert "tritongen.tasks.question_answering.qa" in helpers and "tritongen.steps.tokenizer" in helpers


def test_bind_refuses_a_stride_that_fills_the_ner_window():
    spec = load_spec(model="m", token_classification={"stride": 30})
    with pytest.raises(SpecError, match="ner_stride 30 must be below the 30 text tokens"):
        get_task("token-classification").bind(
            spec, _checkpoint("BertForTokenClassification"), inputs=["input_ids"], row_length=32,
            tokenizer_facts={"special_tokens": "2"},
        )  # fmt: skip


def test_image_text_sides_give_unnormalised_embeddings_of_their_own_width_when_built_from_one_checkpoint():
    config = {
        "model_type": "siglip",
        "architectures": ["SiglipModel"],
        "vision_config": {"hidden_size": 48},
        "text_config": {"hidden_size": 32, "projection_size": 24},
    }
    checkpoint = Checkpoint(path=Path("/ckpt"), config=config, pooling=Pooling())
    for name, width in (("image-embedding", 48), ("image-embedding-text", 24)):
        task = get_task(name)
        assert task.has_head(checkpoint) and not task.has_head(_checkpoint("BertModel"))
        assert task.onnx_output_dims(checkpoint) == (width,)
        assert [(t.name, t.dims) for t in task.postprocess_outputs(checkpoint)] == [("EMBEDDING", (width,))]
        assert task.postprocess_parameters(checkpoint) == {"normalize": "false"}
