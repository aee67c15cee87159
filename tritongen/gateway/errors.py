"""Every gateway failure as one OpenAI-format error: ``{"error": {"message", "type", "param", "code"}}``.

:class:`ApiError` carries the HTTP status and the body's fields; :func:`from_triton` maps what Triton's gRPC
API answered (its status code) onto an :class:`ApiError`, so no route ever lets a traceback out.
"""

from __future__ import annotations

from pydantic_core import to_json
from starlette.responses import Response

__all__ = ["ApiError", "from_triton", "model_not_found", "unsupported_route"]

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


class ApiError(Exception):
    """A request that fails: its HTTP status and the OpenAI error body's ``message``, ``type``, ``param``, ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> Response:
        """The JSON response a client sees."""
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return Response(to_json(body), self.status, headers, media_type="application/json")


def from_triton(model: str, status: str | None, message: str | None) -> ApiError:
    """The error for Triton's answer ``status`` (``StatusCode.X``) and ``message`` on a request to ``model``."""
    text = (message or "").strip() or "no message"
    http, kind = _GRPC_STATUS.get(status or "", (502, "server_error"))
    if http == 503 and ("failed to connect" in text.lower() or "connection refused" in text.lower()):
        text = f"the Triton server is not reachable ({text})"
    code = {400: "invalid_input", 404: "model_not_found", 429: "overloaded", 503: "unavailable", 504: "timeout"}
    return ApiError(http, f"`{model}`: {text}", type=kind, code=code.get(http, "upstream_error"))


def model_not_found(model: str, served: list[str]) -> ApiError:
    """404 for a model name that Triton does not serve (after a refresh)."""
    names = ", ".join(sorted(served)) or "none"
    return ApiError(
        404,
        f"the model `{model}` does not exist or is not ready; served ensembles: {names}",
        param="model",
        code="model_not_found",
    )


def unsupported_route(model: str, route: str, why: str) -> ApiError:
    """400 for a route asked of an ensemble that cannot serve it."""
    return ApiError(400, f"the model `{model}` cannot serve {route}: {why}", param="model", code="unsupported_model")
