"""The OpenAI/TEI gateway, end to end: ``tritongen serve`` as users run it, the gateway as a subprocess, real clients.

``serve`` restricts Triton's repository API to its admin key; the gateway must serve behind it. ``/v1/embeddings``
is called with the official ``openai`` client; the TEI routes with ``urllib``. Every answer is compared with what
Triton returns for the same texts directly.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.deployment import ServeProcess
from tests.tiny_sparse import make_splade
from tests.tiny_variants import make_cross_encoder, make_unnormalised_embedder
from tritongen.bench.perf import Sweep
from tritongen.bench.process import start_http_process
from tritongen.bench.run import BenchOptions, run_bench
from tritongen.deploy import PackageOptions, write_package
from tritongen.deploy.gateway import run_command
from tritongen.errors import BenchError
from tritongen.gateway.errors import from_triton
from tritongen.gateway.schemas import (
    EmbeddingsRequest,
    EmbedRequest,
    PredictRequest,
    RerankRequest,
    SimilarityRequest,
    SparseRequest,
    TokenizeRequest,
)
from tritongen.serve.admin import ENV, default_key_file
from tritongen.serve.client import infer
from tritongen.serve.ports import free_port
from tritongen.serve.server import server_environment

KEY = "test-key-0123456789"
TEXTS = ["I love this movie", "Terrible, awful, bad.", "Ünïcödé and emoji 🎉", "short"]
LONG = "word " * 200  # longer than the tiny models' 64 tokens
# The four ensembles, named as the modules that build the same checkpoints with the same settings name them,
# so that a session builds each once.
EMB, RAW, RERANK, CLS, SPARSE = "bert_emb", "emb_raw", "rr_cross", "cls_bpe", "splade"


@pytest.fixture(scope="module")
def checkpoints(tiny_factory, checkpoint_cache) -> dict[str, Path]:
    return {
        EMB: tiny_factory("bert", "embedding"),  # normalised (tests/builder/test_build.py)
        RAW: checkpoint_cache(make_unnormalised_embedder, "bert"),  # the same weights, mean pooling only
        RERANK: checkpoint_cache(make_cross_encoder),  # a one-label cross-encoder (tests/tasks/test_reranking_e2e.py)
        CLS: tiny_factory("roberta", "classification"),  # three labels (tests/serve/test_e2e.py)
        SPARSE: checkpoint_cache(make_splade),  # SPLADE with SparseEncoder files (tests/tasks/test_sparse_e2e.py)
    }


@pytest.fixture(scope="module")
def served(checkpoints, builds, tmp_path_factory) -> Iterator[tuple[ServeProcess, Path]]:
    """``tritongen serve`` of the four builds, as ``make serve`` runs it: it writes its admin key beside them."""
    root = tmp_path_factory.mktemp("gateway")
    repo = builds.repository(
        *(builds(path, name) for name, path in checkpoints.items()), into=root / "model_repository"
    )
    env = {k: v for k, v in server_environment().items() if k != ENV}
    with ServeProcess(repo, root / "serve.log", env=env, grace_period=5) as serve:
        yield serve, repo


@contextlib.contextmanager
def _gateway(
    log: Path, *args: str, key: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``python -m tritongen gateway`` on a free port (``cwd``'s tritongen where given, as an image runs it)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("TRITONGEN_GATEWAY_KEY", ENV)}
    if key is not None:
        clean["TRITONGEN_GATEWAY_KEY"] = key

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "tritongen", "gateway", *args, "--port", str(port)]

    process, url = start_http_process(
        command, log, what="the gateway", env={**clean, **(env or {})}, timeout=60, ready="/livez", cwd=cwd
    )
    try:
        yield url, process
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing of its group may outlive it
            os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def gateway(served, tmp_path_factory):
    serve, repo = served
    log = tmp_path_factory.mktemp("gateway-log") / "gateway.log"
    with _gateway(
        log, "--repository", str(repo), "--triton-url", serve.grpc_url, "--triton-http-url", serve.http_url, key=KEY
    ) as (url, process):
        yield url, process, log
    # uvicorn drains, then re-raises SIGTERM so that the exit status tells how it stopped
    assert process.returncode == -signal.SIGTERM and "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{gateway[0]}/v1", api_key=KEY, max_retries=0)


def post(gateway, path: str, body: object, key: str | None = KEY) -> tuple[int, object]:
    """POST JSON with urllib; the status and the parsed answer (errors included)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    return _answer(urllib.request.Request(f"http://{gateway[0]}{path}", data=data, headers=headers))


