"""The gateway against Text Embeddings Inference 1.9.3's own OpenAPI document, property by property.

schemathesis generates requests from TEI's document (``../shared/specs/tei-1.9.3-openapi.json``, Apache-2.0; the test
skips where the folder is absent) for every route, valid and not, and each answer must be no server error, have a
status the document lists for the route, and a body the document's schema for that status admits. The gateway runs
twice, with an embedder and then a classifier as the model a request that names none gets (TEI serves one model).

The one divergence kept: ``/v1/embeddings`` answers errors as OpenAI does, the authority for that route: in its shape
(``{"error": {...}}``, where TEI's document has ``{message, code, error_type}``), and a ``model`` the gateway does not
serve with OpenAI's 404 (TEI serves one model and ignores the field). Its errors are held to OpenAI's statuses, not
TEI's schema (``docs/gateway.md``, "Where it differs from TEI").

The examples are drawn the same way on every run (``derandomize``), so that CI meets the same requests each time; a
developer can drop it to explore.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from tests.deployment import ServeProcess
from tests.gateway.test_gateway import _gateway

SPEC = Path(__file__).resolve().parents[3] / "shared" / "specs" / "tei-1.9.3-openapi.json"
EXAMPLES = 60  # per route and model: about 1,400 requests in all, a few seconds each route
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not SPEC.is_file(), reason=f"no {SPEC} (../shared/specs)")]

# OpenAI's error statuses for /v1/embeddings: a bad request, a wrong key, an unknown model, too large, overloaded.
OPENAI_ERRORS = {400, 401, 404, 413, 422, 429}
EMB, CLS, RERANK = "bert_emb", "cls_bpe", "rr_cross"  # tests/gateway/test_gateway.py's builds of the same checkpoints
OPERATIONS = [
    ("POST", "/embed"), ("POST", "/embed_all"), ("POST", "/embed_sparse"), ("POST", "/predict"), ("POST", "/rerank"),
    ("POST", "/similarity"), ("POST", "/tokenize"), ("POST", "/decode"), ("POST", "/v1/embeddings"),
    ("GET", "/info"), ("GET", "/health"), ("GET", "/metrics"),
]  # fmt: skip


@pytest.fixture(scope="module")
def schema():
    import schemathesis

    return schemathesis.openapi.from_path(SPEC)


@pytest.fixture(scope="module")
def gateways(tiny_factory, checkpoint_cache, builds, tmp_path_factory):
    """Two gateways in front of one serve of the tiny embedder and classifier, each defaulting to one of them."""
    root = tmp_path_factory.mktemp("conformance")
    from tests.tiny_variants import make_cross_encoder

    built = [
        builds(tiny_factory("bert", "embedding"), EMB), builds(tiny_factory("roberta", "classification"), CLS),
        builds(checkpoint_cache(make_cross_encoder), RERANK),
    ]  # fmt: skip
    repo = builds.repository(*built, into=root / "model_repository")
    with ServeProcess(repo, root / "serve.log", grace_period=3) as serve:
        triton = ("--repository", str(repo), "--triton-url", serve.grpc_url, "--triton-http-url", serve.http_url)
        with (
            _gateway(root / "emb.log", *triton, "--model", EMB) as (emb, _),
            _gateway(root / "cls.log", *triton, "--model", CLS) as (cls, _),
        ):
            yield {EMB: emb, CLS: cls}


@pytest.mark.parametrize("default", [EMB, CLS], ids=["embedder", "classifier"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_answer_is_one_teis_document_allows(schema, gateways, default, method, path):
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    operation = schema[path][method]
    base_url = f"http://{gateways[default]}"
    seen: dict[int, int] = {}

    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(case=operation.as_strategy())
    def answer(case):
        response = case.call(base_url=base_url, timeout=60)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        checks = [not_a_server_error, content_type_conformance]
        if path == "/v1/embeddings" and response.status_code >= 400:  # OpenAI's errors: see the docstring
            assert response.status_code in OPENAI_ERRORS, response.text
        else:
            checks += [status_code_conformance, response_schema_conformance]
        case.validate_response(response, checks=checks)

    answer()
    assert seen, "no request was sent"
    if method == "POST" and path not in ("/embed_all", "/decode"):
        # the property holds for answers, not only refusals: the route served some generated requests
        assert (
            any(status == 200 for status in seen)
            or path
            in {
                EMB: ("/predict", "/rerank", "/embed_sparse"),
                CLS: ("/embed", "/embed_sparse", "/similarity", "/rerank", "/v1/embeddings"),
            }[default]
        ), seen


# -- the OpenAI and Cohere shapes our routes claim, from those SDKs' own types ---------------------------------------


def _drive(url: str, path: str, bodies, validate) -> dict[int, int]:
    """POST each of ``bodies`` (a Hypothesis strategy of JSON objects) to ``path``; ``validate(status, answer)``."""
    import json
    import urllib.error
    import urllib.request

    from hypothesis import HealthCheck, given, settings

    seen: dict[int, int] = {}

    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(body=bodies)
    def send(body):
        body = _json(body)
        request = urllib.request.Request(
            f"http://{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, answer = response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            status, answer = exc.code, json.loads(exc.read())
        assert status < 500, (status, answer, body)
        seen[status] = seen.get(status, 0) + 1
        validate(status, answer, body)

    send()
    assert seen.get(200), seen  # some of the generated requests were served, not only refused
    return seen


def _json(value):
    """A generated body as JSON has it: iterables (the SDK's ``Iterable[int]``) as lists."""
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return [_json(v) for v in value]


def _ours(strategy, key: str, names):
    """``strategy``'s bodies, half naming one of our ensembles in ``key`` (the SDKs' own model names are not ours)."""
    from hypothesis import strategies as st

    return st.one_of(strategy, st.tuples(strategy, st.sampled_from(names)).map(lambda pair: {**pair[0], key: pair[1]}))


def test_openai_embeddings_answer_as_openais_types_say(gateways):
    """Requests drawn from the openai SDK's ``EmbeddingCreateParams``; answers read by its ``CreateEmbeddingResponse``
    and errors by its ``ErrorObject``."""
    from hypothesis import strategies as st
    from openai.types import CreateEmbeddingResponse, EmbeddingCreateParams
    from openai.types.shared import ErrorObject

    def validate(status, answer, body):
        if status != 200:
            assert status in OPENAI_ERRORS
            ErrorObject.model_validate(answer["error"])
            return
        if body.get("encoding_format") == "base64":  # the SDK decodes these to floats before its type reads them
            for item in answer["data"]:
                item["embedding"] = np.frombuffer(base64.b64decode(item["embedding"]), "<f4").tolist()
        response = CreateEmbeddingResponse.model_validate(answer)
        given = body["input"]
        rows = 1 if isinstance(given, str) or (given and all(isinstance(v, int) for v in given)) else len(given)
        assert [d.index for d in response.data] == list(range(rows))

    _drive(gateways[EMB], "/v1/embeddings", _ours(st.from_type(EmbeddingCreateParams), "model", [EMB]), validate)


def test_cohere_v2_embed_and_rerank_answer_as_coheres_types_say(gateways):
    """Requests drawn from the cohere SDK's v2 embed and rerank parameters (its literal types); answers read by its
    ``EmbedByTypeResponse`` and ``V2RerankResponse``, errors in Cohere's ``{"message"}``."""
    import typing

    import cohere
    from cohere.core.pydantic_utilities import parse_obj_as
    from hypothesis import strategies as st

    def literals(kind) -> st.SearchStrategy:
        """The values a literal type (or a union holding one) names, and any other string."""
        values = [a for arg in typing.get_args(kind) for a in (typing.get_args(arg) or [arg]) if isinstance(a, str)]
        return st.sampled_from(values) | st.text(max_size=8)

    texts = st.lists(st.text(max_size=40), max_size=6)
    embed = st.fixed_dictionaries(
        {"texts": texts},
        optional={
            "model": st.text(max_size=8), "input_type": literals(cohere.EmbedInputType),
            "embedding_types": st.lists(literals(cohere.EmbeddingType), max_size=2),
            "truncate": literals(cohere.V2EmbedRequestTruncate), "output_dimension": st.integers(-2, 64),
        },
    )  # fmt: skip
    rerank = st.fixed_dictionaries(
        {"query": st.text(max_size=40), "documents": texts},
        optional={"model": st.text(max_size=8), "top_n": st.integers(-1, 8), "return_documents": st.booleans()},
    )

    def check(response_type):
        def validate(status, answer, body):
            if status == 200:
                parse_obj_as(response_type, answer)
            else:
                assert set(answer) == {"message"} and isinstance(answer["message"], str), answer

        return validate

    _drive(gateways[EMB], "/v2/embed", _ours(embed, "model", [EMB]), check(cohere.EmbedByTypeResponse))
    _drive(gateways[EMB], "/v2/rerank", _ours(rerank, "model", [RERANK]), check(cohere.V2RerankResponse))
