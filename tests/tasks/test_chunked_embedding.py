"""Embeddings of long texts in windows (``long_text: chunk``): the settings, the two steps, and the served ensemble.

The rule: a text longer than the model becomes overlapping windows of the model's length, each with its special
tokens; its embedding is the mean of the windows' pooled embeddings weighted by their text tokens (special tokens
not counted), then L2-normalised where the model normalises. The served ensemble is compared with that rule
computed in PyTorch on texts several windows long.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from tests import pb_stub
from tests.configs.test_render import INPUTS, _checkpoint
from tests.pb_stub import Request
from tritongen.builder.ensemble import step_configs
from tritongen.builder.spec import load_spec
from tritongen.configs.render import render_all
from tritongen.errors import SpecError
from tritongen.serve.client import infer
from tritongen.steps import _common, postprocess, tokenizer
from tritongen.tasks import get_task
from tritongen.tasks.embedding import chunk_overlap
from tritongen.tasks.embedding import postprocess as embedding_postprocess
from tritongen.tasks.embedding import tokenizer as embedding_tokenizer

WINDOW = 64  # the tiny checkpoint's length: long texts are several windows
OVERLAP = 16  # the default: a quarter window
SHORT = "A short sentence fits in one window."
LONG = [
    " ".join(f"word{i}" for i in range(150)),  # every window's tokens differ
    "Ünïcödé café 🎉 and a long tail of text. " * 30,
]


@pytest.fixture
def _stub_pb_utils(monkeypatch):
    for module in (_common, tokenizer, postprocess, embedding_postprocess):
        monkeypatch.setattr(module, "pb_utils", pb_stub)


def _texts(*values: str) -> np.ndarray:
    return np.array([[v.encode()] for v in values], dtype=np.object_)


def _spec(**embedding):
    return load_spec(None, model="m", name="emb", embedding={"long_text": "chunk", **embedding})


# --- settings and binding ------------------------------------------------------------------------------------------


def test_settings_refuse_unknown_long_text_and_an_overlap_without_chunk():
    with pytest.raises(SpecError, match="long_text `cut` is unknown; use truncate or chunk"):
        load_spec(None, model="m", long_text="cut")
    with pytest.raises(SpecError, match="applies to long_text chunk only"):
        load_spec(None, model="m", chunk_overlap=8)
    spec = load_spec(None, model="m", long_text="chunk", chunk_overlap=8)  # the flat names the CLI flags set
    assert chunk_overlap(spec, WINDOW) == 8
    assert chunk_overlap(load_spec(None, model="m", long_text="chunk"), 1024) == 128


def test_bind_refuses_fold_and_an_overlap_as_wide_as_the_window_when_chunked():
    task, checkpoint = get_task("embedding"), _checkpoint(architectures=["BertModel"], hidden_size=48)
    facts = {"special_tokens": "2"}
    with pytest.raises(SpecError, match="fold removes: build with fold off, or with long_text truncate"):
        task.bind(_spec().replace(fold=True), checkpoint, inputs=INPUTS, row_length=WINDOW, tokenizer_facts=facts)
    with pytest.raises(SpecError, match="chunk_overlap 62 must be below the 62 text tokens"):
        task.bind(_spec(chunk_overlap=62), checkpoint, inputs=INPUTS, row_length=WINDOW, tokenizer_facts=facts)


def test_chunked_ensemble_takes_whole_requests_and_keeps_truncated_in_its_contract():
    spec, checkpoint = _spec(), _checkpoint(architectures=["BertModel"], hidden_size=48)
    plan = get_task("embedding").bind(spec, checkpoint, inputs=INPUTS, row_length=WINDOW)
    rendered = render_all(step_configs(spec, plan))
    ensemble = rendered["ensemble"][1]
    assert ensemble.max_batch_size == 0
    outputs = [(o.name, list(o.dims)) for o in ensemble.output]
    assert outputs == [("EMBEDDING", [-1, 48]), ("TRUNCATED", [-1, 1]), ("TOKEN_COUNT", [-1, 1])]
    assert rendered["tokenizer"][1].parameters["stride"].string_value == str(OVERLAP)
    windowed = ["sentence_embedding", "window_example", "window_tokens"]
    assert [i.name for i in rendered["postprocess"][1].input] == windowed
    assert plan.task == "embedding" and not plan.truncates
    assert plan.step_modules["tokenizer"] == "tritongen.tasks.embedding.tokenizer"


# --- the steps -----------------------------------------------------------------------------------------------------


def test_combine_windows_weights_by_text_tokens_and_keeps_one_window_exactly():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(6, 5)).astype(np.float32)
    owners, tokens = np.array([0, 0, 0, 1, 2, 2]), np.array([[62], [62], [10], [0], [3], [1]])
    combined = embedding_postprocess.combine_windows(vectors, owners, tokens)
    expected = (62 * vectors[0].astype(np.float64) + 62 * vectors[1] + 10 * vectors[2]) / 134
    np.testing.assert_allclose(combined[0], expected, rtol=1e-6)
    assert np.array_equal(combined[1], vectors[3])  # an empty text's one window: weight 1, its vector as is
    np.testing.assert_allclose(combined[2], (3 * vectors[4].astype(np.float64) + vectors[5]) / 4, rtol=1e-6)
    assert combined.dtype == np.float32 and combined.shape == (3, 5)


def _tokenizer_step(tmp_path: Path, checkpoint: Path, max_windows: int = 64) -> embedding_tokenizer.TritonPythonModel:
    (tmp_path / "1").mkdir(exist_ok=True)
    shutil.copy(checkpoint / "tokenizer.json", tmp_path / "1" / "tokenizer.json")
    params = {"max_length": str(WINDOW), "buckets": "16,32", "stride": str(OVERLAP), "max_windows": str(max_windows)}
    outputs = ["input_ids", "attention_mask", "token_type_ids", "TRUNCATED", "TOKEN_COUNT", "window_example"]
    outputs.append("window_tokens")
    config = {
        "input": [{"name": "TEXT"}],
        "output": [{"name": name} for name in outputs],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }
    step = embedding_tokenizer.TritonPythonModel()
    step.initialize({"model_config": json.dumps(config), "model_repository": str(tmp_path), "model_version": "1"})
    return step


@pytest.mark.usefixtures("_stub_pb_utils")
def test_tokenizer_step_windows_long_texts_with_special_tokens_and_keeps_a_short_text_as_truncation_does(
    tmp_path, tiny_factory
):
    step = _tokenizer_step(tmp_path, tiny_factory("bert", "embedding"))
    (response,) = step.execute([Request({"TEXT": _texts(SHORT, LONG[0])})])
    ids, mask = response.output("input_ids"), response.output("attention_mask")
    owners = response.output("window_example")
    assert not response.output("TRUNCATED").any() and response.output("TRUNCATED").shape == (2, 1)
    assert owners.reshape(-1)[0] == 0 and (owners.reshape(-1)[1:] == 1).all() and len(owners) >= 4
    cls, sep = step.encoder.tokenizer.token_to_id("[CLS]"), step.encoder.tokenizer.token_to_id("[SEP]")
    lengths = mask.sum(axis=1)
    assert (ids[:, 0] == cls).all() and all(ids[row, n - 1] == sep for row, n in enumerate(lengths))
    assert (response.output("window_tokens").reshape(-1) == lengths - 2).all()
    assert lengths[1] == WINDOW  # a long text's full windows hold the model's length
    first, second = ids[1, 1 : WINDOW - 1], ids[2, 1 : WINDOW - 1]
    assert first[-OVERLAP:].tolist() == second[:OVERLAP].tolist()  # neighbours share the overlap
    plain = step.encoder([SHORT])["input_ids"][0]
    assert ids[0, : len(plain)].tolist() == plain.tolist()
    whole = Tokenizer.from_file(str(tmp_path / "1" / "tokenizer.json"))
    whole.no_truncation()
    counts = [len(e.ids) for e in whole.encode_batch([SHORT, LONG[0]])]  # each token once, as if read whole
    assert response.output("TOKEN_COUNT").tolist() == [[counts[0]], [counts[1]]] and counts[1] > 2 * WINDOW
    assert response.output("TOKEN_COUNT").dtype == np.int32


@pytest.mark.usefixtures("_stub_pb_utils")
def test_tokenizer_step_refuses_a_request_with_more_windows_than_the_model_batch(tmp_path, tiny_factory):
    step = _tokenizer_step(tmp_path, tiny_factory("bert", "embedding"), max_windows=2)
    ok, refused = step.execute([Request({"TEXT": _texts(SHORT)}), Request({"TEXT": _texts(LONG[0])})])
    assert ok.error is None
    assert refused.error.code() == pb_stub.TritonError.INVALID_ARG
    assert "more than the 2 the model step takes" in refused.error.message()


@pytest.mark.usefixtures("_stub_pb_utils")
def test_postprocess_step_combines_each_requests_windows_then_normalises(tmp_path):
    config = {
        "input": [{"name": n} for n in ("sentence_embedding", "window_example", "window_tokens")],
        "output": [{"name": "EMBEDDING"}],
        "parameters": {"normalize": {"string_value": "true"}},
    }
    step = embedding_postprocess.TritonPythonModel()
    step.initialize({"model_config": json.dumps(config), "model_repository": str(tmp_path), "model_version": "1"})
    vectors = np.array([[3.0, 0.0], [0.0, 4.0], [1.0, 1.0]], np.float32)
    (response,) = step.execute(
        [Request({"sentence_embedding": vectors, "window_example": np.array([[0], [0], [1]]),
                  "window_tokens": np.array([[3], [1], [5]])})]
    )  # fmt: skip
    first = np.array([9.0, 4.0]) / 4  # (3 * [3, 0] + 1 * [0, 4]) / 4
    expected = [first / np.linalg.norm(first), [0.5**0.5, 0.5**0.5]]
    np.testing.assert_allclose(response.output("EMBEDDING"), expected, rtol=1e-6)


def test_build_refuses_chunk_under_a_name_served_truncating(tiny_factory, builds, tmp_path):
    from rich.console import Console

    from tritongen.builder.pipeline import build_repository

    checkpoint = tiny_factory("bert", "embedding")
    repository = builds.copy(builds(checkpoint, "bert_emb"), into=tmp_path / "repo")
    spec = load_spec(None, model=str(checkpoint), name="bert_emb", repository=repository, long_text="chunk")
    with pytest.raises(SpecError, match="served by versions that do not split texts into windows and this build does"):
        build_repository(spec, console=Console(quiet=True))
    assert sorted(p.name for p in (repository / "bert_emb").iterdir()) == ["1", "config.pbtxt"]


# --- the served ensemble -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tiny_factory, builds, shared_server):
    checkpoint = tiny_factory("bert", "embedding")
    truncating = builds(checkpoint, "bert_emb")  # as tests/builder/test_build.py builds it
    chunking = builds(checkpoint, "bert_emb_chunk", embedding={"long_text": "chunk"})  # as test_step_imports too
    return checkpoint, chunking, shared_server.serve(truncating, chunking), shared_server.repository


def _torch_rule(checkpoint: Path, texts: list[str]) -> np.ndarray:
    """The rule in PyTorch: the transformers tokenizer's overflowing windows, pooled, weighted, normalised."""
    import torch
    from transformers import AutoTokenizer

    from tritongen.model.checkpoint import inspect_checkpoint

    module = get_task("embedding").load_module(inspect_checkpoint(checkpoint))
    batch = AutoTokenizer.from_pretrained(str(checkpoint))(
        texts, max_length=WINDOW, truncation=True, stride=OVERLAP, return_overflowing_tokens=True,
        return_special_tokens_mask=True, padding=True, return_tensors="pt",
    )  # fmt: skip
    with torch.no_grad():
        pooled = module(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).double()
    weights = ((1 - batch["special_tokens_mask"]) * batch["attention_mask"]).sum(dim=1).double()
    owners = batch["overflow_to_sample_mapping"]
    assert torch.bincount(owners)[1:].min() >= 4  # the long texts really are several windows
    sums = torch.zeros(len(texts), pooled.shape[1], dtype=torch.float64)
    sums.index_add_(0, owners, weights[:, None] * pooled)
    totals = torch.zeros(len(texts), dtype=torch.float64).index_add_(0, owners, weights)
    return torch.nn.functional.normalize(sums / totals[:, None], dim=1).numpy()


