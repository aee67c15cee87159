"""The gateway's routes against a fake of Triton: the sparse contract, each family's error shape, ids.

The real clients against the real server are in tests/gateway/test_gateway.py; these check, fast, what no ensemble the
tests build can show there (the sparse outputs, which another task builds) and the rules behind every route.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from starlette.requests import Request
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from tritonclient.grpc import model_config_pb2 as mc

from tests.gateway.test_gateway_discovery import FakeGrpc, _client
from tritongen.gateway import cohere, openai, tei, tei_info, vllm
from tritongen.gateway.core import Gateway, GatewayOptions
from tritongen.gateway.errors import Family
from tritongen.gateway.models import ModelInfo, TensorType
from tritongen.gateway.schemas import EmbeddingsRequest
from tritongen.gateway.tokens import decode, texts_from_ids

_TYPES = {
    "BYTES": mc.TYPE_STRING, "INT32": mc.TYPE_INT32, "INT64": mc.TYPE_INT64, "FP32": mc.TYPE_FP32,
    "BOOL": mc.TYPE_BOOL,
}  # fmt: skip


def _ensemble(
    name: str, inputs: dict[str, tuple], outputs: dict[str, tuple], batch: int = 2, pooling: str = ""
) -> mc.ModelConfig:
    config = mc.ModelConfig(
        name=name,
        platform="ensemble",
        max_batch_size=batch,
        input=[mc.ModelInput(name=n, data_type=_TYPES[t], dims=list(d)) for n, (t, d) in inputs.items()],
        output=[mc.ModelOutput(name=n, data_type=_TYPES[t], dims=list(d)) for n, (t, d) in outputs.items()],
    )
    if pooling:  # what the build writes for embedders
        config.parameters["pooling"].string_value = pooling
    return config


TEXT = {"TEXT": ("BYTES", (1,))}
SERVED = {
    "splade": (
        _ensemble("splade", TEXT, {"SPARSE_INDICES": ("INT64", (-1,)), "SPARSE_VALUES": ("FP32", (-1,))}),
        ["1"],
    ),
    "emb": (
        _ensemble("emb", TEXT, {"EMBEDDING": ("FP32", (4,)), "TRUNCATED": ("BOOL", (1,))}, batch=64, pooling="cls"),
        ["1"],
    ),
}


class FakeInfer(FakeGrpc):
    """Triton's answers: each request's rows from ``answer(model, rows, first_row)``, by output name.

    It stands for the gRPC client (the catalogue) and for the HTTP inference path (``post``) both.
    """

    def __init__(self, answer, served=SERVED) -> None:
        super().__init__(served)
        self.answer, self.rows_seen = answer, 0
        self.requests: list[int] = []

    async def post(self, model_name, inputs, outputs, headers=None):
        rows = inputs[0].shape[0]
        self.requests.append(rows)
        arrays = self.answer(model_name, rows, self.rows_seen)
        self.rows_seen += rows
        return {name: arrays[name] for name in outputs}


def _sparse(model_name: str, rows: int, first: int) -> dict[str, np.ndarray]:
    """Row ``r`` (of the whole request) has ``r + 1`` weights at indices 10, 20, ...; a request pads to its widest."""
    width = first + rows
    indices = np.full((rows, width), -1, np.int64)
    values = np.zeros((rows, width), np.float32)
    for r in range(rows):
        kept = first + r + 1
        indices[r, :kept] = np.arange(1, kept + 1) * 10
        values[r, :kept] = np.arange(1, kept + 1) / 4
    return {"SPARSE_INDICES": indices, "SPARSE_VALUES": values}


def _embedding(model_name: str, rows: int, first: int) -> dict[str, np.ndarray]:
    vectors = np.arange(first, first + rows, dtype=np.float32)[:, None] + np.array([1, 2, 3, 4], np.float32)
    return {"EMBEDDING": vectors / np.linalg.norm(vectors, axis=1, keepdims=True)}


def _gateway(answer, served=SERVED, **options) -> Gateway:
    gateway = Gateway(GatewayOptions(repository=None, **options))
    gateway.client = _client(FakeInfer(answer, served))
    gateway.catalogue._names = lambda: asyncio.sleep(0, result=sorted(served))
    return gateway


def _call(gateway: Gateway, handler, family: Family, body: object, **path_params) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    scope["path_params"] = path_params

    async def receive():
        return {"type": "http.request", "body": data, "more_body": False}

    response = asyncio.run(
        gateway.endpoint(lambda r: handler(gateway, r), family, limited=True)(Request(scope, receive))
    )
    return response.status_code, json.loads(response.body)


async def _acall(gateway: Gateway, handler, body: object) -> tuple[int, object]:
    """A TEI call inside a running loop, counted against ``max_concurrent_requests``."""
    data = json.dumps(body).encode()
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b"", "path_params": {}}

    async def receive():
        return {"type": "http.request", "body": data, "more_body": False}

    response = await gateway.endpoint(lambda r: handler(gateway, r), Family.TEI, limited=True)(Request(scope, receive))
    return response.status_code, json.loads(response.body)


def test_embed_sparse_answers_tei_pairs_when_chunks_pad_to_different_widths():
    gateway = _gateway(_sparse)
    status, answer = _call(gateway, tei.embed_sparse, Family.TEI, {"inputs": ["a", "b", "c"], "model": "splade"})
    assert status == 200 and gateway.client._client.requests == [2, 1]  # max_batch_size 2: widths 2 and 3
    assert answer == [
        [{"index": 10 * (k + 1), "value": (k + 1) / 4} for k in range(n)] for n in (1, 2, 3)
    ]  # the -1 padding is dropped
    status, root = _call(gateway, tei.root, Family.TEI, {"inputs": "a"}, model="splade")
    assert status == 200 and root == [[{"index": 10 * (k + 1), "value": (k + 1) / 4} for k in range(4)]]  # row 3


def test_embed_sparse_is_tei_424_when_the_model_is_not_sparse():
    status, answer = _call(_gateway(_sparse), tei.embed_sparse, Family.TEI, {"inputs": "a", "model": "emb"})
    assert status == 424 and answer["error_type"] == "Backend"
    assert "no SPARSE_INDICES and SPARSE_VALUES" in answer["error"]


def test_info_describes_the_model_type_and_the_router_settings_when_asked():
    gateway = _gateway(_sparse, max_client_batch_size=8, max_concurrent_requests=3, auto_truncate=False)
    asyncio.run(gateway.catalogue.refresh())
    info = tei_info.info_of(gateway.catalogue.models["splade"], gateway)
    assert info["model_type"] == {"embedding": {"pooling": "splade"}} and info["max_batch_requests"] == 2
    assert (info["max_client_batch_size"], info["max_concurrent_requests"], info["auto_truncate"]) == (8, 3, False)
    info = tei_info.info_of(gateway.catalogue.models["emb"], gateway)  # its config names its pooling
    assert info["model_type"] == {"embedding": {"pooling": "cls"}} and info["model_dtype"] == "float32"
    defaults = tei_info.info_of(gateway.catalogue.models["emb"], _gateway(_sparse))
    assert (defaults["max_client_batch_size"], defaults["max_concurrent_requests"], defaults["auto_truncate"]) == (
        32, 512, True,
    )  # TEI 1.9's router defaults  # fmt: skip


def _long_texts(model_name: str, rows: int, first: int) -> dict[str, np.ndarray]:
    """Embeddings, the second text of the first request longer than the model (``TRUNCATED``)."""
    truncated = np.zeros((rows, 1), bool)
    if first == 0 and rows > 1:
        truncated[1] = True
    return {**_embedding(model_name, rows, first), "TRUNCATED": truncated}


@pytest.mark.parametrize(
    ("auto", "asked", "status"),
    [(True, None, 200), (True, False, 422), (True, True, 200), (False, None, 422), (False, True, 200)],
    ids=["auto", "refused", "asked", "auto-off", "asked-with-auto-off"],
)
def test_truncate_follows_the_request_else_auto_truncate_on_tei_routes(auto, asked, status):
    body = {"inputs": ["fine", "long"], **({"truncate": asked} if asked is not None else {})}
    got, answer = _call(_gateway(_long_texts, auto_truncate=auto), tei.embed, Family.TEI, body)
    assert got == status, answer
    if status == 422:
        assert answer["error_type"] == "Validation" and "`inputs` item 1 is longer" in answer["error"]


def test_openai_and_cohere_routes_follow_auto_truncate_in_their_own_error_shapes():
    for auto, status in ((True, 200), (False, 400)):
        got, answer = _call(_gateway(_long_texts, auto_truncate=auto), openai.embeddings, Family.OPENAI,
                            {"input": ["fine", "long"]})  # fmt: skip
        assert got == status and (auto or "`input` item 1 is longer" in answer["error"]["message"]), answer
    body = {"texts": ["fine", "long"]}
    assert _call(_gateway(_long_texts, auto_truncate=False), cohere.embed, Family.COHERE, body)[0] == 400
    assert (
        _call(_gateway(_long_texts, auto_truncate=False), cohere.embed, Family.COHERE, {**body, "truncate": "END"})[0]
        == 200
    )
    assert _call(_gateway(_long_texts), cohere.embed, Family.COHERE, {**body, "truncate": "NONE"})[0] == 400


def test_tei_routes_refuse_more_inputs_than_max_client_batch_size_as_tei_does():
    texts = [f"t{i}" for i in range(33)]
    got, answer = _call(_gateway(_embedding), tei.embed, Family.TEI, {"inputs": texts})
    assert got == 422 and answer == {
        "error": "batch size 33 > maximum allowed batch size 32",
        "error_type": "Validation",
    }
    assert _call(_gateway(_embedding), tei.embed, Family.TEI, {"inputs": texts[:32]})[0] == 200
    assert _call(_gateway(_embedding, max_client_batch_size=40), tei.embed, Family.TEI, {"inputs": texts})[0] == 200
    got, answer = _call(_gateway(_embedding), openai.embeddings, Family.OPENAI, {"input": texts})  # OpenAI's own limit
    assert got == 200 and len(answer["data"]) == 33


def test_a_body_over_the_payload_limit_is_413_before_it_is_read():
    got, answer = _call(_gateway(_embedding, payload_limit=64), tei.embed, Family.TEI, {"inputs": "x" * 100})
    assert got == 413 and answer["error_type"] == "Validation" and "64-byte limit" in answer["error"]
    assert _call(_gateway(_embedding, payload_limit=64), tei.embed, Family.TEI, {"inputs": "x"})[0] == 200


def test_requests_beyond_max_concurrent_requests_get_429_at_once():
    gateway = _gateway(_embedding, max_concurrent_requests=2)

    async def both() -> list[int]:
        release = asyncio.Event()

        async def slow(gateway, request):  # holds its permit until released
            await release.wait()
            return await tei.embed(gateway, request)

        first = asyncio.ensure_future(_acall(gateway, slow, {"inputs": "a"}))
        second = asyncio.ensure_future(_acall(gateway, slow, {"inputs": "b"}))
        await asyncio.sleep(0.05)
        third = await _acall(gateway, tei.embed, {"inputs": "c"})
        release.set()
        return [*(await asyncio.gather(first, second)), third]

    (first, _), (second, _), (third, answer) = asyncio.run(both())
    assert (first, second, third) == (200, 200, 429)
    assert answer == {"error": "Model is overloaded", "error_type": "Overloaded"}
    assert gateway._in_flight == 0


def test_served_model_name_stands_for_the_default_in_answers_and_requests():
    gateway = _gateway(_embedding, model="emb", served_model_name="my-embedder")
    got, answer = _call(gateway, openai.embeddings, Family.OPENAI, {"input": "a", "model": "my-embedder"})
    assert got == 200 and answer["model"] == "my-embedder"
    asyncio.run(gateway.catalogue.refresh())
    assert tei_info.info_of(gateway.catalogue.models["emb"], gateway)["served_model_name"] == "my-embedder"
    assert _call(gateway, openai.embeddings, Family.OPENAI, {"input": "a", "model": "emb"})[1]["model"] == "my-embedder"


def test_default_prompt_name_is_sent_where_the_model_has_prompts_and_a_request_names_none():
    seen = []

    def answer(model_name, rows, first):
        return _embedding(model_name, rows, first)

    gateway = _gateway(answer, default_prompt_name="query")
    model = ModelInfo("emb", 64, {"TEXT": TensorType("BYTES", (1,)), "PROMPT_NAME": TensorType("BYTES", (1,))},
                      {"EMBEDDING": TensorType("FP32", (4,))})  # fmt: skip
    inputs: dict[str, list] = {"TEXT": ["a", "b"]}
    gateway.add_prompt(model, inputs, None, 2)
    seen.append(inputs.get("PROMPT_NAME"))
    inputs = {"TEXT": ["a"]}
    gateway.add_prompt(model, inputs, "passage", 1)
    seen.append(inputs.get("PROMPT_NAME"))
    no_prompts = ModelInfo("emb", 64, {"TEXT": TensorType("BYTES", (1,))}, {"EMBEDDING": TensorType("FP32", (4,))})
    inputs = {"TEXT": ["a"]}
    gateway.add_prompt(no_prompts, inputs, None, 1)  # a model without prompts takes the text as it is
    seen.append(inputs.get("PROMPT_NAME"))
    assert seen == [["query", "query"], ["passage"], None]


@pytest.mark.parametrize(
    ("handler", "family", "body", "status", "shape"),
    [
        (tei.embed, Family.TEI, {"inputs": "a", "normalize": 1}, 422, {"error", "error_type"}),
        (tei.embed, Family.TEI, {"inputs": []}, 400, {"error", "error_type"}),
        (vllm.score, Family.VLLM, {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, 400, {"error"}),
        (cohere.embed, Family.COHERE, {"texts": ["a"], "embedding_types": ["int8"]}, 400, {"message"}),
        (cohere.rerank, Family.COHERE, {"query": "q", "documents": [{"txt": "a"}]}, 400, {"message"}),
        (openai.embeddings, Family.OPENAI, {"input": [[1, "a"]]}, 400, {"error"}),
    ],
)
def test_bad_requests_get_their_family_error_shape_when_refused(handler, family, body, status, shape):
    got, answer = _call(_gateway(_embedding), handler, family, body)
    assert got == status and set(answer) == shape, answer
    if family is Family.TEI:
        assert answer["error_type"] == ("Empty" if status == 400 else "Validation")
    if family is Family.VLLM:
        assert answer["error"]["type"] == "BadRequestError" and answer["error"]["code"] == 400


def test_score_takes_the_cosine_of_embeddings_when_the_model_is_an_embedder():
    status, answer = _call(_gateway(_embedding), vllm.score, Family.VLLM, {"text_1": "q", "text_2": ["a", "b"]})
    vectors = _embedding("emb", 3, 0)["EMBEDDING"]  # one request: q, a, b
    assert status == 200 and answer["object"] == "list" and [d["index"] for d in answer["data"]] == [0, 1]
    np.testing.assert_allclose([d["score"] for d in answer["data"]], vectors[1:] @ vectors[0], atol=1e-6)


# Ensembles built with TOKEN_COUNT; the gateway reads no tokenizer.json of theirs (repository=None).
_COUNT = {"TOKEN_COUNT": ("INT32", (1,))}
COUNTED = {
    "emb": (_ensemble("emb", TEXT, {"EMBEDDING": ("FP32", (4,)), **_COUNT}), ["1"]),
    "pairs": (_ensemble("pairs", {**TEXT, "TEXT_PAIR": ("BYTES", (1,))}, {"SCORE": ("FP32", (1,)), **_COUNT}), ["1"]),
}


def _counted(model_name: str, rows: int, first: int) -> dict[str, np.ndarray]:
    """Row ``r`` of all rows asked so far reads ``r + 3`` tokens; a scorer scores 0.5, an embedder embeds."""
    counts = (np.arange(first, first + rows, dtype=np.int32) + 3).reshape(-1, 1)
    if model_name == "pairs":
        return {"SCORE": np.full((rows, 1), 0.5, np.float32), "TOKEN_COUNT": counts}
    return {**_embedding(model_name, rows, first), "TOKEN_COUNT": counts}


@pytest.mark.parametrize(
    ("handler", "family", "body", "tokens"),
    [
        (openai.embeddings, Family.OPENAI, {"input": ["a", "b", "c"], "model": "emb"}, 3 + 4 + 5),
        (cohere.rerank, Family.COHERE, {"query": "q", "documents": ["a", "b", "c"], "model": "pairs"}, 3 + 4 + 5),
        (vllm.score, Family.VLLM, {"text_1": "q", "text_2": ["a", "b"], "model": "pairs"}, 3 + 4),
        (vllm.score, Family.VLLM, {"text_1": "q", "text_2": ["a", "b"], "model": "emb"}, (3 + 4) + (3 + 5)),
    ],
    ids=["openai-embeddings", "rerank", "score-pairs", "score-cosine"],
)
def test_usage_sums_the_ensembles_token_counts_when_it_gives_them(handler, family, body, tokens):
    gateway = _gateway(_counted, COUNTED)  # no tokenizer.json: the counts can only come from the ensemble
    status, answer = _call(gateway, handler, family, body)  # three texts: two requests (max_batch_size 2)
    assert status == 200, answer
    assert (answer["usage"]["prompt_tokens"], answer["usage"]["total_tokens"]) == (tokens, tokens)


def test_cohere_embed_bills_the_ensembles_token_counts():
    status, answer = _call(_gateway(_counted, COUNTED), cohere.embed, Family.COHERE, {"texts": ["a", "b"]})
    assert status == 200 and answer["meta"]["billed_units"] == {"input_tokens": 3 + 4}


def test_usage_of_an_ensemble_without_token_counts_is_its_tokenizers_else_zero():
    from tritongen.contract import TOKEN_COUNT

    tokenizer = _wordpiece()  # truncates at 3, as the catalogue loads it from the step's max_length
    assert Gateway.usage(_model(tokenizer), {}, ["hello world hellos", "hello"])["prompt_tokens"] == 3 + 3
    counted = {TOKEN_COUNT: np.array([[7], [2]], np.int32)}
    assert Gateway.usage(_model(tokenizer), counted, ["hello", "hello"]) == {"prompt_tokens": 9, "total_tokens": 9}
    assert Gateway.usage(_model(None), {}, ["hello"]) == {"prompt_tokens": 0, "total_tokens": 0}
    status, answer = _call(_gateway(_embedding), openai.embeddings, Family.OPENAI, {"input": ["a"]})
    assert status == 200 and answer["usage"]["prompt_tokens"] == 0  # neither counts nor a tokenizer.json


def _wordpiece() -> Tokenizer:
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "##s": 6}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    tokenizer.enable_truncation(3)  # as the catalogue loads it: at the model's max_length
    return tokenizer


def _model(tokenizer) -> ModelInfo:
    return ModelInfo(
        "emb", 64, {"TEXT": TensorType("BYTES", (1,))}, {"EMBEDDING": TensorType("FP32", (4,))}, tokenizer=tokenizer
    )


def test_token_ids_decode_to_text_when_they_round_trip_with_or_without_special_tokens():
    model = _model(_wordpiece())
    assert texts_from_ids(model, [[4, 5], [2, 5, 4, 6, 3], [4, 5, 4, 5, 4]], "input") == [
        "hello world",
        "world hellos",
        "hello world hello world hello",  # longer than max_length: checked untruncated
    ]
    assert decode(model, [[2, 4, 3]], skip_special_tokens=False) == ["[CLS] hello [SEP]"]


@pytest.mark.parametrize(
    ("ids", "message"),
    [([[6, 4]], "do not encode back"), ([[1]], "do not encode back"), ([[4, 70000]], "holds the id 70000")],
    ids=["continuation-first", "unknown", "outside-vocabulary"],
)
def test_token_ids_are_refused_when_they_are_not_this_tokenizers(ids, message):
    from tritongen.errors import GatewayError

    with pytest.raises(GatewayError, match=message) as caught:
        texts_from_ids(_model(_wordpiece()), ids, "input")
    assert caught.value.status == 400 and caught.value.param == "input"


def test_embeddings_parse_token_ids_as_rows_when_given_ints_or_lists_of_ints():
    assert EmbeddingsRequest.parse(b'{"input": [4, 5]}').input.items == [[4, 5]]
    assert EmbeddingsRequest.parse(b'{"input": [[4], [5, 4]]}').input.items == [[4], [5, 4]]
    assert EmbeddingsRequest.parse(b'{"input": ["hello", [5, 4]]}').input.items == ["hello", [5, 4]]
