"""Every gateway failure as the error its API family's clients parse, and never a traceback.

:class:`~tritongen.errors.GatewayError` carries the HTTP status and OpenAI's body fields; :func:`error_response`
writes it in the shape of the route's family (:class:`Family`):

- OpenAI: ``{"error": {"message", "type", "param", "code"}}``, the status as raised;
- TEI (1.9): ``{"error", "error_type"}``; a field TEI would reject is 422 ``Validation`` (an empty list 400
  ``Empty``), a model of the wrong type 424 ``Backend``, as TEI's router answers them;
- vLLM: ``{"error": {"message", "type", "param", "code"}}`` with ``type`` the error class vLLM names
  (``BadRequestError``...) and ``code`` the HTTP status;
- Cohere: ``{"message"}``, the status as raised.

:func:`from_triton` maps what Triton's gRPC API answered (its status code) onto a ``GatewayError``, and
:func:`from_triton_http` what its HTTP API answered.
"""

from __future__ import annotations

import enum

from pydantic_core import to_json
from starlette.responses import Response

from tritongen.errors import GatewayError

__all__ = [
    "Family",
    "error_response",
    "from_triton",
    "from_triton_http",
    "model_not_found",
    "unavailable",
    "unsupported_route",
]

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

# The HTTP status Triton's HTTP frontend answers for each of those.
_HTTP_STATUS = {
    400: "StatusCode.INVALID_ARGUMENT",
    404: "StatusCode.NOT_FOUND",
    503: "StatusCode.UNAVAILABLE",
    429: "StatusCode.RESOURCE_EXHAUSTED",
    504: "StatusCode.DEADLINE_EXCEEDED",
}


class Family(enum.Enum):
    """The API a route belongs to, which decides the shape of its errors."""

    OPENAI = "openai"
    TEI = "tei"
    VLLM = "vllm"
    COHERE = "cohere"


# TEI's ErrorType by the status the gateway raised; 400 and 413 are TEI's Validation (422 since TEI 1.9).
_TEI_TYPE = {
    400: "Validation", 404: "Validation", 413: "Validation", 422: "Validation", 429: "Overloaded", 503: "Unhealthy"
}  # fmt: skip
# vLLM's ErrorInfo.type: the name of the error class for the status.
_VLLM_TYPE = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    503: "ServiceUnavailableError",
}


def _tei(error: GatewayError) -> tuple[int, dict]:
    if error.code == "unsupported_model":  # TEI: "Model is not a classifier model", 424
        return 424, {"error": error.message, "error_type": "Backend"}
    if error.code == "empty":
        return 400, {"error": error.message, "error_type": "Empty"}
    if error.code == "payload_too_large":  # TEI's body limit answers 413 before any validation
        return 413, {"error": error.message, "error_type": "Validation"}
    kind = _TEI_TYPE.get(error.status, "Backend")
    return (422 if kind == "Validation" and error.status != 404 else error.status), {
        "error": error.message,
        "error_type": kind,
    }


def error_response(error: GatewayError, family: Family = Family.OPENAI) -> Response:
    """The JSON response a client of ``family`` sees for ``error``; a missing or wrong key is OpenAI's 401 on all."""
    status = 400 if error.code == "input_too_long" and family is not Family.TEI else error.status
    if family is Family.TEI and status != 401:
        status, body = _tei(error)
    elif family is Family.VLLM and status != 401:
        kind = _VLLM_TYPE.get(status, "InternalServerError")
        body = {"error": {"message": error.message, "type": kind, "param": error.param, "code": status}}
    elif family is Family.COHERE and status != 401:
        body = {"message": error.message}
    else:
        body = {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(to_json(body), status, headers, media_type="application/json")


def from_triton(model: str, status: str | None, message: str | None) -> GatewayError:
    """The error for Triton's answer ``status`` (``StatusCode.X``) and ``message`` on a request to ``model``."""
    text = (message or "").strip() or "no message"
    http, kind = _GRPC_STATUS.get(status or "", (502, "server_error"))
    if "unknown model" in text.lower():  # Triton says a model it does not serve (now) is INVALID_ARGUMENT
        http, kind = 404, "invalid_request_error"
    if http == 503 and ("failed to connect" in text.lower() or "connection refused" in text.lower()):
        text = f"the Triton server is not reachable ({text})"
    code = {400: "invalid_input", 404: "model_not_found", 429: "overloaded", 503: "unavailable", 504: "timeout"}
    return GatewayError(http, f"`{model}`: {text}", type=kind, code=code.get(http, "upstream_error"))


def from_triton_http(model: str, status: int, message: str | None) -> GatewayError:
    """The error for Triton's HTTP answer ``status`` and ``message`` on a request to ``model``."""
    return from_triton(model, _HTTP_STATUS.get(status), message)


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