@pytest.mark.e2e
def test_served_chunked_embeddings_equal_the_rule_in_pytorch_and_are_never_truncated(served):
    checkpoint, chunking, server, _ = served
    texts = [SHORT, *LONG]
    rows = infer(texts, name="bert_emb_chunk", url=server.grpc_url)
    served_vectors = np.array([row["EMBEDDING"] for row in rows])
    assert np.abs(served_vectors - _torch_rule(checkpoint, texts)).max() <= 1e-4
    assert [row["TRUNCATED"] for row in rows] == [False, False, False]
    assert "neighbours sharing 16 tokens" in chunking.card()


@pytest.mark.e2e
def test_served_chunked_embedding_of_a_short_text_is_exactly_the_truncating_builds(served):
    _, _, server, _ = served
    (chunked,) = infer([SHORT], name="bert_emb_chunk", url=server.grpc_url)
    (truncated,) = infer([SHORT], name="bert_emb", url=server.grpc_url)
    assert chunked["EMBEDDING"] == truncated["EMBEDDING"]
    (cut,) = infer([LONG[0]], name="bert_emb", url=server.grpc_url)
    assert cut["TRUNCATED"] is True  # the truncating build still says where it cut


@pytest.mark.e2e
def test_gateway_embeds_a_long_text_under_tei_truncate_false_only_when_the_build_chunks(served):
    from starlette.testclient import TestClient

    from tritongen.gateway import GatewayOptions, create_app

    _, _, server, repository = served
    with TestClient(
        create_app(GatewayOptions(triton_url=server.grpc_url, triton_http_url=server.http_url, repository=repository))
    ) as client:
        chunked = client.post("/embed", json={"inputs": [SHORT, LONG[0]], "model": "bert_emb_chunk", "truncate": False})
        cut = client.post("/embed", json={"inputs": [LONG[0]], "model": "bert_emb", "truncate": False})
        usage = [  # OpenAI's usage counts the tokens the ensemble reads: every window's, or the cut text's
            client.post("/v1/embeddings", json={"input": LONG[0], "model": m}).json()["usage"]["prompt_tokens"]
            for m in ("bert_emb_chunk", "bert_emb")
        ]
    assert cut.status_code == 422  # TEI 1.9: a text longer than the model under truncate: false
    assert chunked.status_code == 200, chunked.text
    assert usage[0] > 2 * usage[1] and usage[1] == 64  # LONG is several windows long; the cut build reads 64
    rows = infer([SHORT, LONG[0]], name="bert_emb_chunk", url=server.grpc_url)
    np.testing.assert_allclose(chunked.json(), [row["EMBEDDING"] for row in rows], atol=1e-7)
