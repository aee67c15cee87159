"""Unit tests of the Python-backend model.py files, with triton_python_backend_utils stubbed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests import pb_stub
from tests.pb_stub import Request, texts
from tritongen.runtimes.onnxruntime import backend as ort_model
from tritongen.steps import postprocess, tokenizer
from tritongen.tasks.classification import postprocess as classification_postprocess
from tritongen.tasks.embedding import postprocess as embedding_postprocess


@pytest.fixture(autouse=True)
def _stub_pb_utils(monkeypatch):
    for module in (tokenizer, postprocess, ort_model):
        monkeypatch.setattr(module, "pb_utils", pb_stub)


def _args(tmp_path: Path, config: dict) -> dict:
    return {"model_config": json.dumps(config), "model_repository": str(tmp_path), "model_version": "1"}


def _tokenizer_model(
    tmp_path: Path, minilm_path: Path, buckets: str = "8,16,32", inputs: tuple[str, ...] = ("TEXT",)
) -> tokenizer.TritonPythonModel:
    (tmp_path / "1").mkdir(exist_ok=True)
    shutil.copy(minilm_path / "tokenizer.json", tmp_path / "1" / "tokenizer.json")
    config = {
        "input": [{"name": name} for name in inputs],
        "output": [{"name": n} for n in ("input_ids", "attention_mask", "token_type_ids", "TRUNCATED", "TOKEN_COUNT")],
        "parameters": {
            "tokenizer_file": {"string_value": "tokenizer.json"},
            "max_length": {"string_value": "64"},
            "buckets": {"string_value": buckets},
            "pad_id": {"string_value": "0"},
        },
    }
    model = tokenizer.TritonPythonModel()
    model.initialize(_args(tmp_path, config))
    return model


def test_tokenizer_pads_each_request_to_its_bucket_when_batched(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path)
    responses = model.execute([Request({"TEXT": texts("hi")}), Request({"TEXT": texts("a b c d e f g h i j k", "x")})])
    assert len(responses) == 2
    first, second = (r.output("input_ids") for r in responses)
    assert first.shape == (1, 8)
    assert second.shape == (2, 16)
    mask = responses[1].output("attention_mask")
    assert mask[1].sum() == 3  # [CLS] x [SEP]
    assert first.dtype == np.int64


def test_tokenizer_truncates_to_max_length_when_text_is_huge(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path)
    (response,) = model.execute([Request({"TEXT": texts("word " * 100_000)})])
    assert response.output("input_ids").shape == (1, 64)
    assert response.output("attention_mask").sum() == 64


def test_tokenizer_counts_the_tokens_the_model_reads_of_each_text_when_cut_or_padded(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path)
    short, batch = model.execute([Request({"TEXT": texts("hi")}), Request({"TEXT": texts("word " * 1000, "a b c")})])
    assert short.output("TOKEN_COUNT").tolist() == [[3]]  # [CLS] hi [SEP]
    assert batch.output("TOKEN_COUNT").tolist() == [[64], [5]]  # cut at max_length; the padding is not counted
    assert batch.output("TOKEN_COUNT").dtype == np.int32


def _ids(*rows: list[int]) -> np.ndarray:
    """Token-id rows as a client sends them: one [N, L] int64 array, each row padded at its end with -1."""
    width = max(len(row) for row in rows)
    return np.array([row + [-1] * (width - len(row)) for row in rows], dtype=np.int64)


HELLO_WORLD = [101, 7592, 2088, 102]  # MiniLM's ids of "hello world", its special tokens in


def test_tokenizer_takes_token_ids_as_the_model_reads_them_and_answers_as_for_the_text(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path, inputs=("TEXT", "TOKEN_IDS", "TRUNCATE_LEFT"))
    by_text, by_ids = model.execute(
        [Request({"TEXT": texts("hello world")}), Request({"TOKEN_IDS": _ids(HELLO_WORLD, [7592])})]
    )
    assert by_ids.error is None
    assert by_ids.output("input_ids")[0].tolist() == by_text.output("input_ids")[0].tolist()
    assert by_ids.output("attention_mask").tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]]
    assert by_ids.output("input_ids")[1, 0] == 7592  # as sent: no special token added
    assert by_ids.output("TOKEN_COUNT").tolist() == [[4], [1]]


def test_tokenizer_cuts_long_token_ids_on_the_side_asked_and_says_so(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path, inputs=("TEXT", "TOKEN_IDS", "TRUNCATE_LEFT"))
    long = list(range(1000, 1100))
    right, left = model.execute(
        [
            Request({"TOKEN_IDS": _ids(long)}),
            Request({"TOKEN_IDS": _ids(long), "TRUNCATE_LEFT": np.array([[True]])}),
        ]
    )
    assert right.output("input_ids")[0].tolist() == long[:64] and right.output("TRUNCATED").tolist() == [[True]]
    assert left.output("input_ids")[0].tolist() == long[-64:] and left.output("TRUNCATED").tolist() == [[True]]


def test_tokenizer_refuses_bad_token_ids_in_their_own_request_only(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path, inputs=("TEXT", "TOKEN_IDS", "TRUNCATE_LEFT"))
    outside, empty, both, negative, fine = model.execute(
        [
            Request({"TOKEN_IDS": _ids([101, 30522, 102])}),
            Request({"TOKEN_IDS": _ids([101], [])}),
            Request({"TEXT": texts("a"), "TOKEN_IDS": _ids([101])}),
            Request({"TOKEN_IDS": np.array([[101, -3, 102]], dtype=np.int64)}),
            Request({"TEXT": texts("fine")}),
        ]
    )
    assert (
        outside.error.message() == "TOKEN_IDS row 0 holds the id 30522, outside the model's vocabulary of 30522 tokens"
    )
    assert outside.error.code() == pb_stub.TritonError.INVALID_ARG
    assert empty.error.message() == "TOKEN_IDS row 1 holds no token id"
    assert both.error.message() == "give TEXT or TOKEN_IDS, not both"
    assert negative.error.message() == "TOKEN_IDS row 0 holds a negative id before its -1 padding"
    assert fine.error is None and fine.output("TOKEN_COUNT").tolist() == [[3]]


def test_tokenizer_keeps_a_long_texts_last_tokens_and_its_special_tokens_when_asked(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path, inputs=("TEXT", "TRUNCATE_LEFT"))
    text = " ".join(f"w{i}" for i in range(200)) + " the end"
    flags = np.array([[False], [True]])
    (response,) = model.execute([Request({"TEXT": texts(text, text), "TRUNCATE_LEFT": flags})])
    right, left = response.output("input_ids")
    decode = model.encoder.tokenizer.decode
    assert right[0] == left[0] == 101 and right[-1] == left[-1] == 102  # [CLS] ... [SEP] on both sides
    assert decode(left.tolist()).endswith("the end") and not decode(right.tolist()).endswith("the end")
    assert decode(right.tolist()).startswith("w0 w1") and not decode(left.tolist()).startswith("w0 w1")
    assert response.output("TRUNCATED").tolist() == [[True], [True]]
    # one flag serves every row; none sent: every row keeps its first tokens
    (one,) = model.execute([Request({"TEXT": texts(text, text), "TRUNCATE_LEFT": np.array([[True]])})])
    assert (one.output("input_ids") == left).all()
    (plain,) = model.execute([Request({"TEXT": texts(text)})])
    assert (plain.output("input_ids")[0] == right).all()


def test_a_model_without_token_ids_asks_for_text(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path, inputs=("TEXT",))
    (response,) = model.execute([Request({"TOKEN_IDS": _ids([101])})])
    assert response.error.message() == "missing input: give TEXT"


def test_reranker_counts_its_prompts_prefix_and_suffix_with_each_pair(minilm_path):
    from tritongen.tasks.reranking.tokenizer import PromptEncoder

    prompt = PromptEncoder(tokenizer.TextEncoder(str(minilm_path / "tokenizer.json"), 32, [16]), "Judge", [7, 8], [9])
    encodings = prompt.encode(["a query", "q"], ["a document", "word " * 100])
    rows = prompt.pack(encodings)["attention_mask"].sum(axis=1, keepdims=True)
    assert prompt.counts(encodings).tolist() == rows.tolist() and rows[1, 0] == 32  # the row the model reads


def test_tokenizer_returns_error_for_invalid_utf8_and_answers_the_rest(tmp_path, minilm_path):
    model = _tokenizer_model(tmp_path, minilm_path)
    responses = model.execute([Request({"TEXT": texts(b"\xff\xfe bad")}), Request({"TEXT": texts("")})])
    assert responses[0].error is not None
    assert "TEXT[0] is not valid UTF-8" in responses[0].error.message()
    assert responses[1].error is None
    assert responses[1].output("input_ids")[0, :2].tolist() == [101, 102]


def test_text_encoder_matches_transformers_tokenizer(minilm_path):
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(minilm_path))
    encoder = tokenizer.TextEncoder(str(minilm_path / "tokenizer.json"), 32, [8, 16], input_names=["input_ids"])
    for text in ["Café 🙂 東京", "", "a much longer sentence " * 20]:
        expected = reference(text, truncation=True, max_length=32)["input_ids"]
        packed = encoder([text])["input_ids"][0]
        assert packed[: len(expected)].tolist() == expected
        assert packed.shape[0] in (8, 16, 32)


def _postprocess_model(tmp_path: Path, task: str, **params: str) -> postprocess.TritonPythonModel:
    (tmp_path / "1").mkdir(exist_ok=True)
    (tmp_path / "1" / "labels.json").write_text(json.dumps(["neg", "neu", "pos"]))
    outputs = ["LABEL", "SCORE", "PROBABILITIES"] if task == "classification" else ["EMBEDDING"]
    config = {
        "input": [{"name": "logits" if task == "classification" else "sentence_embedding"}],
        "output": [{"name": n} for n in outputs],
        "parameters": {k: {"string_value": v} for k, v in {"task": task, **params}.items()},
    }
    steps = {"classification": classification_postprocess, "embedding": embedding_postprocess}
    model = steps[task].TritonPythonModel()
    model.initialize(_args(tmp_path, config))
    return model


def test_postprocess_softmaxes_and_labels_each_request(tmp_path):
    model = _postprocess_model(tmp_path, "classification", function="softmax", labels_file="labels.json")
    logits = [np.array([[0.0, 1.0, 3.0]], np.float32), np.array([[2.0, 0.0, 0.0], [0.0, 5.0, 0.0]], np.float32)]
    responses = model.execute([Request({"logits": a}) for a in logits])
    assert [r.output("LABEL").reshape(-1).tolist() for r in responses] == [[b"pos"], [b"neg", b"neu"]]
    probs = responses[1].output("PROBABILITIES")
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
    expected = np.exp([2.0, 0, 0]) / np.exp([2.0, 0, 0]).sum()
    np.testing.assert_allclose(probs[0], expected, rtol=1e-6)
    np.testing.assert_allclose(responses[1].output("SCORE")[:, 0], probs.max(axis=1))


def test_postprocess_applies_sigmoid_when_configured():
    scores = postprocess.activate(np.array([[0.0, 2.0]]), "sigmoid")
    np.testing.assert_allclose(scores, [[0.5, 1 / (1 + np.exp(-2.0))]], rtol=1e-6)


def test_postprocess_normalises_embeddings_when_asked(tmp_path):
    model = _postprocess_model(tmp_path, "embedding", normalize="true")
    (response,) = model.execute([Request({"sentence_embedding": np.array([[3.0, 4.0]], np.float32)})])
    np.testing.assert_allclose(response.output("EMBEDDING"), [[0.6, 0.8]], rtol=1e-6)


def test_l2_normalize_keeps_float64_for_cosines_and_serves_half_precision_as_float32():
    from tritongen.vectors import l2_normalize, matryoshka_cut

    rows = np.array([[3.0, 4.0], [0.0, 0.0]])
    assert l2_normalize(rows).dtype == np.float64 and l2_normalize(rows).tolist() == [[0.6, 0.8], [0.0, 0.0]]
    assert l2_normalize(rows.astype(np.float16)).dtype == np.float32
    assert matryoshka_cut(np.array([[3.0, 4.0, 12.0]], np.float32), 1, normalize=True).tolist() == [[1.0]]
    with pytest.raises(ValueError, match="DIMENSIONS must be between 1 and 3, got 4"):
        matryoshka_cut(np.ones((1, 3), np.float32), 4, normalize=False)


def test_pad_and_concatenate_right_pads_shorter_requests():
    merged = ort_model.pad_and_concatenate([np.ones((1, 2), np.int64), np.ones((2, 4), np.int64)])
    assert merged.shape == (3, 4)
    assert merged[0].tolist() == [1, 1, 0, 0]


def test_onnxruntime_session_options_are_what_the_native_backend_reads_from_the_config():
    """Threads, execution mode, the memory switches, the graph level on the native backend's scale, and of the
    ``session.*`` parameters only the one it passes on: spinning keeps ONNX Runtime's default, as in the container."""
    import onnxruntime as ort

    def options(level=None, **parameters):
        config = {"parameters": {key: {"string_value": value} for key, value in parameters.items()}}
        if level is not None:
            config["optimization"] = {"graph": {"level": level}}
        return ort_model.session_options(config)

    levels = ort.GraphOptimizationLevel
    assert options().graph_optimization_level == levels.ORT_ENABLE_ALL
    assert [options(level).graph_optimization_level for level in (-1, 0, 1, 2)] == [
        levels.ORT_ENABLE_BASIC, levels.ORT_ENABLE_ALL, levels.ORT_ENABLE_EXTENDED, levels.ORT_DISABLE_ALL
    ]  # fmt: skip
    got = options(
        intra_op_thread_count="2", inter_op_thread_count="0", execution_mode="1", enable_mem_pattern="false",
        **{"session.intra_op.allow_spinning": "0", "session.use_device_allocator_for_initializers": "1"},
    )  # fmt: skip
    assert (got.intra_op_num_threads, got.inter_op_num_threads) == (2, 0)
    assert got.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert not got.enable_mem_pattern and got.enable_cpu_mem_arena
    assert got.get_session_config_entry("session.use_device_allocator_for_initializers") == "1"
    with pytest.raises(Exception, match="allow_spinning"):  # never set: ONNX Runtime spins by default
        got.get_session_config_entry("session.intra_op.allow_spinning")
    # The build's in-process sessions take the same options from the settings themselves.
    typed = ort_model.native_options(2, 0, 1, parallel=True)
    parsed = options(1, intra_op_thread_count="2", execution_mode="1")
    fields = ("intra_op_num_threads", "inter_op_num_threads", "execution_mode", "graph_optimization_level")
    assert [getattr(typed, f) for f in fields] == [getattr(parsed, f) for f in fields]
    assert ort_model.native_options(-1).intra_op_num_threads == options(intra_op_thread_count="-1").intra_op_num_threads


