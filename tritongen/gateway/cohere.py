"""Cohere's v2 routes, ``POST /v2/embed`` and ``POST /v2/rerank``, and ``POST /v1/rerank`` (Jina's and vLLM's).

Cohere, Jina and vLLM share one rerank format: ``{query, documents, top_n, return_documents}`` with documents as
strings or ``{"text": ...}``, answered with ``{id, results: [{index, relevance_score, document}]}``, best first.
The answer carries vLLM's and Jina's ``model`` and ``usage`` and Cohere's ``meta``. ``/v1/rerank`` errors are
vLLM's shape, ``/v2/...`` errors Cohere's ``{"message"}`` (:mod:`tritongen.gateway.errors`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.contract import END, SCORE, START, TEXT, TEXT_PAIR
from tritongen.gateway.core import Gateway, json_response
from tritongen.gateway.errors import Family
from tritongen.gateway.schemas import MAX_INPUTS, bad, body_object, dimensions_field, model_name, optional, text_list

__all__ = ["routes"]

_INPUT_TYPES = ("search_document", "search_query", "classification", "clustering")


@dataclass(frozen=True)
class DocumentsRerankRequest:
    """``{model, query, documents, top_n, return_documents}``."""

    model: str | None
    query: str
    documents: list[str]
    top_n: int | None
    return_documents: bool


def _documents(value: Any) -> list[str]:
    if not isinstance(value, list) or not value:
        raise bad("`documents` must be a non-empty list of strings or of {text: string}", "documents", code="empty")
    texts = [d if isinstance(d, str) else d.get("text") if isinstance(d, dict) else None for d in value]
    if not all(isinstance(t, str) for t in texts):
        raise bad("each of `documents` must be a string or {text: string}", "documents")
    if len(texts) > MAX_INPUTS:
        raise bad(f"`documents` has {len(texts)} items; at most {MAX_INPUTS} per request", "documents")
    return texts  # type: ignore[return-value]


def parse_rerank_documents(body: bytes) -> DocumentsRerankRequest:
    """Parse the Cohere/Jina/vLLM rerank body; ``top_n`` 0 or absent means all; ``return_documents`` defaults on."""
    data = body_object(body)
    query = data.get("query")
    if not isinstance(query, str):
        raise bad("`query` is required and must be a string", "query")
    top_n = optional(data, "top_n", int, 0)
    if top_n < 0:
        raise bad("`top_n` must be at least 1 (or 0 for all)", "top_n")
    return_documents = optional(data, "return_documents", bool, True)
    return DocumentsRerankRequest(
        model_name(data), query, _documents(data.get("documents")), top_n or None, return_documents
    )


async def rerank(gateway: Gateway, request: Request) -> Response:
    """``POST /v1/rerank``, ``/v2/rerank``."""
    req = parse_rerank_documents(await request.body())
    model = await gateway.model_for(request, req.model, "rerank")
    pairs = {TEXT: [req.query] * len(req.documents), TEXT_PAIR: req.documents}
    result = await gateway.infer(model, pairs, [SCORE])
    scores = result[SCORE].reshape(-1).tolist()
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: req.top_n]
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


def _embedding_types(data: dict[str, Any]) -> None:
    types = data.get("embedding_types") or ["float"]
    if not isinstance(types, list) or any(t != "float" for t in types):
        raise bad('`embedding_types` must be ["float"]: the ensemble gives float embeddings only', "embedding_types")


async def embed(gateway: Gateway, request: Request) -> Response:
    """``POST /v2/embed``: ``{texts, input_type, embedding_types, truncate, output_dimension}``."""
    data = body_object(await request.body())
    if data.get("images") or data.get("inputs"):
        raise bad("only `texts` are served: the ensemble embeds text", "texts")
    texts, _ = text_list(data, "texts")
    input_type = optional(data, "input_type", str, "search_document")
    if input_type not in _INPUT_TYPES:
        raise bad(f"`input_type` must be one of {', '.join(_INPUT_TYPES)}", "input_type")
    _embedding_types(data)
    truncate = optional(data, "truncate", str, None)
    if truncate is not None and truncate.upper() not in (END, START, "NONE"):
        raise bad("`truncate` must be START, END or NONE", "truncate")
    dimensions = dimensions_field({"dimensions": data.get("output_dimension")})
    model = await gateway.model_for(request, model_name(data), "embeddings")
    cut = None if truncate is None else truncate.upper() != "NONE"  # absent: the gateway's auto_truncate
    left = truncate is not None and truncate.upper() == START  # START cuts a long text's start: its end is kept
    vectors, result = await gateway.embed(model, texts, dimensions, truncate=cut, left=left, field="texts")
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
