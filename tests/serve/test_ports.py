"""Free ports that cannot collide, and servers that start again when a picked port was taken before they bound it."""

from __future__ import annotations

import contextlib
import socket
import sys
from pathlib import Path

import pytest

import tritongen.bench.process as process_module
from tritongen.bench.process import http_process
from tritongen.errors import BenchError, PortTakenError
from tritongen.serve.ports import free_ports, port_taken, start_on_free_ports
from tritongen.serve.server import Endpoints, TritonServer

# A server answering 200 on every path, as the bench's side servers answer /health.
SERVE_200 = """
import http.server, sys
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()
"""


@contextlib.contextmanager
def _held(port: int, *, listen: bool):
    """``port`` bound by this process (listening or not) for the length of a ``with``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        if listen:
            sock.listen()
        yield


def test_free_ports_are_distinct_and_bindable_when_many_are_picked_at_once():
    ports = free_ports(64)
    assert len(set(ports)) == 64
    with contextlib.ExitStack() as stack:
        for port in ports:  # each is free: bind them all at once
            stack.enter_context(_held(port, listen=False))


def test_free_ports_come_from_below_the_ephemeral_range_where_it_leaves_room():
    """Ports in the ephemeral range also go to clients' outgoing connections, which can take them before a bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low < 16000:
        pytest.skip(f"the ephemeral range starts at {low}: no room below it")
    assert all(port < low for port in free_ports(16))


@pytest.mark.parametrize(
    "log",
    [
        "E1129 main.cc:257] \"failed to start HTTP service: Unavailable - Socket '127.0.0.1:40993' already in use \"",
        "The server cannot listen to HTTP requests and GRPC requests at the same address and port 127.0.0.1:18100",
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8080): address already in use",
        "OSError: [Errno 98] Address already in use",
    ],
    ids=["tritonserver", "tritonserver-same-port", "uvicorn", "python"],
)
def test_port_taken_reads_each_servers_refusal(log):
    assert port_taken(log)
    assert not port_taken("failed to load 'm' version 1: Invalid argument: unexpected inference input")


def test_start_on_free_ports_starts_again_a_bounded_number_of_times_and_says_so_in_one_line():
    said, calls = [], []

    def start(attempt: int) -> str:
        calls.append(attempt)
        if attempt < 3:
            raise PortTakenError("srv", (1234,), "127.0.0.1")
        return "up"

    assert start_on_free_ports(start, "srv", say=said.append) == "up"
    assert calls == [1, 2, 3] and len(said) == 2
    assert said[0] == (
        "srv: srv found a port it was given (1234 on 127.0.0.1) taken since it was picked; "
        "starting again on fresh ports (start 2 of 3)"
    )
    with pytest.raises(PortTakenError, match=r"srv could not listen on 127.0.0.1: port 1 is already in use; choose"):
        start_on_free_ports(lambda _: (_ for _ in ()).throw(PortTakenError("srv", (1,), "127.0.0.1")), "srv",
                            say=said.append)  # fmt: skip


@pytest.mark.e2e
def test_tritonserver_starts_again_on_fresh_ports_when_a_picked_one_was_taken_before_it_bound(tmp_path, capfd):
    """The port is bound but not listening, so only tritonserver's own bind finds it taken (its log says so)."""
    (tmp_path / "repo").mkdir()
    taken = free_ports(1)[0]
    picked = Endpoints("127.0.0.1", taken, *free_ports(2), picked=True)
    with _held(taken, listen=False):
        with TritonServer(tmp_path / "repo", picked, models=[]) as server:
            assert server.endpoints.http_port != taken and server.endpoints.picked
    err = capfd.readouterr().err
    assert f"tritonserver found a port it was given ({taken}, " in err
    assert "starting again on fresh ports (start 2 of 3)" in err


@pytest.mark.e2e
def test_tritonserver_refuses_in_one_line_when_ports_asked_for_are_taken(tmp_path, capfd):
    (tmp_path / "repo").mkdir()
    taken, grpc, metrics = free_ports(3)
    for listen in (True, False):  # found before the start, and by tritonserver's own bind
        with _held(taken, listen=listen), pytest.raises(PortTakenError) as refused:
            TritonServer(tmp_path / "repo", Endpoints("127.0.0.1", taken, grpc, metrics), models=[]).start()
        assert "tritonserver could not listen on 127.0.0.1: " in refused.value.message
        assert refused.value.message.endswith("is already in use; choose other ports")
        assert str(taken) in refused.value.message
    assert "starting again" not in capfd.readouterr().err


def test_a_side_server_starts_again_on_a_fresh_port_when_its_pick_was_taken(tmp_path, monkeypatch, capfd):
    taken = free_ports(1)[0]
    picks = iter([taken])
    monkeypatch.setattr(process_module, "free_port", lambda: next(picks, None) or free_ports(1)[0])
    command = lambda port: [sys.executable, "-c", SERVE_200, str(port)]  # noqa: E731
    with _held(taken, listen=False):
        with http_process(command, tmp_path / "side.log", what="the side server", env={}, timeout=30) as url:
            assert not url.endswith(f":{taken}")
    assert "the side server found a port it was given" in capfd.readouterr().err


def test_a_side_server_that_fails_for_another_reason_is_not_started_again(tmp_path, capfd):
    command = lambda port: [sys.executable, "-c", "raise ValueError('no model here')"]  # noqa: E731
    with pytest.raises(BenchError, match=r"the side server exited with code 1: ValueError: no model here"):
        with http_process(command, tmp_path / "side.log", what="the side server", env={}, timeout=30):
            pass
    assert "starting again" not in capfd.readouterr().err