def test_onnxruntime_backend_runs_requests_in_one_session_call(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    # A graph that sums input_ids * attention_mask over the sequence: padding must not change it.
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
            helper.make_node("Cast", ["masked"], ["as_float"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", ["as_float", "axes"], ["logits"], keepdims=1),
        ],
        "sum",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 1])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    (tmp_path / "1").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "1" / "model.onnx")
    config = {  # as the server hands it over: every field filled
        "max_batch_size": 8,
        "input": [{"name": n, "data_type": "TYPE_INT64", "dims": [-1]} for n in ("input_ids", "attention_mask")],
        "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [1]}],
        "parameters": {"intra_op_thread_count": {"string_value": "1"}},
        "optimization": {"graph": {"level": -1}},
    }
    model = ort_model.TritonPythonModel()
    model.initialize(_args(tmp_path, config))
    calls = []
    run = model.session.run
    model.session.run = lambda *a, **k: calls.append(1) or run(*a, **k)
    ids = [np.array([[1, 2]], np.int64), np.array([[3, 4, 5], [6, 0, 0]], np.int64)]
    masks = [np.ones((1, 2), np.int64), np.array([[1, 1, 1], [1, 0, 0]], np.int64)]
    responses = model.execute([Request({"input_ids": i, "attention_mask": m}) for i, m in zip(ids, masks, strict=True)])
    assert len(calls) == 1
    assert [r.output("logits")[:, 0].tolist() for r in responses] == [[3.0], [12.0, 6.0]]


