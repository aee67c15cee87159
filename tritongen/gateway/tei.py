"""Text Embeddings Inference's inference routes, and its root ``POST /`` that picks one by the model's type.

The routes: ``/embed``, ``/embed_all``, ``/embed_sparse``, ``/similarity``, ``/rerank``, ``/predict``.

TEI serves one model; the gateway serves several, so a request may name one with ``model`` (an extension), and
each model's root is also at ``POST /models/{model}``, where Hugging Face's ``InferenceClient(model=URL)``
posts. Errors are TEI's ``{"error", "error_type"}`` (:mod:`tritongen.gateway.errors`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.contract import PROBABILITIES, SCORE, SPARSE_INDICES, SPARSE_VALUES, TEXT, TEXT_PAIR
from tritongen.errors import GatewayError
from tritongen.gateway.core import Gateway, json_response
from tritongen.gateway.errors import Family, unsupported_route
from tritongen.gateway.schemas import (
    Body,
    EmbedRequest,
    PredictRequest,
    RerankRequest,
    SimilarityRequest,
    SparseRequest,
)
from tritongen.vectors import l2_normalize

__all__ = ["routes"]


async def embed(gateway: Gateway, request: Request) -> Response:
    """``POST /embed``: ``[[float, ...], ...]``."""
    req = EmbedRequest.parse(await request.body())
    gateway.client_batch(len(req.texts), "inputs")
    model = await gateway.model_for(request, req.model, "embeddings")
    if not req.normalize and model.normalized:
        raise GatewayError(
            400,
            f"`{model.name}` normalises its embeddings (the checkpoint says so); `normalize: false` cannot be served",
            param="normalize",
            code="invalid_normalize",
        )
    vectors, _ = await gateway.embed(
        model, req.texts, req.dimensions, req.prompt_name, truncate=req.truncate, left=req.left
    )
    if req.normalize and not model.normalized:
        vectors = l2_normalize(vectors)
    return json_response(vectors.tolist())


async def embed_all(gateway: Gateway, request: Request) -> Response:
    """``POST /embed_all``: per-token embeddings, which no ensemble outputs; TEI's 424 for a model without them."""
    req = Body.parse(await request.body())
    model = await gateway.model_for(request, req.model, "embeddings")
    raise unsupported_route(
        model.name,
        request.scope["path"],
        "it outputs one pooled EMBEDDING per text, not per-token embeddings (the ensembles pool inside)",
    )


async def embed_sparse(gateway: Gateway, request: Request) -> Response:
    """``POST /embed_sparse``: ``[[{index, value}, ...], ...]``, the non-zero weights of each text, by index."""
    req = SparseRequest.parse(await request.body())
    gateway.client_batch(len(req.texts), "inputs")
    model = await gateway.model_for(request, req.model, "sparse")
    inputs: dict[str, list] = {TEXT: list(req.texts)}
    gateway.add_prompt(model, inputs, req.prompt_name, len(req.texts))
    result = await gateway.infer(model, inputs, [SPARSE_INDICES, SPARSE_VALUES], truncate=req.truncate, left=req.left)
    return json_response(sparse_rows(result[SPARSE_INDICES], result[SPARSE_VALUES]))


def sparse_rows(indices: np.ndarray, values: np.ndarray) -> list[list[dict[str, Any]]]:
    """TEI's sparse answer from the ensemble's padded rows (index -1 pads; indices ascend)."""
    rows = []
    for row_indices, row_values in zip(indices.reshape(len(indices), -1), values.reshape(len(values), -1), strict=True):
        kept = row_indices >= 0
        pairs = zip(row_indices[kept].tolist(), row_values[kept].tolist(), strict=True)
        rows.append([{"index": index, "value": value} for index, value in pairs])
    return rows


async def similarity(gateway: Gateway, request: Request) -> Response:
    """``POST /similarity``: the cosine of ``source_sentence`` with each of ``sentences``, as TEI computes it."""
    req = SimilarityRequest.parse(await request.body())
    gateway.client_batch(len(req.sentences), "inputs.sentences")
    model = await gateway.model_for(request, req.model, "embeddings")
    texts = [req.source, *req.sentences]
    vectors, _ = await gateway.embed(model, texts, None, req.prompt_name, truncate=req.truncate, left=req.left)
    unit = l2_normalize(vectors.astype(np.float64))
    return json_response((unit[1:] @ unit[0]).astype(np.float32).tolist())


async def rerank(gateway: Gateway, request: Request) -> Response:
    """``POST /rerank``: ``[{index, score, text?}]``, best first."""
    req = RerankRequest.parse(await request.body())
    gateway.client_batch(len(req.texts), "texts")
    model = await gateway.model_for(request, req.model, "rerank")
    inputs = {TEXT: [req.query] * len(req.texts), TEXT_PAIR: req.texts}
    result = await gateway.infer(model, inputs, [SCORE], truncate=req.truncate, left=req.left, field="texts")
    scores = result[SCORE].reshape(-1).tolist()
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    text = (lambda i: {"text": req.texts[i]}) if req.return_text else (lambda i: {})
    return json_response([{"index": i, "score": scores[i], **text(i)} for i in order])


async def predict(gateway: Gateway, request: Request) -> Response:
    """``POST /predict``: every label with its probability, best first (a list of those per input)."""
    req = PredictRequest.parse(await request.body())
    model = await gateway.model_for(request, req.model, "predict")
    texts, pairs, single = req.rows(TEXT_PAIR in model.inputs)
    gateway.client_batch(len(texts), "inputs")
    inputs = {TEXT: texts, **({TEXT_PAIR: pairs} if pairs is not None else {})}
    result = await gateway.infer(model, inputs, [PROBABILITIES], truncate=req.truncate, left=req.left)
    probabilities = result[PROBABILITIES]
    labels = model.labels or tuple(f"LABEL_{i}" for i in range(probabilities.shape[1]))
    rows = [
        [{"label": labels[j], "score": row[j]} for j in sorted(range(len(row)), key=lambda j: -row[j])]
        for row in probabilities.tolist()
    ]
    return json_response(rows[0] if single else rows)


class _RootRequest(Body):
    """What ``POST /`` reads to choose its route: the model, and whether ``inputs`` is a similarity request's."""

    inputs: Any = None


async def root(gateway: Gateway, request: Request) -> Response:
    """``POST /`` (and ``/models/{model}``): TEI's root, by the model's type.

    A reranker reranks, a classifier predicts, a sparse model embeds sparsely, and an embedder embeds, or
    answers ``/similarity`` when the body is a similarity request (TEI chooses that by its ``TASK`` setting).
    """
    req = _RootRequest.parse(await request.body())
    model = await gateway.model_for(request, req.model, "text")
    handler = {"reranker": rerank, "classifier": predict, "sparse": embed_sparse}.get(model.kind)
    if handler is None:
        inputs = req.inputs
        handler = similarity if isinstance(inputs, dict) and "source_sentence" in inputs else embed
    return await handler(gateway, request)


def routes(gateway: Gateway) -> list[Route]:
    """TEI's inference routes, bound to ``gateway``."""
    handlers = {
        "/embed": embed,
        "/embed_all": embed_all,
        "/embed_sparse": embed_sparse,
        "/similarity": similarity,
        "/rerank": rerank,
        "/predict": predict,
        "/": root,
        "/models/{model}": root,
    }
    return [gateway.route(path, handler, Family.TEI) for path, handler in handlers.items()]