def get(gateway, path: str, key: str | None = None) -> tuple[int, object]:
    """GET with urllib; the status and the parsed answer (errors included)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return _answer(urllib.request.Request(f"http://{gateway[0]}{path}", headers=headers))


def _answer(request: urllib.request.Request) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def direct(served, name: str, texts: list[str], **pairs) -> list[dict]:
    return infer(texts, name=name, url=served[0].grpc_url, inputs=pairs or None)


def _tei_error(answer: object, error_type: str) -> str:
    assert isinstance(answer, dict) and answer.keys() == {"error", "error_type"}, answer
    assert answer["error_type"] == error_type, answer
    return answer["error"]


def _error(answer: object) -> dict:
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    assert set(answer["error"]) == {"message", "type", "param", "code"}, answer
    return answer["error"]


# -- behind `tritongen serve`: its repository index is restricted to the admin key -----------------------------


@pytest.mark.e2e
def test_embeddings_match_triton_behind_serve_when_its_repository_index_is_restricted(client, served):
    triton = grpcclient.InferenceServerClient(served[0].grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            triton.get_model_repository_index()  # what the gateway must do without
    finally:
        triton.close()
    answer = client.embeddings.create(model=EMB, input=TEXTS, encoding_format="float")
    expected = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS)])
    np.testing.assert_allclose(np.array([d.embedding for d in answer.data]), expected, atol=1e-7)


@pytest.mark.e2e
def test_gateway_lists_ensembles_with_serves_key_when_repository_is_not_on_its_machine(served, tmp_path):
    serve, repo = served
    elsewhere = str(tmp_path / "model_repository")  # no such folder here: the index lists the ensembles
    key_file = str(default_key_file(repo))
    args = (
        "--repository",
        elsewhere,
        "--triton-url",
        serve.grpc_url,
        "--triton-http-url",
        serve.http_url,
        "--admin-key-file",
        key_file,
    )
    with _gateway(tmp_path / "gateway.log", *args) as gateway:
        assert get(gateway, "/health") == (200, {"status": "ok"})
        status, models = get(gateway, "/v1/models")
        assert status == 200 and sorted(m["id"] for m in models["data"]) == sorted([EMB, RAW, RERANK, CLS, SPARSE])
        client = openai.OpenAI(base_url=f"http://{gateway[0]}/v1", api_key="unused", max_retries=0)
        answer = client.embeddings.create(model=EMB, input=TEXTS[:2], encoding_format="float")
    expected = [row["EMBEDDING"] for row in direct(served, EMB, TEXTS[:2])]
    np.testing.assert_allclose([d.embedding for d in answer.data], expected, atol=1e-7)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env", "reason"),
    [({}, "needs the admin key"), ({ENV: "not-the-key"}, "Triton refused the admin key")],
    ids=["no-key", "wrong-key"],
)
def test_gateway_health_is_503_when_it_cannot_list_the_ensembles_without_the_key(served, tmp_path, env, reason):
    serve, _ = served
    args = (
        "--repository",
        str(tmp_path / "model_repository"),
        "--triton-url",
        serve.grpc_url,
        "--triton-http-url",
        serve.http_url,
    )
    with _gateway(tmp_path / "gateway.log", *args, env=env) as gateway:
        status, answer = get(gateway, "/health")
        assert status == 503 and reason in _error(answer)["message"]
        status, answer = get(gateway, "/v1/models")
        assert status == 503 and reason in _error(answer)["message"]
        # a model named in the request is still found: its config is open to every client
        status, answer = post(gateway, "/embed", {"inputs": TEXTS[0], "model": EMB}, key=None)
    assert status == 200
    np.testing.assert_allclose(answer, [direct(served, EMB, TEXTS[:1])[0]["EMBEDDING"]], atol=1e-6)


@pytest.mark.e2e
def test_packaged_gateway_serves_from_its_image_folder_when_started_as_the_image_starts_it(served, tmp_path):
    serve, repo = served
    image = write_package(EMB, repo, tmp_path / "deploy", options=PackageOptions(gateway=True)) / "gateway"
    command = run_command(
        ["--triton-url", serve.grpc_url, "--triton-http-url", serve.http_url], models=str(image / "models")
    )
    assert command[:4] == ["python", "-m", "tritongen", "gateway"]
    args = [a if a != "0.0.0.0" else "127.0.0.1" for a in command[4:]]  # the port: a free one, given last
    with _gateway(tmp_path / "gateway.log", *args, cwd=image) as gateway:
        assert get(gateway, "/health") == (200, {"status": "ok"})
        client = openai.OpenAI(base_url=f"http://{gateway[0]}/v1", api_key="unused", max_retries=0)
        answer = client.embeddings.create(model=EMB, input=TEXTS, encoding_format="float")
    expected = [row["EMBEDDING"] for row in direct(served, EMB, TEXTS)]
    np.testing.assert_allclose([d.embedding for d in answer.data], expected, atol=1e-7)
    assert answer.usage.prompt_tokens > len(TEXTS)  # the tokenizer step's tokenizer.json is in the image


# -- OpenAI /v1/embeddings with the official client ------------------------------------------------------------


@pytest.mark.e2e
def test_embeddings_match_triton_when_called_with_openai_client(client, served, checkpoints):
    from transformers import AutoTokenizer

    answer = client.embeddings.create(model=EMB, input=TEXTS, encoding_format="float")
    expected = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS)])
    assert [d.index for d in answer.data] == list(range(len(TEXTS)))
    np.testing.assert_allclose(np.array([d.embedding for d in answer.data]), expected, atol=1e-7)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints[EMB]))
    tokens = sum(len(ids) for ids in tokenizer(TEXTS, truncation=True, max_length=64)["input_ids"])
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == tokens
    assert sum(row["TOKEN_COUNT"] for row in direct(served, EMB, TEXTS)) == tokens  # the ensemble's own counts
    assert answer.model == EMB


@pytest.mark.e2e
def test_embeddings_base64_decodes_to_triton_floats_when_asked(client, served):
    raw = client.embeddings.create(model=EMB, input=TEXTS[:2], encoding_format="base64")
    decoded = np.array([np.frombuffer(base64.b64decode(d.embedding), "<f4") for d in raw.data])
    expected = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS[:2])], np.float32)
    np.testing.assert_array_equal(decoded, expected)
    # the client's default asks for base64 and decodes it itself
    default = client.embeddings.create(model=EMB, input=TEXTS[0])
    np.testing.assert_allclose(default.data[0].embedding, expected[0], atol=1e-6)  # alone: another batch shape


@pytest.mark.e2e
def test_embeddings_dimensions_are_cut_and_renormalised_when_ensemble_normalises(client, served):
    answer = client.embeddings.create(model=EMB, input=TEXTS, dimensions=8, encoding_format="float")
    full = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS)])
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(np.array([d.embedding for d in answer.data]), expected, atol=1e-6)


@pytest.mark.e2e
def test_embeddings_dimensions_refused_when_ensemble_does_not_normalise(client):
    with pytest.raises(openai.BadRequestError, match="does not normalise its embeddings"):
        client.embeddings.create(model=RAW, input=TEXTS, dimensions=8)
    with pytest.raises(openai.BadRequestError, match="embeds into 32"):
        client.embeddings.create(model=EMB, input=TEXTS, dimensions=33)


@pytest.mark.e2e
def test_embeddings_errors_surface_as_openai_exceptions_with_the_message(client):
    with pytest.raises(openai.NotFoundError, match="`nope` does not exist"):
        client.embeddings.create(model="nope", input="x")
    with pytest.raises(openai.BadRequestError, match="cannot serve /v1/embeddings: it outputs no EMBEDDING"):
        client.embeddings.create(model=CLS, input="x")
    with pytest.raises(openai.BadRequestError, match="holds the id 100257"):  # tiktoken's, not this model's
        client.embeddings.create(model=EMB, input=[[9906, 100257]])


@pytest.mark.e2e
def test_gateway_refuses_with_401_when_key_is_wrong_or_missing(gateway):
    wrong = openai.OpenAI(base_url=f"http://{gateway[0]}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="incorrect API key"):
        wrong.embeddings.create(model=EMB, input="x")
    status, answer = post(gateway, "/embed", {"inputs": "x"}, key=None)
    assert status == 401 and _error(answer)["code"] == "invalid_api_key"
    with urllib.request.urlopen(f"http://{gateway[0]}/health", timeout=10) as response:  # probes need no key
        assert response.status == 200


@pytest.mark.e2e
def test_models_lists_the_ensembles_when_asked(client):
    assert sorted(m.id for m in client.models.list()) == sorted([EMB, RAW, RERANK, CLS, SPARSE])
    assert client.models.retrieve(RERANK).id == RERANK


# -- TEI routes with a plain HTTP client -----------------------------------------------------------------------


@pytest.mark.e2e
def test_embed_matches_triton_and_normalises_when_asked(gateway, served):
    status, answer = post(gateway, "/embed", {"inputs": TEXTS, "model": EMB})
    assert status == 200
    np.testing.assert_allclose(answer, [row["EMBEDDING"] for row in direct(served, EMB, TEXTS)], atol=1e-7)
    raw = np.array([row["EMBEDDING"] for row in direct(served, RAW, TEXTS)])
    status, answer = post(gateway, "/embed", {"inputs": TEXTS, "model": RAW, "normalize": False})
    np.testing.assert_allclose(answer, raw, atol=1e-6)
    status, answer = post(gateway, "/embed", {"inputs": TEXTS[0], "model": RAW})
    np.testing.assert_allclose(answer, raw[:1] / np.linalg.norm(raw[:1]), atol=1e-6)
    status, answer = post(gateway, "/embed", {"inputs": "x", "model": EMB, "normalize": False})
    assert status == 422 and "normalize: false" in _tei_error(answer, "Validation")


def _inferences(served, model: str) -> int:
    """How many inferences Triton has run of ``model`` (its statistics)."""
    triton = grpcclient.InferenceServerClient(served[0].grpc_url)
    try:
        stats = triton.get_inference_statistics(model, as_json=True)["model_stats"]
    finally:
        triton.close()
    return sum(int(entry.get("inference_count", 0)) for entry in stats)


@pytest.mark.e2e
def test_the_gateway_runs_an_embedders_python_steps_itself_and_its_vectors_equal_the_ensembles_bit_for_bit(
    gateway, served
):
    """The gateway encodes and normalises an embedder's rows itself and calls its model step alone: Triton's
    tokenizer and postprocess steps see none of these requests, and every vector, every token count and every
    truncation is the ensemble's, bit for bit, for 1, 7 and 32 texts of mixed lengths and for a long text's end."""
    mixed = [TEXTS[i % len(TEXTS)] * (1 + i % 5) for i in range(32)]
    mixed[5] = LONG  # cut at the model's length: the same tokens both ways
    steps = [f"{EMB}_tokenizer", f"{EMB}_postprocess", f"{EMB}_model"]
    before = [_inferences(served, step) for step in steps]
    answers = {}
    for count in (1, 7, 32):
        status, answer = post(gateway, "/v1/embeddings", {"input": mixed[:count], "model": EMB})
        assert status == 200, answer
        answers[count] = answer
    status, left = post(gateway, "/embed", {"inputs": [ENDS], "model": EMB, "truncation_direction": "Left"})
    assert status == 200, left
    after = [_inferences(served, step) for step in steps]
    assert after[:2] == before[:2] and after[2] > before[2], (before, after)
    assert f"calling the model step alone, for {EMB}, " in gateway[2].read_text()  # it says so at start
    for count, answer in answers.items():
        expected = direct(served, EMB, mixed[:count])
        got = np.array([row["embedding"] for row in answer["data"]], dtype=np.float32)
        assert np.array_equal(got, np.array([row["EMBEDDING"] for row in expected], dtype=np.float32)), count
        tokens = sum(int(np.asarray(row["TOKEN_COUNT"]).sum()) for row in expected)
        assert answer["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    triton = grpcclient.InferenceServerClient(served[0].grpc_url)
    try:  # the ensemble itself, told to keep the end
        text, keep_end = (
            grpcclient.InferInput("TEXT", [1, 1], "BYTES"),
            grpcclient.InferInput("TRUNCATE_LEFT", [1, 1], "BOOL"),
        )
        text.set_data_from_numpy(np.array([[ENDS.encode()]], dtype=np.object_))
        keep_end.set_data_from_numpy(np.array([[True]]))
        end = triton.infer(EMB, [text, keep_end]).as_numpy("EMBEDDING")
    finally:
        triton.close()
    assert np.array_equal(np.array(left, dtype=np.float32), end)


def _triton_calls(gateway, model: str) -> float:
    """How many Triton calls the gateway has made for ``model`` (its ``/metrics``)."""
    with urllib.request.urlopen(f"http://{gateway[0]}/metrics", timeout=10) as response:
        text = response.read().decode()
    prefix = f'tritongen_gateway_coalesced_requests_count{{model="{model}"}} '
    return sum(float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix))


@pytest.mark.e2e
def test_a_big_request_is_spread_over_calls_and_its_rows_come_back_in_order(served, gateway, tmp_path):
    # 300 to 2,200 characters each, of mixed lengths: one request of 1, 7 and 32 of them
    words = "the quick brown fox jumps over the lazy dog while rain falls on the city at night".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(60 + 47 * (i % 9))) for i in range(32)]
    serve, repo = served
    triton = ("--triton-url", serve.grpc_url, "--triton-http-url", serve.http_url)
    with _gateway(tmp_path / "gateway.log", "--repository", str(repo), *triton, "--spread-calls", "3") as (url, _):
        spreading = (url, None)
        for count, calls in ((1, 1), (7, 3), (32, 3)):
            before = _triton_calls(spreading, EMB)
            body = {"inputs": texts[:count], "model": EMB, "truncate": True}
            status, answer = post(spreading, "/embed", body, None)
            assert status == 200 and _triton_calls(spreading, EMB) - before == calls
            want = [row["EMBEDDING"] for row in direct(served, EMB, texts[:count])]
            np.testing.assert_allclose(answer, want, atol=1e-5)
        # sparse rows differ in width from call to call: padded alike, then each row's own weights
        before = _triton_calls(spreading, SPARSE)
        status, spread = post(spreading, "/embed_sparse", {"inputs": texts, "model": SPARSE}, None)
        assert status == 200 and _triton_calls(spreading, SPARSE) - before == 3
        _, whole = post(gateway, "/embed_sparse", {"inputs": texts, "model": SPARSE})
        assert isinstance(spread, list) and isinstance(whole, list) and len(spread) == len(whole) == 32
        for got, want in zip(spread, whole, strict=True):
            assert [e["index"] for e in got] == [e["index"] for e in want]
            np.testing.assert_allclose([e["value"] for e in got], [e["value"] for e in want], atol=1e-5)


@pytest.mark.e2e
def test_embed_sparse_gives_the_ensembles_nonzero_weights_by_index_when_called(gateway, served):
    status, answer = post(gateway, "/embed_sparse", {"inputs": TEXTS, "model": SPARSE})
    assert status == 200 and len(answer) == len(TEXTS)
    for row, triton in zip(answer, direct(served, SPARSE, TEXTS), strict=True):
        indices = [i for i in triton["SPARSE_INDICES"] if i >= 0]  # the request's rows are padded with -1
        assert [entry["index"] for entry in row] == indices
        np.testing.assert_allclose([e["value"] for e in row], triton["SPARSE_VALUES"][: len(indices)], atol=1e-7)
    status, answer = post(gateway, "/", {"inputs": TEXTS[:1], "model": SPARSE})  # the root routes by model type
    assert status == 200 and [e["index"] for e in answer[0]] == [
        e["index"] for e in post(gateway, "/embed_sparse", {"inputs": TEXTS[:1], "model": SPARSE})[1][0]
    ]
    status, answer = post(gateway, "/embed_sparse", {"inputs": TEXTS, "model": EMB})
    assert status == 424 and "not a sparse embedding model" in _tei_error(answer, "Backend")


@pytest.mark.e2e
def test_openai_splits_into_max_batch_size_requests_and_tei_refuses_more_than_32_inputs(client, gateway, served):
    texts = [f"text number {i}" for i in range(70)]  # the ensembles' max_batch_size is 64
    got = client.embeddings.create(model=EMB, input=texts)
    expected = [row["EMBEDDING"] for chunk in (texts[:64], texts[64:]) for row in direct(served, EMB, chunk)]
    np.testing.assert_allclose([d.embedding for d in got.data], expected, atol=1e-6)
    status, answer = post(gateway, "/embed", {"inputs": texts, "model": EMB})  # TEI's max_client_batch_size
    assert status == 422 and _tei_error(answer, "Validation") == "batch size 70 > maximum allowed batch size 32"


# Every TEI route that embeds, predicts or reranks, with one text longer than the model.
TRUNCATING_ROUTES = {
    "/embed": {"inputs": ["fine", LONG], "model": EMB},
    "/embed_sparse": {"inputs": ["fine", LONG], "model": SPARSE},
    "/predict": {"inputs": ["fine", LONG], "model": CLS},
    "/rerank": {"query": "q", "texts": ["fine", LONG], "model": RERANK},
    "/": {"inputs": ["fine", LONG], "model": EMB},
}


def _with_truncate(path: str, body: dict, truncate: bool | None) -> dict:
    return {**body, **({} if truncate is None else {"truncate": truncate})}


@pytest.mark.e2e
@pytest.mark.parametrize("path", list(TRUNCATING_ROUTES))
def test_tei_routes_cut_a_long_text_unless_truncate_is_false_as_tei_1_9(gateway, path):
    body = TRUNCATING_ROUTES[path]
    status, default = post(gateway, path, _with_truncate(path, body, None))
    assert status == 200, default
    assert post(gateway, path, _with_truncate(path, body, True)) == (200, default)  # the default is truncate: true
    status, answer = post(gateway, path, _with_truncate(path, body, False))
    assert status == 422 and "item 1 is longer than the model's 64 tokens" in _tei_error(answer, "Validation")


@pytest.mark.e2e
def test_embed_takes_the_models_token_ids_as_the_text_and_refuses_an_id_past_its_vocabulary(gateway, served):
    """TEI's ``inputs`` may be token ids: the ids ``/tokenize`` gives for a text embed as the text does, beside texts
    in one request too; an id outside the vocabulary is TEI's 422 Validation, naming the item."""
    status, tokens = post(gateway, "/tokenize", {"inputs": TEXTS[:2], "model": EMB})
    assert status == 200
    ids = [[token["id"] for token in row] for row in tokens]
    by_text = np.array(post(gateway, "/embed", {"inputs": TEXTS[:2], "model": EMB})[1])
    for path, body in (
        ("/embed", {"inputs": ids, "model": EMB}),
        ("/embed", {"inputs": [TEXTS[0], ids[1]], "model": EMB}),
        ("/embed", {"inputs": ids[0], "model": EMB}),  # one row of ids
    ):
        status, answer = post(gateway, path, body)
        assert status == 200, answer
        got = np.array(answer)
        cosine = (
            (got * by_text[: len(got)]).sum(1)
            / np.linalg.norm(got, axis=1)
            / np.linalg.norm(by_text[: len(got)], axis=1)
        )
        assert cosine.min() > 0.9999, body
    vocabulary = json.loads((served[1] / f"{EMB}_tokenizer" / "1" / "tokenizer.json").read_text())["model"]["vocab"]
    status, answer = post(gateway, "/embed", {"inputs": ["fine", [101, len(vocabulary) + 5]], "model": EMB})
    assert status == 422 and "`inputs` item 1 holds the id" in _tei_error(answer, "Validation")
    sparse = post(gateway, "/embed_sparse", {"inputs": [ids[0]], "model": SPARSE})
    assert sparse[0] == 200 and sparse[1] == post(gateway, "/embed_sparse", {"inputs": [TEXTS[0]], "model": SPARSE})[1]


