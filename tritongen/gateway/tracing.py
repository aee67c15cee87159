"""OpenTelemetry traces of the gateway's requests, sent over OTLP/HTTP as TEI's ``--otlp-endpoint`` asks for them.

Only with ``--otlp-endpoint``: the SDK is imported then, and without it a request costs nothing here. Each request
is a ``SERVER`` span named by its route (``POST /embed``), the child of the W3C ``traceparent`` the client sent, if
any; each Triton call it makes is a ``CLIENT`` span under it, whose context goes to Triton in the call's own
``traceparent`` header, so a Triton started with ``--trace-config mode=opentelemetry`` (``tritongen serve
--otlp-endpoint``) hangs its spans for the ensemble and each step under the gateway's. A call that answers several
requests (:mod:`~tritongen.gateway.batcher`) is made in the first one's trace and linked to the others'.

Spans leave in batches from a background thread (the SDK's ``BatchSpanProcessor``); ``service.name`` is
``--otlp-service-name`` (TEI's default: ``text-embeddings-inference.server``; ours: ``tritongen-gateway``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tritongen.serve.otlp import traces_url

__all__ = ["DEFAULT_SERVICE", "Tracing"]

DEFAULT_SERVICE = "tritongen-gateway"


class Tracing:
    """The tracer of one gateway, exporting to an OTLP/HTTP collector; :meth:`shutdown` flushes what is left."""

    def __init__(self, endpoint: str, service_name: str = DEFAULT_SERVICE) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.propagators.textmap import DefaultGetter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.url = traces_url(endpoint)
        self._provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=self.url)))
        self._tracer = self._provider.get_tracer("tritongen.gateway")
        self._propagator = TraceContextTextMapPropagator()
        self._getter = DefaultGetter()
        self._server, self._client = SpanKind.SERVER, SpanKind.CLIENT

    @contextlib.contextmanager
    def request(self, method: str, route: str, headers: Mapping[str, str]) -> Iterator[Any]:
        """The span of one request to ``route``, under the client's ``traceparent``; current inside the ``with``."""
        parent = self._propagator.extract({k.lower(): v for k, v in headers.items()}, getter=self._getter)
        attributes = {"http.request.method": method, "http.route": route}
        with self._tracer.start_as_current_span(
            f"{method} {route}", context=parent, kind=self._server, attributes=attributes
        ) as span:
            yield span

    @contextlib.contextmanager
    def call(self, model: str, rows: int, links: Sequence[Any] = ()) -> Iterator[dict[str, str]]:
        """A Triton call's span under the current one; yields the headers that carry it to Triton.

        ``links``: the span contexts of the other requests the call answers.
        """
        from opentelemetry.trace import Link

        attributes = {"tritongen.ensemble": model, "tritongen.rows": rows}
        with self._tracer.start_as_current_span(
            f"triton infer {model}", kind=self._client, attributes=attributes, links=[Link(c) for c in links]
        ):
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            yield carrier

    @staticmethod
    def current() -> Any:
        """The span context current now (a request's, where one is open)."""
        from opentelemetry import trace

        return trace.get_current_span().get_span_context()

    def shutdown(self) -> None:
        """Send the spans still buffered, then stop."""
        self._provider.shutdown()
