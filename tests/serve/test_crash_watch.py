"""A tritonserver crash is read from its log, told from a stop, and turns a block's client errors into one error."""

from __future__ import annotations

import pytest

from tritongen.errors import ServerCrashedError
from tritongen.serve.server import TritonServer


def _server(tmp_path):
    log = tmp_path / "server.log"
    log.write_text('I1129 17:37:32.653028 12436 http_server.cc:4713] "Started HTTPService at 127.0.0.1:23143"\n')
    return TritonServer(tmp_path, log_file=log), log


def test_a_fatal_signal_is_read_from_the_log_and_a_stop_is_not_one(tmp_path):
    server, log = _server(tmp_path)
    with log.open("a") as out:
        out.write("Signal (15) received.\nSignal (2) received.\n")
    assert server.fatal_signal() is None
    before = log.stat().st_size
    with log.open("a") as out:
        out.write("Signal (11) received.\n 0# 0x00005578109CC0C4 in tritonserver\n")
    assert server.fatal_signal() == 11 and server.fatal_signal(since=before) == 11
    assert server.fatal_signal(since=log.stat().st_size) is None


def test_crash_watch_names_the_crash_over_the_client_error_it_caused_and_leaves_other_errors_alone(tmp_path):
    server, log = _server(tmp_path)
    with pytest.raises(ConnectionRefusedError), server.crash_watch("it traced"):
        raise ConnectionRefusedError(111, "Connection refused")  # no crash in the log: the error is the block's own
    with pytest.raises(ServerCrashedError, match=r"crashed \(signal 11\) while it traced") as caught:
        with server.crash_watch("it traced"):
            with log.open("a") as out:
                out.write("Signal (11) received.\n")
            raise ConnectionRefusedError(111, "Connection refused")
    assert isinstance(caught.value.__cause__, ConnectionRefusedError) and caught.value.log_file == log
    with server.crash_watch("it traced"):  # a crash logged before the block is not the block's
        pass