def test_onnxruntime_backend_runs_and_returns_only_the_outputs_asked_for(tmp_path):
    """An ensemble step asks for the outputs it maps: a folded graph's raw output is neither run nor copied."""
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Cast", ["input_ids"], ["raw"], to=TensorProto.FLOAT),
         helper.make_node("Neg", ["raw"], ["SCORE"])],
        "two",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", 1])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", 1]) for n in ("raw", "SCORE")],
    )  # fmt: skip
    (tmp_path / "1").mkdir()
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "1" / "model.onnx")
    config = {
        "max_batch_size": 8,
        "input": [{"name": "input_ids", "data_type": "TYPE_INT64", "dims": [1]}],
        "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [1]} for n in ("raw", "SCORE")],
    }
    model = ort_model.TritonPythonModel()
    model.initialize(_args(tmp_path, config))
    asked = []
    run = model.session.run
    model.session.run = lambda names, feeds: asked.append(list(names)) or run(names, feeds)
    ids = np.array([[2]], np.int64)
    responses = model.execute([Request({"input_ids": ids}, requested=("SCORE",)), Request({"input_ids": ids})])
    assert asked == [["raw", "SCORE"]]  # the second request asked for nothing: every output, as the server does
    responses = model.execute([Request({"input_ids": ids}, requested=("SCORE",))])
    assert asked[-1] == ["SCORE"] and [t.name() for t in responses[0].output_tensors] == ["SCORE"]
    assert responses[0].output("SCORE").tolist() == [[-2.0]]