# Longer than the tiny models' 64 tokens, with a start and an end of its own.
ENDS = "the start of a review " + "word " * 100 + "and an ending that is all its own"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/embed", {"inputs": [ENDS], "model": EMB}),
        ("/embed_sparse", {"inputs": [ENDS], "model": SPARSE}),
        ("/predict", {"inputs": [ENDS], "model": CLS}),
        ("/rerank", {"query": "q", "texts": [ENDS], "model": RERANK}),
    ],
    ids=["embed", "embed_sparse", "predict", "rerank"],
)
def test_truncation_direction_left_keeps_a_long_texts_end(gateway, path, body):
    """``truncation_direction: Left`` is served by the tokenizer step: the text's last tokens, so another answer
    than its first tokens give; a text that fits answers the same both ways."""
    right = post(gateway, path, {**body, "truncation_direction": "Right"})
    left = post(gateway, path, {**body, "truncation_direction": "Left"})
    assert right[0] == left[0] == 200 and right[1] != left[1]
    short = json.loads(json.dumps(body).replace(json.dumps(ENDS), json.dumps(TEXTS[0])))
    assert post(gateway, path, {**short, "truncation_direction": "left"}) == post(gateway, path, short)


@pytest.mark.e2e
def test_a_long_text_gets_its_first_tokens_embedding_by_default_and_through_similarity(gateway, served):
    status, answer = post(gateway, "/embed", {"inputs": [LONG], "model": EMB})
    assert status == 200
    np.testing.assert_allclose(answer, [direct(served, EMB, [LONG])[0]["EMBEDDING"]], atol=1e-7)  # as Triton cuts
    body = {"inputs": {"source_sentence": LONG, "sentences": TEXTS}, "model": EMB}
    assert post(gateway, "/similarity", body)[0] == 200
    status, answer = post(gateway, "/similarity", {**body, "parameters": {"truncate": False}})
    assert status == 422 and "item 0 is longer" in _tei_error(answer, "Validation")


