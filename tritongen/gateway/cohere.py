"""Cohere's v2 routes, ``POST /v2/embed`` and ``POST /v2/rerank``, and ``POST /v1/rerank`` (Jina's and vLLM's).

Cohere, Jina and vLLM share one rerank format: ``{query, documents, top_n, return_documents}`` with documents as
strings or ``{"text": ...}``, answered with ``{id, results: [{index, relevance_score, document}]}``, best first.
The answer carries vLLM's and Jina's ``model`` and ``usage`` and Cohere's ``meta``. ``/v1/rerank`` errors are
vLLM's shape, ``/v2/...`` errors Cohere's ``{"message"}`` (:mod:`tritongen.gateway.errors`).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.contract import END, SCORE, START, TEXT, TEXT_PAIR
from tritongen.gateway.core import Gateway, json_response
from tritongen.gateway.errors import Family
from tritongen.gateway.schemas import (
    MAX_INPUTS,
    QUERY_REFUSED,
    Body,
    bad,
    dimensions,
    field_reader,
    one_of,
    texts_field,
)

__all__ = ["routes"]

_INPUT_TYPES = ("search_document", "search_query", "classification", "clustering")


def _documents(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise bad(f"`{key}` must be a non-empty list of strings or of {{text: string}}", key, code="empty")
    texts = [d if isinstance(d, str) else d.get("text") if isinstance(d, dict) else None for d in value]
    if not all(isinstance(t, str) for t in texts):
        raise bad(f"each of `{key}` must be a string or {{text: string}}", key)
    if len(texts) > MAX_INPUTS:
        raise bad(f"`{key}` has {len(texts)} items; at most {MAX_INPUTS} per request", key)
    return texts  # type: ignore[return-value]


def _top_n(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad(f"`{key}` must be of type int", key)
    if value < 0:
        raise bad(f"`{key}` must be at least 1 (or 0 for all)", key)
    return value


class DocumentsRerankRequest(Body):
    """The Cohere/Jina/vLLM rerank body; ``top_n`` 0 or absent means all; ``return_documents`` defaults on."""

    refusals: ClassVar[dict[str, str]] = {"query": QUERY_REFUSED}

    query: str
    documents: Annotated[list[str], field_reader("documents", _documents)]
    top_n: Annotated[int, field_reader("top_n", _top_n)] = 0
    return_documents: bool = True

    @property
    def top(self) -> int | None:
        """How many results to answer; None: all."""
        return self.top_n or None


def _float_only(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or any(t != "float" for t in value):
        raise bad(f'`{key}` must be ["float"]: the ensemble gives float embeddings only', key)
    return value


def _cut(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise bad(f"`{key}` must be of type str", key)
    if value.upper() not in (END, START, "NONE"):
        raise bad(f"`{key}` must be START, END or NONE", key)
    return value.upper()


def _text_only(value: Any, key: str) -> Any:
    if value:
        raise bad("only `texts` are served: the ensemble embeds text", "texts")
    return value


class EmbedV2Request(Body):
    """Cohere's ``POST /v2/embed``: ``{texts, input_type, embedding_types, truncate, output_dimension}``."""

    images: Annotated[Any, field_reader("images", _text_only)] = None
    inputs: Annotated[Any, field_reader("inputs", _text_only)] = None
    texts: Annotated[list[str], texts_field("texts")]
    input_type: Annotated[str, field_reader("input_type", lambda v, k: one_of(v, k, _INPUT_TYPES))] = "search_document"
    embedding_types: Annotated[list[str], field_reader("embedding_types", _float_only)] = ["float"]  # noqa: RUF012
    truncate: Annotated[str | None, field_reader("truncate", _cut)] = None  # START, END or NONE; None: auto
    output_dimension: Annotated[int | None, field_reader("output_dimension", dimensions)] = None


async def rerank(gateway: Gateway, request: Request) -> Response:
    """``POST /v1/rerank``, ``/v2/rerank``."""
    req = DocumentsRerankRequest.parse(await request.body())
    model = await gateway.model_for(request, req.model, "rerank")
    pairs = {TEXT: [req.query] * len(req.documents), TEXT_PAIR: req.documents}
    result = await gateway.infer(model, pairs, [SCORE])
    scores = result[SCORE].reshape(-1).tolist()
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: req.top]
    results = [
        {
            "index": i,
            "relevance_score": scores[i],
            **({"document": {"text": req.documents[i]}} if req.return_documents else {}),
        }
        for i in order
    ]
    usage = gateway.usage(model, result, list(zip(pairs[TEXT], pairs[TEXT_PAIR], strict=True)))
    meta = {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}
    answer = {"id": str(uuid.uuid4()), "model": model.name, "results": results, "usage": usage, "meta": meta}
    return json_response(answer)


async def embed(gateway: Gateway, request: Request) -> Response:
    """``POST /v2/embed``: ``{texts, input_type, embedding_types, truncate, output_dimension}``."""
    req = EmbedV2Request.parse(await request.body())
    texts, truncate = req.texts, req.truncate
    model = await gateway.model_for(request, req.model, "embeddings")
    cut = None if truncate is None else truncate != "NONE"  # absent: the gateway's auto_truncate
    left = truncate == START  # START cuts a long text's start: its end is kept
    vectors, result = await gateway.embed(model, texts, req.output_dimension, truncate=cut, left=left, field="texts")
    tokens = gateway.usage(model, result, texts)["prompt_tokens"]
    meta = {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}}
    body = {
        "id": str(uuid.uuid4()),
        "embeddings": {"float": vectors.tolist()},
        "texts": texts,
        "meta": meta,
        "response_type": "embeddings_by_type",
    }
    return json_response(body)


def routes(gateway: Gateway) -> list[Route]:
    """The Cohere-format routes, bound to ``gateway``."""
    return [
        gateway.route("/v2/embed", embed, Family.COHERE),
        gateway.route("/v2/rerank", rerank, Family.COHERE),
        gateway.route("/v1/rerank", rerank, Family.VLLM),
    ]
