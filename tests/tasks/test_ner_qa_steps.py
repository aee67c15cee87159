"""The NER and QA pieces of the steps, without the server: configs, settings and the Python models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from tests import pb_stub
from tests.pb_stub import Request, texts
from tritongen.builder.ensemble import step_configs
from tritongen.builder.spec import load_spec
from tritongen.configs.render import render_all
from tritongen.errors import SpecError
from tritongen.model.checkpoint import Checkpoint, Pooling
from tritongen.steps import _common, postprocess, tokenizer
from tritongen.tasks import get_task
from tritongen.tasks.question_answering import postprocess as qa_postprocess
from tritongen.tasks.question_answering import qa
from tritongen.tasks.question_answering import tokenizer as qa_tokenizer
from tritongen.tasks.token_classification import ner
from tritongen.tasks.token_classification import tokenizer as ner_tokenizer

QA_BERT = Path(__file__).parents[1] / "assets" / "qa" / "bert"


@pytest.fixture(autouse=True)
def _stub_pb_utils(monkeypatch):
    for module in (_common, tokenizer, postprocess):
        monkeypatch.setattr(module, "pb_utils", pb_stub)


def _checkpoint(architecture: str, labels: dict[str, str]) -> Checkpoint:
    config = {
        "model_type": "bert",
        "architectures": [architecture],
        "id2label": labels,
        "hidden_size": 32,
        "max_position_embeddings": 128,
    }
    return Checkpoint(path=Path("/ckpt"), config=config, pooling=Pooling())


def _qa_configs(**settings):
    spec = load_spec(model="m", name="qa", **settings)
    checkpoint = _checkpoint("BertForQuestionAnswering", {"0": "LABEL_0", "1": "LABEL_1"})
    facts = {"cls_id": "2", "unk_token": "[UNK]"}
    plan = get_task("question-answering").bind(
        spec, checkpoint, inputs=["input_ids"], row_length=128, tokenizer_facts=facts
    )
    contexts = step_configs(spec, plan, tokenizer_facts=facts)
    return {step: config for step, (_, config) in render_all(contexts).items()}


def test_qa_configs_take_whole_requests_but_the_model_step_batches_windows():
    configs = _qa_configs(max_batch_size=32, model_instances={"count": 2})
    for step in ("ensemble", "tokenizer", "postprocess"):
        assert configs[step].max_batch_size == 0
        assert not configs[step].HasField("dynamic_batching")
    assert configs["ensemble"].input[0].name == "QUESTION"
    assert list(configs["ensemble"].input[1].dims) == [-1, 1]
    assert configs["model"].max_batch_size == 32
    assert configs["model"].HasField("dynamic_batching")
    params = {k: v.string_value for k, v in configs["tokenizer"].parameters.items()}
    assert (params["mode"], params["max_seq_len"], params["doc_stride"], params["max_windows"]) == (
        "qa",
        "128",
        "64",
        "32",
    )
    post = {k: v.string_value for k, v in configs["postprocess"].parameters.items()}
    assert (post["max_answer_len"], post["handle_impossible_answer"]) == ("15", "false")


def test_qa_configs_carry_window_and_no_answer_settings():
    configs = _qa_configs(qa_doc_stride=32, qa_max_answer_len=7, qa_handle_impossible_answer=True)
    params = {k: v.string_value for k, v in configs["tokenizer"].parameters.items()}
    post = {k: v.string_value for k, v in configs["postprocess"].parameters.items()}
    assert params["doc_stride"] == "32"
    assert (post["max_answer_len"], post["handle_impossible_answer"]) == ("7", "true")


def test_ner_configs_pass_offsets_and_word_ids_to_postprocess():
    spec = load_spec(model="m", name="ner", aggregation_strategy="max", model_instances={"count": 2})
    checkpoint = _checkpoint("BertForTokenClassification", {"0": "O", "1": "B-PER", "2": "I-PER"})
    plan = get_task("token-classification").bind(
        spec, checkpoint, inputs=["input_ids"], row_length=128, tokenizer_facts={}
    )
    contexts = step_configs(spec, plan, tokenizer_facts={})
    configs = {step: config for step, (_, config) in render_all(contexts).items()}
    post_inputs = {t.name: list(t.dims) for t in configs["postprocess"].input}
    # Whole requests (a long text is several windows): the batch axis is in the dims.
    assert post_inputs["offsets"] == [-1, -1, 2]
    assert post_inputs["logits"] == [-1, -1, 3]
    assert post_inputs["window_example"] == [-1, 1]
    assert {"TEXT", "word_ids", "special_mask", "input_ids"} <= set(post_inputs)
    assert configs["postprocess"].parameters["aggregation_strategy"].string_value == "max"
    assert configs["tokenizer"].parameters["mode"].string_value == "windows"
    assert configs["tokenizer"].parameters["stride"].string_value == "32"  # a quarter of the 128-token window
    assert configs["model"].max_batch_size == 64 and configs["model"].HasField("dynamic_batching")
    assert [t.name for t in configs["ensemble"].output] == ["ENTITIES"]  # nothing is truncated


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"aggregation_strategy": "longest"}, "aggregation strategy `longest` is unknown"),
        ({"qa_max_answer_len": 0}, "qa_max_answer_len"),
        ({"qa_max_seq_len": 64, "qa_doc_stride": 64}, "qa_doc_stride"),
        ({"aggregation_strategy": "none", "ner_stride": 4}, "`none` cannot merge overlapping windows"),
        ({"ner_stride": -1}, "ner_stride must be >= 0"),
        ({"max_length": 4}, "max_length must be >= 8"),
    ],
)
def test_spec_rejects_bad_task_settings(settings, message):
    with pytest.raises(SpecError, match=message):
        load_spec(model="m", **settings)


def _qa_tokenizer(tmp_path: Path, max_windows: int = 64) -> qa_tokenizer.TritonPythonModel:
    (tmp_path / "1").mkdir(exist_ok=True)
    shutil.copy(QA_BERT / "tokenizer.json", tmp_path / "1" / "tokenizer.json")
    outputs = ["input_ids", "attention_mask", "token_type_ids", "window_example", "sequence_ids", "p_mask"]
    params = {"max_length": "32", "buckets": "16,32", "pad_id": "0", "mode": "qa", "max_seq_len": "32"}
    params.update(doc_stride="8", cls_id="2", max_windows=str(max_windows))
    config = {
        "input": [{"name": "QUESTION"}, {"name": "CONTEXT"}],
        "output": [{"name": n} for n in [*outputs, "word_ids", "offsets"]],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }
    model = qa_tokenizer.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_repository": str(tmp_path), "model_version": "1"})
    return model


def test_qa_tokenizer_emits_every_window_and_errors_per_request(tmp_path):
    model = _qa_tokenizer(tmp_path)
    long_context = "Berlin is a city. " * 20
    good, bad = model.execute(
        [
            Request({"QUESTION": texts("Where?", "Who?"), "CONTEXT": texts(long_context, "Bob")}),
            Request({"QUESTION": texts(""), "CONTEXT": texts("Bob")}),
        ]
    )
    assert "`question` cannot be empty" in bad.error.message()
    assert bad.error.code() == pb_stub.TritonError.INVALID_ARG  # a client error, not an internal one
    windows = good.output("window_example").reshape(-1)
    assert windows[0] == 0 and windows[-1] == 1 and (windows == 0).sum() > 3  # the long context needs several
    assert good.output("input_ids").shape == (len(windows), 32)  # padded to the 32-token bucket
    assert good.output("p_mask").dtype == np.bool_
    assert good.output("offsets").shape == (len(windows), 32, 2)


def test_qa_tokenizer_refuses_more_windows_than_the_model_batch(tmp_path):
    model = _qa_tokenizer(tmp_path, max_windows=2)
    (response,) = model.execute([Request({"QUESTION": texts("Where?"), "CONTEXT": texts("Berlin is big. " * 30)})])
    assert "more than the 2 the model step takes" in response.error.message()


def test_qa_postprocess_decodes_tokenizer_outputs_like_decode_answers(tmp_path):
    model = _qa_tokenizer(tmp_path)
    contexts = ["Berlin is a city in Germany. " * 6, "Bob lives in Paris."]
    (response,) = model.execute([Request({"QUESTION": texts("Where?", "Who?"), "CONTEXT": texts(*contexts)})])
    arrays = {t.name(): t.as_numpy() for t in response.output_tensors}
    rng = np.random.default_rng(0)
    spans = rng.normal(size=(*arrays["input_ids"].shape, 2)).astype(np.float32)

    post = qa_postprocess.TritonPythonModel()
    config = {
        "input": [{"name": "CONTEXT"}],
        "output": [{"name": n} for n in ("ANSWER", "SCORE", "START", "END")],
        "parameters": {"task": {"string_value": "question-answering"}},
    }
    post.initialize({"model_config": json.dumps(config), "model_repository": str(tmp_path), "model_version": "1"})
    names = ("attention_mask", "window_example", "sequence_ids", "p_mask", "word_ids", "offsets")
    (result,) = post.execute(
        [Request({"CONTEXT": texts(*contexts), "span_logits": spans, **{n: arrays[n] for n in names}})]
    )

    windows = qa.encode_windows(
        Tokenizer.from_file(str(QA_BERT / "tokenizer.json")), ["Where?", "Who?"], contexts,
        qa.WindowSettings(max_seq_len=32, doc_stride=8),
    )  # fmt: skip
    width = windows.input_ids.shape[1]
    expected = qa.decode_answers(spans[:, :width, 0], spans[:, :width, 1], windows, contexts)
    assert [a.decode() for a in result.output("ANSWER").reshape(-1)] == [e["answer"] for e in expected]
    assert result.output("START").reshape(-1).tolist() == [e["start"] for e in expected]
    np.testing.assert_allclose(result.output("SCORE").reshape(-1), [e["score"] for e in expected], rtol=1e-6)


def _ner_tokenizer(tmp_path: Path, max_windows: int = 64) -> ner_tokenizer.TritonPythonModel:
    (tmp_path / "1").mkdir(exist_ok=True)
    shutil.copy(QA_BERT / "tokenizer.json", tmp_path / "1" / "tokenizer.json")
    outputs = ["input_ids", "attention_mask", "special_mask", "word_ids", "offsets", "window_example"]
    params = {"max_length": "24", "buckets": "8,16", "mode": "windows", "stride": "6", "max_windows": str(max_windows)}
    config = {
        "input": [{"name": "TEXT"}],
        "output": [{"name": n} for n in outputs],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }
    model = ner_tokenizer.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_repository": str(tmp_path), "model_version": "1"})
    return model


def test_ner_tokenizer_emits_the_strided_pipelines_windows(tmp_path):
    """Each text becomes the windows ``tokenizer(..., stride=6, return_overflowing_tokens=True)`` gives."""
    from transformers import AutoTokenizer

    model = _ner_tokenizer(tmp_path)
    batch = ["Zoë ate crème brûlée in São Paulo", "ok", "word " * 40, ""]
    (response,) = model.execute([Request({"TEXT": texts(*batch)})])
    reference = AutoTokenizer.from_pretrained(str(QA_BERT))(
        batch, truncation=True, max_length=24, stride=6, return_overflowing_tokens=True,
        return_offsets_mapping=True, return_special_tokens_mask=True,
    )  # fmt: skip
    owners = response.output("window_example").reshape(-1)
    assert owners.tolist() == reference["overflow_to_sample_mapping"]
    assert owners.tolist().count(2) > 2  # the long text needs several windows
    ids, offsets = response.output("input_ids"), response.output("offsets")
    assert ids.shape[1] == 24  # padded to the bucket of the longest window
    for row, want in enumerate(reference["input_ids"]):
        assert ids[row, : len(want)].tolist() == want
        assert offsets[row, : len(want)].tolist() == [list(o) for o in reference["offset_mapping"][row]]
        assert response.output("special_mask")[row, : len(want)].tolist() == reference["special_tokens_mask"][row]


def test_ner_tokenizer_refuses_more_windows_than_the_model_batch(tmp_path):
    model = _ner_tokenizer(tmp_path, max_windows=3)
    (error, fine) = model.execute([Request({"TEXT": texts("word " * 200)}), Request({"TEXT": texts("ok")})])
    assert "windows of 24 tokens, more than the 3" in error.error.message()
    assert fine.output("window_example").reshape(-1).tolist() == [0]


def test_merge_overlapping_keeps_the_longest_then_the_best_entity():
    entities = [
        {"entity_group": "PER", "score": 0.9, "word": "zoe", "start": 0, "end": 3},
        {"entity_group": "PER", "score": 0.5, "word": "zoe saldana", "start": 0, "end": 11},  # longer wins
        {"entity_group": "LOC", "score": 0.4, "word": "malmo", "start": 20, "end": 25},
        {"entity_group": "LOC", "score": 0.8, "word": "malmo", "start": 20, "end": 25},  # same span: better wins
        {"entity_group": "ORG", "score": 0.7, "word": "cafe", "start": 12, "end": 16},
    ]
    merged = ner.merge_overlapping(entities)
    assert [(e["start"], e["end"], e["score"]) for e in merged] == [(0, 11, 0.5), (12, 16, 0.7), (20, 25, 0.8)]


def test_answer_arrays_mark_a_pair_without_any_span():
    arrays = qa_postprocess.answer_arrays([{"answer": "Bob", "score": 0.5, "start": 0, "end": 3}, []])
    assert arrays["ANSWER"].reshape(-1).tolist() == [b"Bob", b""]
    assert arrays["START"].reshape(-1).tolist() == [0, -1]
    assert arrays["SCORE"].dtype == np.float32


def test_accuracy_gate_measures_tokens_for_ner_and_spans_for_qa(checkpoint_cache, builds):
    from tests.tiny_ner import make_token_classifier

    ner_result = builds(checkpoint_cache(make_token_classifier, "bert", seed=2), "n", precision="fp16").result
    assert ner_result.accuracy.gate == "token_labels"
    assert ner_result.accuracy.label_agreement >= 0.99
    qa = builds(QA_BERT, "q", optimize=True)
    assert qa.result.accuracy.gate == "spans"
    assert qa.result.accuracy.label_agreement >= 0.99  # fusions keep FP32: the same start and end everywhere
    card = qa.card()
    assert "answer start/end agreement" in card
