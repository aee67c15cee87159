"""Every gateway failure as one OpenAI-format error: ``{"error": {"message", "type", "param", "code"}}``.

:class:`~tritongen.errors.GatewayError` carries the HTTP status and the body's fields, :func:`error_response`
writes it, and :func:`from_triton` maps what Triton's gRPC API answered (its status code) onto one, so no route
ever lets a traceback out.
"""

from __future__ import annotations

from pydantic_core import to_json
from starlette.responses import Response

from tritongen.errors import GatewayError

__all__ = ["error_response", "from_triton", "model_not_found", "unavailable", "unsupported_route"]

# gRPC status -> (HTTP status, OpenAI error type). Triton answers a bad request with INVALID_ARGUMENT, an
# overloaded or stopping server with UNAVAILABLE; a server that is down never answers (UNAVAILABLE too).
_GRPC_STATUS = {
    "StatusCode.INVALID_ARGUMENT": (400, "invalid_request_error"),
    "StatusCode.NOT_FOUND": (404, "invalid_request_error"),
    "StatusCode.UNAVAILABLE": (503, "server_error"),
    "StatusCode.RESOURCE_EXHAUSTED": (429, "server_error"),
    "StatusCode.DEADLINE_EXCEEDED": (504, "server_error"),
    "StatusCode.CANCELLED": (503, "server_error"),
}


def error_response(error: GatewayError) -> Response:
    """The JSON response a client sees for ``error``."""
    body = {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return Response(to_json(body), error.status, headers, media_type="application/json")


def from_triton(model: str, status: str | None, message: str | None) -> GatewayError:
    """The error for Triton's answer ``status`` (``StatusCode.X``) and ``message`` on a request to ``model``."""
    text = (message or "").strip() or "no message"
    http, kind = _GRPC_STATUS.get(status or "", (502, "server_error"))
    if http == 503 and ("failed to connect" in text.lower() or "connection refused" in text.lower()):
        text = f"the Triton server is not reachable ({text})"
    code = {400: "invalid_input", 404: "model_not_found", 429: "overloaded", 503: "unavailable", 504: "timeout"}
    return GatewayError(http, f"`{model}`: {text}", type=kind, code=code.get(http, "upstream_error"))


def unavailable(message: str) -> GatewayError:
    """503: the gateway cannot serve now (Triton not ready, the served ensembles unknown)."""
    return GatewayError(503, message, type="server_error", code="unavailable")


def model_not_found(model: str, served: list[str]) -> GatewayError:
    """404 for a model name that Triton does not serve (after a refresh)."""
    names = ", ".join(sorted(served)) or "none"
    return GatewayError(
        404,
        f"the model `{model}` does not exist or is not ready; served ensembles: {names}",
        param="model",
        code="model_not_found",
    )


def unsupported_route(model: str, route: str, why: str) -> GatewayError:
    """400 for a route asked of an ensemble that cannot serve it."""
    return GatewayError(
        400, f"the model `{model}` cannot serve {route}: {why}", param="model", code="unsupported_model"
    )
