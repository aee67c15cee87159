"""The gateway's inference path, KServe v2 HTTP with binary tensors, against a scripted server on a real socket.

Each test runs on asyncio's loop and on uvloop's (the gateway's under uvicorn), whose transports differ. What
Triton itself answers, through the whole gateway, is proven in tests/gateway/test_gateway.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable

import numpy as np
import pytest
import uvloop

from tritongen.errors import GatewayError
from tritongen.gateway.kserve_http import HttpInference, WireTensor
from tritongen.serve.ports import free_port

LOOPS = pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)


def _binary_answer(outputs: list[tuple[str, str, np.ndarray | bytes]]) -> bytes:
    """An HTTP 200 with the outputs as binary tensors (BYTES given as their serialised bytes)."""
    described, parts = [], []
    for name, datatype, value in outputs:
        raw = value if isinstance(value, bytes) else value.tobytes()
        shape = [2, 1] if isinstance(value, bytes) else list(value.shape)
        described.append(
            {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": len(raw)}}
        )
        parts.append(raw)
    header = json.dumps({"model_name": "m", "outputs": described}).encode()
    body = header + b"".join(parts)
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s" % (len(header), len(body), body)
    )


def _json_answer(status: int, payload: object) -> bytes:
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


class Scripted:
    """A server answering each request with ``script(header, raw)``: bytes to send, ``"close"``, or None (hang)."""

    def __init__(self, script: Callable[[dict, bytes], bytes | str | None]) -> None:
        self.script, self.connections, self.requests = script, 0, []
        self.handlers: list[asyncio.Task] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.handlers.append(asyncio.current_task())
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?im)^content-length: (\d+)", head).group(1))
                split = int(re.search(rb"(?i)inference-header-content-length: (\d+)", head).group(1))
                body = await reader.readexactly(length)
                header = json.loads(body[:split])
                self.requests.append((head, header, body[split:]))
                answer = self.script(header, body[split:])
                if answer is None:
                    await asyncio.sleep(3600)
                if answer == "close":
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _run(loop_factory, server: Scripted, body, *, timeout: float = 5.0):
    """``body(inference)`` against ``server`` on a loop of ``loop_factory``; what it returns."""

    async def main():
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)  # the kernel's port: no race
        port = listening.sockets[0].getsockname()[1]
        inference = HttpInference(f"127.0.0.1:{port}", timeout)
        try:
            return await body(inference)
        finally:
            await inference.close()
            listening.close()
            for handler in server.handlers:
                handler.cancel()
            await asyncio.gather(*server.handlers, return_exceptions=True)
            await asyncio.sleep(0.01)  # the closed transports' callbacks run before the loop closes

    loop = loop_factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


TEXTS = ["héllo", "a longer text"]


@LOOPS
def test_tensors_go_as_binary_and_come_back_as_arrays_on_one_kept_alive_connection(loop_factory):
    vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
    labels = b"".join(len(w).to_bytes(4, "little") + w for w in (b"pos", b"neg"))
    answer = _binary_answer(
        [("EMBEDDING", "FP32", vectors), ("TRUNCATED", "BOOL", np.array([[True], [False]])), ("LABEL", "BYTES", labels)]
    )
    server = Scripted(lambda header, raw: answer)
    inputs = [WireTensor.column("TEXT", "BYTES", TEXTS), WireTensor.column("DIMENSIONS", "INT32", [3, 3])]

    async def twice(inference):
        return [await inference.post("emb", inputs, ["EMBEDDING", "TRUNCATED", "LABEL"]) for _ in range(2)]

    first, second = _run(loop_factory, server, twice)
    np.testing.assert_array_equal(first["EMBEDDING"], vectors)
    assert first["TRUNCATED"].tolist() == [[True], [False]] and first["LABEL"].reshape(-1).tolist() == [b"pos", b"neg"]
    np.testing.assert_array_equal(second["EMBEDDING"], vectors)
    assert server.connections == 1  # kept alive
    head, header, raw = server.requests[0]
    assert head.startswith(b"POST /v2/models/emb/infer HTTP/1.1\r\n")
    assert [(t["name"], t["datatype"], t["shape"]) for t in header["inputs"]] == [
        ("TEXT", "BYTES", [2, 1]), ("DIMENSIONS", "INT32", [2, 1])
    ]  # fmt: skip
    assert all(o["parameters"] == {"binary_data": True} for o in header["outputs"])
    text = b"".join(len(t.encode()).to_bytes(4, "little") + t.encode() for t in TEXTS)
    assert raw == text + np.array([3, 3], np.int32).tobytes()


@LOOPS
def test_a_kept_alive_connection_that_triton_closed_is_replaced_and_the_request_sent_again(loop_factory):
    answers = iter([_binary_answer([("EMBEDDING", "FP32", np.ones((1, 2), np.float32))]), "close"])
    server = Scripted(
        lambda header, raw: next(answers, _binary_answer([("EMBEDDING", "FP32", np.zeros((1, 2), np.float32))]))
    )
    inputs = [WireTensor.column("TEXT", "BYTES", ["x"])]

    async def twice(inference):
        return [await inference.post("emb", inputs, ["EMBEDDING"]) for _ in range(2)]

    first, second = _run(loop_factory, server, twice)
    assert first["EMBEDDING"].tolist() == [[1, 1]] and second["EMBEDDING"].tolist() == [[0, 0]]
    assert server.connections == 2


@LOOPS
@pytest.mark.parametrize(
    ("status", "message", "expected", "code"),
    [
        (400, "Request for unknown model: 'emb' is not found", 404, "model_not_found"),
        (400, "unexpected shape for input 'TEXT'", 400, "invalid_input"),
        (503, "Server is shutting down", 503, "unavailable"),
        (500, "something broke", 502, "upstream_error"),
    ],
)
def test_tritons_error_answers_become_the_gateways_errors(loop_factory, status, message, expected, code):
    server = Scripted(lambda header, raw: _json_answer(status, {"error": message}))

    async def once(inference):
        return await inference.post("emb", [WireTensor.column("TEXT", "BYTES", ["x"])], ["EMBEDDING"])

    with pytest.raises(GatewayError) as caught:
        _run(loop_factory, server, once)
    assert (caught.value.status, caught.value.code) == (expected, code) and message in caught.value.message


@LOOPS
def test_no_answer_in_time_is_504_and_malformed_http_is_502(loop_factory):
    async def once(inference):
        return await inference.post("emb", [WireTensor.column("TEXT", "BYTES", ["x"])], ["EMBEDDING"])

    with pytest.raises(GatewayError) as caught:
        _run(loop_factory, Scripted(lambda header, raw: None), once, timeout=0.3)
    assert caught.value.status == 504 and "0.3 s" in caught.value.message
    with pytest.raises(GatewayError) as caught:
        _run(loop_factory, Scripted(lambda header, raw: b"NOT HTTP AT ALL\r\n\r\n"), once)
    assert caught.value.status == 502


@LOOPS
def test_json_outputs_are_read_where_triton_sends_them_without_binary(loop_factory):
    payload = {"outputs": [{"name": "TOKEN_COUNT", "datatype": "INT32", "shape": [2, 1], "data": [3, 5]}]}
    server = Scripted(lambda header, raw: _json_answer(200, payload))

    async def once(inference):
        return await inference.post("emb", [WireTensor.column("TEXT", "BYTES", TEXTS)], ["TOKEN_COUNT"])

    counts = _run(loop_factory, server, once)["TOKEN_COUNT"]
    assert counts.dtype == np.int32 and counts.tolist() == [[3], [5]]


@LOOPS
def test_an_unreachable_port_names_the_option_and_a_closed_client_refuses(loop_factory):
    async def unreachable(_):
        inference = HttpInference(f"127.0.0.1:{free_port()}", 5.0)
        with pytest.raises(GatewayError) as caught:
            await inference.post("emb", [WireTensor.column("TEXT", "BYTES", ["x"])], ["EMBEDDING"])
        return caught.value

    error = _run(loop_factory, Scripted(lambda header, raw: None), unreachable)
    assert error.status == 503 and "--triton-http-url" in error.message

    async def closed(inference):
        await inference.close()
        with pytest.raises(GatewayError) as caught:
            await inference.post("emb", [WireTensor.column("TEXT", "BYTES", ["x"])], ["EMBEDDING"])
        return caught.value

    assert "shutting down" in _run(loop_factory, Scripted(lambda header, raw: None), closed).message


def test_the_bench_baseline_reads_the_texts_of_a_binary_request_as_the_gateway_writes_it():
    from tritongen.bench.pipeline_server import decode_request

    tensor = WireTensor.column("TEXT", "BYTES", TEXTS)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "datatype": "BYTES",
                    "shape": [2, 1],
                    "parameters": {"binary_data_size": len(tensor.raw)},
                }
            ]
        }
    ).encode()
    assert decode_request(header + tensor.raw, str(len(header))) == TEXTS
    plain = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "data": TEXTS}]}
    assert decode_request(json.dumps(plain).encode(), None) == TEXTS
    assert decode_request(b'{"inputs": []}', None) is None and decode_request(b"{}", None) is None
