"""The gateway's ASGI app: the routes of each API family, over one :class:`~tritongen.gateway.core.Gateway`.

- OpenAI (:mod:`~tritongen.gateway.openai`): ``/v1/embeddings``, ``/v1/models``;
- Text Embeddings Inference (:mod:`~tritongen.gateway.tei`, :mod:`~tritongen.gateway.tei_info`): ``/embed``,
  ``/embed_all``, ``/embed_sparse``, ``/similarity``, ``/rerank``, ``/predict``, ``/tokenize``, ``/decode``,
  ``/info`` and the root ``POST /``;
- vLLM's pooling server (:mod:`~tritongen.gateway.vllm`): ``/score``, ``/classify``;
- Cohere v2, Jina (:mod:`~tritongen.gateway.cohere`): ``/v2/embed``, ``/v2/rerank``, ``/v1/rerank``;
- probes: ``/health``, ``/livez``; Prometheus: ``/metrics`` (:mod:`~tritongen.gateway.metrics`).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tritongen.errors import GatewayError
from tritongen.gateway import cohere, openai, tei, tei_info, vllm
from tritongen.gateway.core import Gateway, GatewayOptions
from tritongen.gateway.errors import error_response

__all__ = ["Gateway", "GatewayOptions", "create_app"]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
    code = "not_found" if exc.status_code == 404 else None
    return error_response(GatewayError(exc.status_code, message.get(exc.status_code, str(exc.detail)), code=code))


class _Front:
    """The gateway's ASGI app: a request to an exact path goes straight to its endpoint, the rest through Starlette.

    Every endpoint answers every failure itself (:meth:`Gateway.endpoint`), so Starlette's middleware, router and
    wrappers have nothing to add on the request path, where they cost a quarter of the gateway's CPU per request
    (0.70 against 0.53 ms at one client, MiniLM).
    Paths with parameters (``/models/{model}``), unknown paths and methods, and the lifespan stay Starlette's.
    """

    def __init__(self, app: Starlette, routes: list[Route]) -> None:
        self.app = app
        self.exact = {
            (method, route.path): route.endpoint
            for route in routes
            if "{" not in route.path
            for method in route.methods or ()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.exact.get((scope.get("method", ""), scope.get("path", ""))) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        response = await endpoint(Request(scope, receive, send))
        await response(scope, receive, send)


def create_app(options: GatewayOptions) -> ASGIApp:
    """The gateway's ASGI app."""
    gateway = Gateway(options)
    routes = [
        *openai.routes(gateway),
        *tei.routes(gateway),
        *tei_info.routes(gateway),
        *vllm.routes(gateway),
        *cohere.routes(gateway),
        Route("/health", gateway.endpoint(gateway.health, auth=False), methods=["GET"]),
        Route("/livez", gateway.endpoint(gateway.live, auth=False), methods=["GET"]),
        Route("/metrics", gateway.endpoint(gateway.scrape, auth=False), methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error}, lifespan=gateway.lifespan)
    return _Front(app, routes)
