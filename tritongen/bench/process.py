"""One HTTP server the bench runs beside Triton (a peer, the gateway): started, awaited, always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from tritongen.errors import BenchError, PortTakenError, ServerError
from tritongen.serve.ports import free_port, port_taken, start_on_free_ports
from tritongen.serve.server import wait_until_ready

__all__ = ["http_process", "running_http_process", "start_http_process", "venv_executable"]


def venv_executable(venv: Path, name: str) -> Path | None:
    """``bin/<name>`` of ``venv`` (in the working folder, else beside this source tree), or None.

    The venv counts once its make target finished it (its ``.installed`` marker), not half-installed.
    """
    for root in (Path.cwd() / venv, Path(__file__).resolve().parents[2] / venv):
        if (root / "bin" / name).is_file() and (root / ".installed").is_file():
            return root / "bin" / name
    return None


def _last_error(log: Path) -> str:
    """The log's last exception line (``ValueError: ...``), where a Python server says why it stopped."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    causes = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (causes or lines or [""])[-1][:300]


def start_http_process(
    command: Callable[[int], Sequence[str]],
    log: Path,
    *,
    what: str,
    env: Mapping[str, str],
    timeout: float,
    ready: str = "/health",
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``command(port)`` on a free port in its own session, logging to ``log``; it and its ``host:port``.

    Ready once ``ready`` (a path) answers 200. One that exits because its port was taken since it was picked
    starts again on another; one that exits otherwise or never answers is stopped, and a ServerError names
    ``log`` and the log's last exception line.
    """

    def start(_attempt: int) -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        with open(log, "wb") as handle:  # each start's log alone: an earlier one's refusal is no reason for this one
            process = subprocess.Popen(
                list(command(port)), stdout=handle, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                start_new_session=True,
            )  # fmt: skip
        try:
            wait_until_ready(
                f"127.0.0.1:{port}", timeout=timeout, process=process, what=what, log_file=log,
                path=ready, reason=lambda: _last_error(log),
            )  # fmt: skip
        except BaseException:
            _stop_group(process)
            if port_taken(log.read_text(errors="replace")):
                raise PortTakenError(what, (port,), "127.0.0.1", log_file=log) from None
            raise
        return process, f"127.0.0.1:{port}"

    return start_on_free_ports(start, what)


@contextlib.contextmanager
def http_process(command: Callable[[int], Sequence[str]], log: Path, **options: Any) -> Iterator[str]:
    """:func:`running_http_process` (``options`` are its own), yielding only the server's ``host:port``."""
    with running_http_process(command, log, **options) as (_, url):
        yield url


@contextlib.contextmanager
def running_http_process(
    command: Callable[[int], Sequence[str]], log: Path, **options: Any
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """:func:`start_http_process` (``options`` are its own) for the length of a ``with``; yield it and ``host:port``.

    A server that does not start is a BenchError. At exit its whole process group gets SIGTERM, then SIGKILL
    after 20 s, so no child outlives the bench; a SIGTERM to the bench unwinds it as Ctrl-C does.
    """
    with _sigterm_unwinds():
        try:
            process, url = start_http_process(command, log, **options)
        except ServerError as exc:
            raise BenchError(exc.message, log_file=log) from None
        try:
            yield process, url
        finally:
            _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to ``process``'s whole group, SIGKILL to what is left after 20 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Inside, SIGTERM raises SystemExit, so that ``finally`` blocks stop the servers as on Ctrl-C.

    Python's default for SIGTERM ends the process at once, leaving its servers running in their own sessions.
    A second SIGTERM does not interrupt the stopping. Signal handlers belong to the main thread; elsewhere this
    changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if not received.is_set():
            received.set()
            raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