@pytest.mark.e2e
def test_auto_truncate_false_refuses_long_texts_unless_a_request_asks_to_cut_them(served, tmp_path):
    serve, repo = served
    args = (
        "--repository",
        str(repo),
        "--triton-url",
        serve.grpc_url,
        "--triton-http-url",
        serve.http_url,
        "--auto-truncate",
        "false",
    )
    with _gateway(tmp_path / "gateway.log", *args) as (url, _):
        status, answer = post((url,), "/embed", {"inputs": ["fine", LONG], "model": EMB}, key=None)
        assert status == 422 and "item 1 is longer" in _tei_error(answer, "Validation")
        assert post((url,), "/embed", {"inputs": [LONG], "model": EMB, "truncate": True}, key=None)[0] == 200
        openai_client = openai.OpenAI(base_url=f"http://{url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="`input` item 0 is longer"):
            openai_client.embeddings.create(model=EMB, input=[LONG])
        assert get((url,), f"/info?model={EMB}")[1]["auto_truncate"] is False


@pytest.mark.e2e
def test_rerank_sorts_triton_scores_when_given_texts(gateway, served):
    query = "a film I loved"
    status, answer = post(gateway, "/rerank", {"query": query, "texts": TEXTS, "return_text": True})
    assert status == 200  # the one text-pair scorer is the default
    scores = [row["SCORE"] for row in direct(served, RERANK, [query] * len(TEXTS), TEXT_PAIR=TEXTS)]
    assert [r["index"] for r in answer] == sorted(range(len(TEXTS)), key=lambda i: -scores[i])
    np.testing.assert_allclose([r["score"] for r in answer], sorted(scores, reverse=True), atol=1e-7)
    assert [r["text"] for r in answer] == [TEXTS[r["index"]] for r in answer]
    status, answer = post(gateway, "/rerank", {"query": query, "texts": TEXTS, "raw_scores": True})
    assert status == 422 and "`raw_scores` is not served" in _tei_error(answer, "Validation")


@pytest.mark.e2e
def test_predict_returns_all_labels_sorted_when_given_texts_or_pairs(gateway, served, checkpoints):
    labels = list(json.loads((checkpoints[CLS] / "config.json").read_text())["id2label"].values())
    rows = direct(served, CLS, TEXTS)
    status, answer = post(gateway, "/predict", {"inputs": TEXTS, "model": CLS})
    assert status == 200 and len(answer) == len(TEXTS)
    for got, row in zip(answer, rows, strict=True):
        order = np.argsort(-np.array(row["PROBABILITIES"]), kind="stable")
        assert [g["label"] for g in got] == [labels[i] for i in order]
        np.testing.assert_allclose([g["score"] for g in got], np.array(row["PROBABILITIES"])[order], atol=1e-7)
    status, single = post(gateway, "/predict", {"inputs": TEXTS[0], "model": CLS})
    assert single == answer[0]
    status, pair = post(gateway, "/predict", {"inputs": ["a query", "a text"], "model": RERANK})
    score = direct(served, RERANK, ["a query"], TEXT_PAIR=["a text"])[0]["SCORE"]
    assert status == 200 and len(pair) == 1 and pair[0]["score"] == pytest.approx(score, abs=1e-7)
    status, answer = post(gateway, "/predict", {"inputs": TEXTS})
    assert status == 422 and "several ensembles can serve /predict" in _tei_error(answer, "Validation")


@pytest.mark.e2e
def test_tokenize_matches_transformers_when_given_texts(gateway, checkpoints):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints[CLS]))
    status, answer = post(gateway, "/tokenize", {"inputs": TEXTS, "model": CLS})
    assert status == 200
    for text, tokens in zip(TEXTS, answer, strict=True):
        encoded = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        assert [t["id"] for t in tokens] == encoded["input_ids"]
        assert [t["special"] for t in tokens] == [bool(m) for m in encoded["special_tokens_mask"]]
        for token, (start, stop) in zip(tokens, encoded["offset_mapping"], strict=True):
            if not token["special"]:
                assert (token["start"], token["stop"], token["text"]) == (start, stop, text[start:stop])
    status, plain = post(gateway, "/tokenize", {"inputs": TEXTS[0], "model": CLS, "add_special_tokens": False})
    assert [t["id"] for t in plain[0]] == tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]


