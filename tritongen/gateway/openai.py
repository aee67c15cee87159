"""OpenAI's routes: ``POST /v1/embeddings`` (also ``/embeddings``), ``GET /v1/models`` and ``/v1/models/{model}``."""

from __future__ import annotations

import base64

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.contract import TEXT
from tritongen.gateway.core import Gateway, json_response
from tritongen.gateway.errors import Family, model_not_found
from tritongen.gateway.schemas import EmbeddingsRequest

__all__ = ["routes"]


async def embeddings(gateway: Gateway, request: Request) -> Response:
    """``POST /v1/embeddings``: text, or the model's token ids (the ensemble's own where it takes them)."""
    req = EmbeddingsRequest.parse(await request.body())
    model = await gateway.model_for(request, req.model, "embeddings")
    texts = req.input.items
    vectors, result = await gateway.embed(model, texts, req.dimensions, req.prompt_name, field="input")
    if req.base64:
        little = vectors.astype("<f4", copy=False)
        encoded = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    else:
        encoded = vectors.tolist()
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)]
    usage = gateway.usage(model, result, texts)
    return json_response({"object": "list", "data": data, "model": gateway.served_name(model), "usage": usage})


async def list_models(gateway: Gateway, request: Request) -> Response:
    """``GET /v1/models``: the ensembles that take text."""
    await gateway.catalogue.refresh(force=False)
    names = sorted(gateway.served_name(m) for m in gateway.catalogue.models.values() if TEXT in m.inputs)
    return json_response({"object": "list", "data": [_model_entry(name) for name in names]})


async def get_model(gateway: Gateway, request: Request) -> Response:
    """``GET /v1/models/{model}``."""
    name = request.path_params["model"]
    canonical = gateway.catalogue.canonical(name)
    if canonical not in gateway.catalogue.models and await gateway.catalogue.lookup(canonical) is None:
        raise model_not_found(name, list(gateway.catalogue.models))
    return json_response(_model_entry(name))


def _model_entry(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "tritongen"}


def routes(gateway: Gateway) -> list[Route]:
    """The OpenAI routes, bound to ``gateway``."""
    return [
        gateway.route("/v1/embeddings", embeddings, Family.OPENAI),
        gateway.route("/embeddings", embeddings, Family.OPENAI),
        gateway.route("/v1/models", list_models, Family.OPENAI, "GET"),
        gateway.route("/v1/models/{model:path}", get_model, Family.OPENAI, "GET"),
    ]
