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

from tritongen.errors import GatewayError
from tritongen.gateway.core import Gateway, json_response, l2_normalise
from tritongen.gateway.errors import Family, unsupported_route
from tritongen.gateway.schemas import (
    bad,
    body_object,
    model_name,
    optional,
    parse_embed,
    parse_predict,
    parse_rerank,
    text_list,
    truncation_direction,
)

__all__ = ["routes"]


async def embed(gateway: Gateway, request: Request) -> Response:
    """``POST /embed``: ``[[float, ...], ...]``."""
    req = parse_embed(await request.body())
    model = await gateway.model_for(request, req.model, "embeddings", "/embed")
    if not req.normalize and model.normalized:
        raise GatewayError(
            400,
            f"`{model.name}` normalises its embeddings (the checkpoint says so); `normalize: false` cannot be served",
            param="normalize",
            code="invalid_normalize",
        )
    vectors, result = await gateway.embed(model, req.texts, req.dimensions, req.prompt_name, truncated=not req.truncate)
    if not req.truncate:
        gateway.refuse_truncated(model, result, "inputs")
    if req.normalize and not model.normalized:
        vectors = l2_normalise(vectors)
    return json_response(vectors.tolist())


async def embed_all(gateway: Gateway, request: Request) -> Response:
    """``POST /embed_all``: per-token embeddings, which no ensemble outputs; TEI's 424 for a model without them."""
    data = body_object(await request.body())
    model = await gateway.model_for(request, model_name(data), "embeddings", "/embed_all")
    raise unsupported_route(
        model.name,
        "/embed_all",
        "it outputs one pooled EMBEDDING per text, not per-token embeddings (the ensembles pool inside)",
    )


async def embed_sparse(gateway: Gateway, request: Request) -> Response:
    """``POST /embed_sparse``: ``[[{index, value}, ...], ...]``, the non-zero weights of each text, by index."""
    data = body_object(await request.body())
    texts, _ = text_list(data, "inputs")
    truncation_direction(data)
    truncate = optional(data, "truncate", bool, False)
    model = await gateway.model_for(request, model_name(data), "sparse", "/embed_sparse")
    inputs: dict[str, list] = {"TEXT": texts}
    prompt_name = optional(data, "prompt_name", str, None)
    if prompt_name is not None:
        if "PROMPT_NAME" not in model.inputs:
            raise bad(f"`{model.name}` declares no prompts", "prompt_name", code="no_prompts")
        inputs["PROMPT_NAME"] = [prompt_name] * len(texts)
    result = await gateway.infer(model, inputs, ["SPARSE_INDICES", "SPARSE_VALUES"], truncated=not truncate)
    if not truncate:
        gateway.refuse_truncated(model, result, "inputs")
    return json_response(sparse_rows(result["SPARSE_INDICES"], result["SPARSE_VALUES"]))


def sparse_rows(indices: np.ndarray, values: np.ndarray) -> list[list[dict[str, Any]]]:
    """TEI's sparse answer from the ensemble's padded rows (index -1 pads; indices ascend)."""
    rows = []
    for row_indices, row_values in zip(indices.reshape(len(indices), -1), values.reshape(len(values), -1)):
        kept = row_indices >= 0
        pairs = zip(row_indices[kept].tolist(), row_values[kept].tolist())
        rows.append([{"index": index, "value": value} for index, value in pairs])
    return rows


async def similarity(gateway: Gateway, request: Request) -> Response:
    """``POST /similarity``: the cosine of ``source_sentence`` with each of ``sentences``, as TEI computes it."""
    data = body_object(await request.body())
    inputs = data.get("inputs")
    if not isinstance(inputs, dict) or not isinstance(inputs.get("source_sentence"), str):
        raise bad("`inputs` must be {source_sentence: string, sentences: [string, ...]}", "inputs")
    sentences, _ = text_list({"inputs.sentences": inputs.get("sentences")}, "inputs.sentences")
    parameters = data.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise bad("`parameters` must be an object", "parameters")
    truncation_direction(parameters)
    truncate = optional(parameters, "truncate", bool, False)
    model = await gateway.model_for(request, model_name(data), "embeddings", "/similarity")
    texts = [inputs["source_sentence"], *sentences]
    prompt_name = optional(parameters, "prompt_name", str, None)
    vectors, result = await gateway.embed(model, texts, None, prompt_name, truncated=not truncate)
    if not truncate:
        gateway.refuse_truncated(model, result, "inputs")
    unit = l2_normalise(vectors.astype(np.float64))
    return json_response((unit[1:] @ unit[0]).astype(np.float32).tolist())


async def rerank(gateway: Gateway, request: Request) -> Response:
    """``POST /rerank``: ``[{index, score, text?}]``, best first."""
    req = parse_rerank(await request.body())
    model = await gateway.model_for(request, req.model, "rerank", "/rerank")
    inputs = {"TEXT": [req.query] * len(req.texts), "TEXT_PAIR": req.texts}
    result = await gateway.infer(model, inputs, ["SCORE"], truncated=not req.truncate)
    if not req.truncate:
        gateway.refuse_truncated(model, result, "texts")
    scores = result["SCORE"].reshape(-1).tolist()
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    text = (lambda i: {"text": req.texts[i]}) if req.return_text else (lambda i: {})
    return json_response([{"index": i, "score": scores[i], **text(i)} for i in order])


async def predict(gateway: Gateway, request: Request) -> Response:
    """``POST /predict``: every label with its probability, best first (a list of those per input)."""
    req = parse_predict(await request.body())
    model = await gateway.model_for(request, req.model, "predict", "/predict")
    texts, pairs, single = req.rows("TEXT_PAIR" in model.inputs)
    inputs = {"TEXT": texts, **({"TEXT_PAIR": pairs} if pairs is not None else {})}
    result = await gateway.infer(model, inputs, ["PROBABILITIES"], truncated=not req.truncate)
    if not req.truncate:
        gateway.refuse_truncated(model, result, "inputs")
    probabilities = result["PROBABILITIES"]
    labels = model.labels or tuple(f"LABEL_{i}" for i in range(probabilities.shape[1]))
    rows = [
        [{"label": labels[j], "score": row[j]} for j in sorted(range(len(row)), key=lambda j: -row[j])]
        for row in probabilities.tolist()
    ]
    return json_response(rows[0] if single else rows)


async def root(gateway: Gateway, request: Request) -> Response:
    """``POST /`` (and ``/models/{model}``): TEI's root, by the model's type.

    A reranker reranks, a classifier predicts, a sparse model embeds sparsely, and an embedder embeds, or
    answers ``/similarity`` when the body is a similarity request (TEI chooses that by its ``TASK`` setting).
    """
    data = body_object(await request.body())
    model = await gateway.model_for(request, model_name(data), "text", "/")
    handler = {"reranker": rerank, "classifier": predict, "sparse": embed_sparse}.get(model.kind)
    if handler is None:
        inputs = data.get("inputs")
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