def _message(answer: object, family: str) -> str:
    """The message of an error of ``family``'s shape (asserting the shape)."""
    if family == "tei":
        assert isinstance(answer, dict) and answer.keys() == {"error", "error_type"}, answer
        return answer["error"]
    if family == "cohere":
        assert isinstance(answer, dict) and answer.keys() == {"message"}, answer
        return answer["message"]
    error = _error(answer)
    if family == "vllm":  # vLLM's ErrorInfo: the error class and the HTTP status as `code`
        assert error["type"].endswith("Error") and isinstance(error["code"], int), answer
    return error["message"]


@pytest.mark.e2e
def test_gateway_answers_each_apis_error_shape_and_status_when_request_is_bad(gateway):
    for path, body, status, family, fragment in [
        ("/v1/embeddings", b"{not json", 400, "openai", "not valid JSON"),
        ("/v1/embeddings", {"input": "x", "model": EMB, "encoding_format": "int8"}, 400, "openai", "encoding_format"),
        ("/rerank", {"query": "q", "texts": [], "model": RERANK}, 400, "tei", "cannot be empty"),
        ("/rerank", {"query": "q", "texts": ["a"], "model": CLS}, 424, "tei", "needs a text-pair scorer"),
        ("/predict", {"inputs": "x", "model": RERANK}, 422, "tei", "[text, text_pair]"),
        ("/embed_all", {"inputs": "x", "model": EMB}, 424, "tei", "not per-token embeddings"),
        ("/similarity", {"inputs": {"source_sentence": "a", "sentences": []}, "model": EMB}, 400, "tei", "empty"),
        ("/score", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"], "model": RERANK}, 400, "vllm", "give one"),
        ("/classify", {"input": "x", "model": "nope"}, 404, "vllm", "`nope` does not exist"),
        ("/v1/rerank", {"query": "q", "documents": ["a"], "model": EMB}, 400, "vllm", "needs a text-pair scorer"),
        ("/v2/embed", {"texts": ["a"], "model": EMB, "embedding_types": ["int8"]}, 400, "cohere", "embedding_types"),
        ("/v2/rerank", {"query": "q", "model": RERANK}, 400, "cohere", "`documents`"),
        ("/nowhere", {}, 404, "openai", "no route /nowhere"),
    ]:
        got, answer = post(gateway, path, body)
        assert got == status and fragment in _message(answer, family), (path, got, answer)
    assert get(gateway, "/health") == (200, {"status": "ok"})  # still up


@pytest.mark.e2e
def test_gateway_answers_503_when_triton_is_down(tmp_path):
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    urls = ("--triton-url", closed, "--triton-http-url", closed)
    with _gateway(tmp_path / "gateway.log", *urls, "--repository", str(tmp_path)) as gateway:
        status, answer = post(gateway, "/v1/embeddings", {"input": "x", "model": EMB}, key=None)
        health = get(gateway, "/health")
    assert status == 503 and _error(answer)["type"] == "server_error"
    assert "not reachable" in answer["error"]["message"] or "unavailable" in answer["error"]["message"].lower()
    assert health[0] == 503 and _error(health[1])["message"] == f"the Triton server at {closed} is not ready"


# -- the other APIs: Hugging Face's InferenceClient, token ids, Cohere's SDK, vLLM and Jina ---------------------


@pytest.mark.e2e
def test_hf_inference_client_gets_triton_values_when_pointed_at_a_models_root(
    gateway, served, checkpoints, monkeypatch
):
    from huggingface_hub import InferenceClient, constants
    from huggingface_hub.errors import HfHubHTTPError

    # the hub's offline mode (set for every test) blocks any URL; the client is given one and asks nothing else
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    root = f"http://{gateway[0]}/models"
    embedder = InferenceClient(model=f"{root}/{EMB}", token=KEY, provider="hf-inference")
    expected = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS)])
    np.testing.assert_allclose(embedder.feature_extraction(TEXTS[0]), expected[:1], atol=1e-6)
    similarities = embedder.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    np.testing.assert_allclose(similarities, expected[1:] @ expected[0], atol=1e-6)  # the embeddings are unit
    labels = list(json.loads((checkpoints[CLS] / "config.json").read_text())["id2label"].values())
    probabilities = np.array(direct(served, CLS, TEXTS[:1])[0]["PROBABILITIES"])
    top = InferenceClient(model=f"{root}/{CLS}", token=KEY).text_classification(TEXTS[0])
    assert (top.label, top.score) == (labels[int(probabilities.argmax())], pytest.approx(probabilities.max(), abs=1e-7))
    long_one = np.array(direct(served, EMB, [LONG])[0]["EMBEDDING"])  # TEI 1.9: cut unless told not to
    np.testing.assert_allclose(embedder.feature_extraction(LONG), long_one[None], atol=1e-6)
    with pytest.raises(HfHubHTTPError) as refused:
        embedder.feature_extraction(LONG, truncate=False)
    assert refused.value.response.status_code == 422
    info = embedder.get_endpoint_info()
    assert info["model_id"] == EMB and info["model_type"] == {"embedding": {"pooling": "mean"}}  # the build's
    assert info["max_input_length"] == 64 and info["max_batch_requests"] == 64
    assert (info["auto_truncate"], info["max_client_batch_size"], info["max_concurrent_requests"]) == (True, 32, 512)


