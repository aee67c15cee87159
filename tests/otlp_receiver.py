"""A real OTLP/HTTP trace receiver for tests: it decodes what exporters post with OpenTelemetry's own protobuf types.

``POST /v1/traces`` takes an ``ExportTraceServiceRequest`` as protobuf (``application/x-protobuf``, what the Python
SDK's exporter sends) or as its JSON mapping (``application/json``, what Triton's exporter sends), and answers as
the OTLP/HTTP spec says, in the same encoding. Nothing is mocked: the bytes are the exporters' own.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Receiver", "Span", "otlp_receiver"]


@dataclass(frozen=True)
class Span:
    """One received span: its ids as hex, its name, kind and service."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    service: str
    links: tuple[str, ...] = ()  # the span ids it links to


def _hex(raw: bytes) -> str:
    return raw.hex()


class Receiver:
    """The spans received so far, and their encodings; :meth:`wait_for` polls for ones a test expects."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.encodings: set[str] = set()
        self.url = ""
        self._lock = threading.Lock()

    def add(self, body: bytes, content_type: str) -> bytes:
        """Decode one export request; the answer's body, in its encoding."""
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        json_body = content_type.startswith("application/json")
        request = ExportTraceServiceRequest()
        if json_body:
            json_format.Parse(body, request, ignore_unknown_fields=True)
        else:
            request.ParseFromString(body)
        spans = []
        for resource in request.resource_spans:
            service = next((a.value.string_value for a in resource.resource.attributes if a.key == "service.name"), "")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans.append(
                        Span(
                            _hex(span.trace_id), _hex(span.span_id), _hex(span.parent_span_id), span.name, span.kind,
                            service, tuple(_hex(link.span_id) for link in span.links),
                        )
                    )  # fmt: skip
        with self._lock:
            self.spans.extend(spans)
            self.encodings.add("json" if json_body else "protobuf")
        answer = ExportTraceServiceResponse()
        return json_format.MessageToJson(answer).encode() if json_body else answer.SerializeToString()

    def wait_for(self, found: Callable[[list[Span]], bool], timeout: float = 60.0) -> list[Span]:
        """The spans once ``found(spans)`` holds; AssertionError with what came after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if found(spans):
                return spans
            assert time.monotonic() < deadline, [(s.service, s.name, s.trace_id) for s in spans]
            time.sleep(0.2)


def _ids_from_json(body: bytes) -> bytes:
    """Triton writes trace and span ids as hex in its JSON; protobuf's JSON mapping reads bytes as base64."""
    import json
    import re

    data = json.loads(body)

    def fix(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    if re.fullmatch(r"[0-9a-fA-F]*", value) and len(value) in (0, 16, 32):
                        node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                else:
                    fix(value)
        elif isinstance(node, list):
            for item in node:
                fix(item)

    fix(data)
    return json.dumps(data).encode()


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver on a port the kernel picks (held from the bind on: no race), stopped after."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            kind = self.headers.get("Content-Type", "application/x-protobuf")
            if kind.startswith("application/json"):
                body = _ids_from_json(body)
            answer = receiver.add(body, kind)
            self.send_response(200)
            self.send_header("Content-Type", kind.split(";")[0])
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
