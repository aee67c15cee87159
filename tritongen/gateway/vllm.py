"""vLLM's pooling routes: ``POST /score`` (also ``/v1/score``) and ``POST /classify``.

``/score`` takes vLLM's ``text_1``/``text_2`` (or ``queries``/``documents``, ``data_1``/``data_2``): one text
against many, or pairs, and scores each pair with a one-score cross-encoder (its ``SCORE``) or, as vLLM does for
embedding models, with the cosine of the two embeddings. ``/classify`` answers each input's label and
probabilities. Errors are vLLM's ``ErrorResponse`` (:mod:`tritongen.gateway.errors`).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

import numpy as np
from pydantic import ConfigDict
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.contract import PROBABILITIES, SCORE, TEXT, TEXT_PAIR, TOKEN_COUNT
from tritongen.gateway.core import Gateway, json_response
from tritongen.gateway.errors import Family
from tritongen.gateway.models import ModelInfo
from tritongen.gateway.schemas import MAX_INPUTS, Body, bad, text_list, texts_field
from tritongen.vectors import l2_normalize

__all__ = ["routes", "score_pairs"]

_PAIR_FIELDS = (("text_1", "text_2"), ("queries", "documents"), ("data_1", "data_2"))


class ScoreRequest(Body):
    """vLLM's ``POST /score``: ``text_1`` against ``text_2`` (or ``queries``/``documents``, ``data_1``/``data_2``)."""

    model_config = ConfigDict(extra="allow")  # the pairs' fields, in any of vLLM's three spellings

    def pairs(self) -> tuple[list[str], list[str]]:
        """The (left, right) texts."""
        return _pairs(self.model_extra or {})


class ClassifyRequest(Body):
    """vLLM's ``POST /classify``: ``{model, input}``."""

    input: Annotated[list[str], texts_field("input")]


def _pairs(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The (left, right) texts, one left text broadcast to every right one, as vLLM reads them."""
    for left_key, right_key in _PAIR_FIELDS:
        if left_key in data or right_key in data:
            left, _ = text_list(data.get(left_key), left_key)
            right, _ = text_list(data.get(right_key), right_key)
            if len(left) == 1:
                left = left * len(right)
            if len(left) != len(right):
                counts = f"`{left_key}` has {len(left)} items and `{right_key}` {len(right)}"
                raise bad(f"{counts}: give one or as many", left_key)
            if len(left) > MAX_INPUTS:
                raise bad(f"{len(left)} pairs; at most {MAX_INPUTS} per request", right_key)
            return left, right
    raise bad("give `text_1` and `text_2` (or `queries` and `documents`)", "text_1")


async def score_pairs(
    gateway: Gateway, model: ModelInfo, left: list[str], right: list[str]
) -> tuple[list[float], dict[str, np.ndarray]]:
    """The score of each pair: the cross-encoder's ``SCORE``, or the embeddings' cosine for an embedder.

    Also each pair's ``TOKEN_COUNT``, where the ensemble gives it: an embedder's is its two texts' counts.
    """
    if model.why_not("rerank") is None:
        result = await gateway.infer(model, {TEXT: left, TEXT_PAIR: right}, [SCORE])
        return result[SCORE].reshape(-1).tolist(), result
    texts = list(dict.fromkeys([*left, *right]))  # each text embedded once (one query against many, usually)
    vectors, result = await gateway.embed(model, texts)
    unit = l2_normalize(vectors.astype(np.float64))
    row = {text: i for i, text in enumerate(texts)}
    lefts, rights = [row[t] for t in left], [row[t] for t in right]
    cosines = np.einsum("ij,ij->i", unit[lefts], unit[rights])
    counts = result.get(TOKEN_COUNT)
    pairs = {} if counts is None else {TOKEN_COUNT: counts[lefts] + counts[rights]}
    return cosines.astype(np.float32).tolist(), pairs


def _envelope(prefix: str, model: ModelInfo, data: list[dict], usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": model.name,
        "data": data,
        "usage": {**usage, "completion_tokens": 0, "prompt_tokens_details": None},
    }


async def score(gateway: Gateway, request: Request) -> Response:
    """``POST /score``."""
    req = ScoreRequest.parse(await request.body())
    left, right = req.pairs()
    model = await gateway.model_for(request, req.model, "score")
    scores, result = await score_pairs(gateway, model, left, right)
    rows = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
    usage = gateway.usage(model, result, list(zip(left, right, strict=True)))
    return json_response(_envelope("score", model, rows, usage))


async def classify(gateway: Gateway, request: Request) -> Response:
    """``POST /classify``: ``{model, input}`` -> ``data: [{index, label, probs, num_classes}]``."""
    req = ClassifyRequest.parse(await request.body())
    texts = req.input
    model = await gateway.model_for(request, req.model, "predict")
    if TEXT_PAIR in model.inputs:
        raise bad(f"`{model.name}` classifies text pairs; score them with /score", "model", code="unsupported_model")
    result = await gateway.infer(model, {TEXT: texts}, [PROBABILITIES])
    probabilities = result[PROBABILITIES]
    labels = model.labels or tuple(f"LABEL_{i}" for i in range(probabilities.shape[1]))
    rows = [
        {"index": i, "label": labels[int(np.argmax(row))], "probs": row.tolist(), "num_classes": len(row)}
        for i, row in enumerate(probabilities)
    ]
    return json_response(_envelope("classify", model, rows, gateway.usage(model, result, texts)))


def routes(gateway: Gateway) -> list[Route]:
    """The vLLM pooling routes, bound to ``gateway``."""
    return [
        gateway.route("/score", score, Family.VLLM),
        gateway.route("/v1/score", score, Family.VLLM),
        gateway.route("/classify", classify, Family.VLLM),
    ]