@pytest.mark.e2e
def test_embeddings_of_token_ids_equal_their_texts_when_the_ids_are_the_models(client, checkpoints):
    """Token ids reach the model as they are, as Text Embeddings Inference takes them: the text's own ids, special
    tokens in, embed as the text does; ids without them are what the model then reads (no token is added)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints[EMB]))
    texts = TEXTS[:2]
    by_text = client.embeddings.create(model=EMB, input=texts, encoding_format="float")
    with_special = [tokenizer(t)["input_ids"] for t in texts]
    by_ids = client.embeddings.create(model=EMB, input=with_special, encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in by_ids.data], [d.embedding for d in by_text.data], atol=1e-6)
    assert by_ids.usage.prompt_tokens == by_text.usage.prompt_tokens
    mixed = client.embeddings.create(model=EMB, input=[texts[0], with_special[1]], encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in mixed.data], [d.embedding for d in by_text.data], atol=1e-6)
    plain = tokenizer(texts[0], add_special_tokens=False)["input_ids"]
    one = client.embeddings.create(model=EMB, input=plain)
    assert one.usage.prompt_tokens == len(plain)  # no [CLS] or [SEP] added
    assert not np.allclose(one.data[0].embedding, by_text.data[0].embedding, atol=1e-4)


@pytest.mark.e2e
def test_cohere_client_embeds_and_reranks_with_triton_values_when_pointed_at_the_gateway(gateway, served):
    import cohere

    co = cohere.ClientV2(base_url=f"http://{gateway[0]}", api_key=KEY)
    embedded = co.embed(model=EMB, texts=TEXTS, input_type="search_document", embedding_types=["float"])
    expected = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS)])
    np.testing.assert_allclose(embedded.embeddings.float_, expected, atol=1e-7)
    assert embedded.texts == TEXTS
    query = "a film I loved"
    scores = [row["SCORE"] for row in direct(served, RERANK, [query] * len(TEXTS), TEXT_PAIR=TEXTS)]
    ranked = co.rerank(model=RERANK, query=query, documents=TEXTS, top_n=2)
    order = sorted(range(len(TEXTS)), key=lambda i: -scores[i])[:2]
    assert [r.index for r in ranked.results] == order
    np.testing.assert_allclose([r.relevance_score for r in ranked.results], [scores[i] for i in order], atol=1e-7)
    with pytest.raises(cohere.BadRequestError, match="embedding_types"):
        co.embed(model=EMB, texts=TEXTS, input_type="search_query", embedding_types=["int8"])


@pytest.mark.e2e
def test_vllm_score_and_classify_and_jina_rerank_match_triton_when_called(gateway, served, checkpoints):
    query = "a film I loved"
    scores = [row["SCORE"] for row in direct(served, RERANK, [query] * len(TEXTS), TEXT_PAIR=TEXTS)]
    status, answer = post(gateway, "/score", {"model": RERANK, "text_1": query, "text_2": TEXTS})
    assert status == 200 and answer["object"] == "list" and answer["model"] == RERANK
    assert [(d["index"], d["object"]) for d in answer["data"]] == [(i, "score") for i in range(len(TEXTS))]
    np.testing.assert_allclose([d["score"] for d in answer["data"]], scores, atol=1e-7)
    status, answer = post(gateway, "/v1/score", {"model": RERANK, "queries": [query] * 2, "documents": TEXTS[:2]})
    np.testing.assert_allclose([d["score"] for d in answer["data"]], scores[:2], atol=1e-7)
    vectors = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS)])
    status, answer = post(gateway, "/score", {"model": EMB, "text_1": TEXTS[0], "text_2": TEXTS[1:]})
    np.testing.assert_allclose([d["score"] for d in answer["data"]], vectors[1:] @ vectors[0], atol=1e-6)
    documents = [{"text": t} for t in TEXTS]
    status, answer = post(gateway, "/v1/rerank", {"model": RERANK, "query": query, "documents": documents, "top_n": 3})
    order = sorted(range(len(TEXTS)), key=lambda i: -scores[i])[:3]
    assert status == 200 and [r["index"] for r in answer["results"]] == order
    assert [r["document"]["text"] for r in answer["results"]] == [TEXTS[i] for i in order]
    np.testing.assert_allclose([r["relevance_score"] for r in answer["results"]], [scores[i] for i in order], atol=1e-7)
    status, answer = post(gateway, "/v1/rerank", {"query": query, "documents": TEXTS, "return_documents": False})
    assert status == 200 and all(r.keys() == {"index", "relevance_score"} for r in answer["results"])
    probabilities = np.array([row["PROBABILITIES"] for row in direct(served, CLS, TEXTS)])
    status, answer = post(gateway, "/classify", {"model": CLS, "input": TEXTS})
    assert status == 200 and [d["num_classes"] for d in answer["data"]] == [3] * len(TEXTS)
    np.testing.assert_allclose([d["probs"] for d in answer["data"]], probabilities, atol=1e-7)
    labels = list(json.loads((checkpoints[CLS] / "config.json").read_text())["id2label"].values())
    assert [d["label"] for d in answer["data"]] == [labels[i] for i in probabilities.argmax(axis=1)]


@pytest.mark.e2e
def test_tei_similarity_decode_info_and_root_answer_as_tei_when_called(gateway, served, checkpoints):
    from transformers import AutoTokenizer

    vectors = np.array([row["EMBEDDING"] for row in direct(served, EMB, TEXTS)])
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}, "model": EMB}
    status, answer = post(gateway, "/similarity", body)
    assert status == 200
    np.testing.assert_allclose(answer, vectors[1:] @ vectors[0], atol=1e-6)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints[CLS]))
    ids = [tokenizer(t)["input_ids"] for t in TEXTS]
    status, answer = post(gateway, "/decode", {"ids": ids, "model": CLS})
    assert status == 200 and answer == tokenizer.batch_decode(ids, skip_special_tokens=True)
    status, answer = get(gateway, f"/info?model={CLS}", key=KEY)
    labels = json.loads((checkpoints[CLS] / "config.json").read_text())["id2label"]
    assert status == 200 and answer["model_type"] == {
        "classifier": {"id2label": labels, "label2id": {v: int(k) for k, v in labels.items()}}
    }
    status, answer = post(gateway, "/", {"inputs": TEXTS, "model": EMB})
    assert status == 200 and answer == post(gateway, "/embed", {"inputs": TEXTS, "model": EMB})[1]
    status, answer = post(gateway, "/", {"query": "a film I loved", "texts": TEXTS, "model": RERANK})
    assert status == 200 and [r["index"] for r in answer] == [
        r["index"] for r in post(gateway, "/rerank", {"query": "a film I loved", "texts": TEXTS})[1]
    ]


# -- the bench's baseline (e) -----------------------------------------------------------------------------------


@pytest.mark.e2e
def test_bench_measures_the_gateway_beside_triton_in_interleaved_rounds(served, tmp_path):
    options = BenchOptions(
        name=EMB, repository=served[1], output=tmp_path, baselines=("gateway",),
        sweep=Sweep(concurrency=(1, 2), fixed_requests=16), texts=32, peer_rounds=2, peer_seconds=1.0,
    )  # fmt: skip
    report, paths = run_bench(options)
    comparison = report.gateway
    assert comparison is not None and comparison.concurrencies() == [1, 2] and len(comparison.rounds) == 4
    assert comparison.max_abs_diff <= 1e-6  # the same floats through Triton's JSON and the gateway's
    assert comparison.paired is not None and comparison.paired.gateway_p50 > 0 and comparison.paired.direct_p50 > 0
    for concurrency in (1, 2):
        figures = comparison.at(concurrency)
        assert figures["direct"] > 0 and figures["gateway"] > 0 and figures["errors"] == 0
    assert f"## (e) the OpenAI/TEI gateway in front of `{EMB}`" in paths["summary"].read_text()
    # an embedder's every call went to its model step alone, the Python steps' work done in the gateway
    alone, calls = comparison.step_calls or (0, 0)
    assert alone == calls > 0 and f"sent {calls} of its {calls} Triton calls" in paths["summary"].read_text()


@pytest.mark.e2e
def test_bench_refuses_the_gateway_baseline_when_ensemble_is_no_embedder(served, tmp_path):
    options = BenchOptions(name=CLS, repository=served[1], output=tmp_path, baselines=("gateway",))
    with pytest.raises(BenchError, match=f"baseline gateway: `{CLS}` is a classification ensemble"):
        run_bench(options)


# -- units ------------------------------------------------------------------------------------------------------


def test_from_triton_maps_grpc_status_to_http():
    assert from_triton("m", "StatusCode.INVALID_ARGUMENT", "bad text").status == 400
    assert from_triton("m", "StatusCode.UNAVAILABLE", "Exceeds maximum queue size").status == 503
    assert from_triton("m", "StatusCode.INTERNAL", "boom").status == 502
    assert from_triton("m", "StatusCode.NOT_FOUND", "unknown model").code == "model_not_found"


@pytest.mark.parametrize(
    ("body_type", "body", "param"),
    [
        (EmbeddingsRequest, b"[1]", None),
        (EmbeddingsRequest, b"{not json", None),
        (EmbeddingsRequest, b'{"input": ["a", 2]}', "input"),
        (EmbeddingsRequest, b'{"input": "a", "dimensions": 0}', "dimensions"),
        (EmbeddingsRequest, b'{"input": "a", "dimensions": true}', "dimensions"),
        (EmbeddingsRequest, b'{"input": "a", "encoding_format": "hex"}', "encoding_format"),
        (EmbeddingsRequest, b'{"input": "a", "model": 7}', "model"),
        (RerankRequest, b'{"texts": ["a"]}', "query"),
        (RerankRequest, b'{"query": "q", "texts": ["a"], "raw_scores": true}', "raw_scores"),
        (PredictRequest, b'{"inputs": "a", "truncation_direction": "middle"}', "truncation_direction"),
        (EmbedRequest, b'{"inputs": "a", "truncation_direction": "LEFT"}', "truncation_direction"),
        (EmbedRequest, b'{"inputs": "a", "normalize": 1}', "normalize"),
        (EmbedRequest, b'{"inputs": ["a", [1, -2]]}', "inputs"),
        (EmbedRequest, b'{"inputs": ["a", []]}', "inputs"),
        (SparseRequest, b'{"truncate": true}', "inputs"),
        (SparseRequest, b'{"inputs": ["a"], "truncation_direction": 1}', "truncation_direction"),
        (SparseRequest, b'{"inputs": ["a"], "prompt_name": 3}', "prompt_name"),
        (SimilarityRequest, b'{"inputs": {"source_sentence": "a", "sentences": []}}', "inputs.sentences"),
        (SimilarityRequest, b'{"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": 2}', "parameters"),
        (TokenizeRequest, b'{"inputs": [[1, 2]]}', "inputs"),
    ],
)
def test_bodies_refuse_with_the_field_named_when_a_body_is_invalid(body_type, body, param):
    from tritongen.errors import GatewayError

    with pytest.raises(GatewayError) as caught:
        body_type.parse(body)
    assert caught.value.status == 400 and caught.value.param == param


def test_sparse_and_embed_read_inputs_and_truncation_alike():
    body = b'{"inputs": "a", "truncate": true, "truncation_direction": "Right", "prompt_name": "query", "x": null}'
    sparse = SparseRequest.parse(body)
    assert (sparse.texts, sparse.truncate, sparse.prompt_name, sparse.left, sparse.model) == (
        ["a"],
        True,
        "query",
        False,
        None,
    )
    embed = EmbedRequest.parse(body)
    assert (embed.texts, embed.single, embed.truncate, embed.prompt_name) == (["a"], True, True, "query")
    assert (embed.normalize, embed.dimensions) == (True, None)
    ids = b'{"inputs": [101, 7592, 102], "truncation_direction": "left", "normalize": null, "model": ""}'
    sparse = SparseRequest.parse(ids)
    assert (sparse.texts, sparse.truncate, sparse.left, sparse.model) == ([[101, 7592, 102]], None, True, None)
    embed = EmbedRequest.parse(ids)
    assert (embed.texts, embed.single, embed.left, embed.normalize) == ([[101, 7592, 102]], True, True, True)
    similar = SimilarityRequest.parse(
        b'{"inputs": {"source_sentence": "a", "sentences": ["b", "c"]}, "parameters": {"truncation_direction": "Left"}}'
    )
    assert (similar.source, similar.sentences, similar.left, similar.truncate) == ("a", ["b", "c"], True, None)
