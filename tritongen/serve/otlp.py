"""Where OpenTelemetry spans go: an OTLP/HTTP collector's traces URL, and the tritonserver arguments that use it.

Light on purpose: the gateway and ``serve`` both read it.
"""

from __future__ import annotations

__all__ = ["TRACE_RACE_FIXED_IN", "opentelemetry_args", "traces_url"]

# Triton before this release can crash while it traces ensembles: its trace release unlocks a mutex it may just have
# freed (fixed upstream in triton-inference-server/server#8144). The local tritonserver is 2.51.
TRACE_RACE_FIXED_IN = "Triton 2.57 (the 25.04 container)"


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP's traces URL for ``endpoint`` (``host:4318`` or a URL).

    As given where it names a path, else with ``/v1/traces``; ``http://`` where it names no scheme.
    """
    endpoint = endpoint.rstrip("/")
    if "://" not in endpoint:
        endpoint = f"http://{endpoint}"
    return endpoint if "/" in endpoint.partition("://")[2] else f"{endpoint}/v1/traces"


def opentelemetry_args(endpoint: str | None, service: str = "triton-inference-server") -> list[str]:
    """Tritonserver's arguments that trace every request with OpenTelemetry to ``endpoint`` (none for None).

    Triton posts its spans (the request, the ensemble, each step) over OTLP/HTTP, under the W3C ``traceparent`` a
    request carries (the gateway's call).
    """
    if not endpoint:
        return []
    return [
        "--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={traces_url(endpoint)}",
        "--trace-config", f"opentelemetry,resource=service.name={service}",
        "--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS",
    ]  # fmt: skip
