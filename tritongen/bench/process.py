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

from tritongen.errors import BenchError, ServerError
from tritongen.serve.server import wait_until_ready

__all__ = ["http_process", "venv_executable"]


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


@contextlib.contextmanager
def http_process(
    command: Sequence[str],
    port: int,
    log: Path,
    *,
    what: str,
    env: Mapping[str, str],
    timeout: float,
    reason: Callable[[], str] | None = None,
) -> Iterator[str]:
    """Run ``command`` (listening on ``port``) in its own session, logging to ``log``; yield its ``host:port``.

    Ready once ``/health`` answers 200; a server that exits or never answers is a BenchError naming ``log`` and
    ``reason()`` (by default the log's last exception line). At exit its whole process group gets SIGTERM, then
    SIGKILL after 20 s, so no child outlives the bench; a SIGTERM to the bench unwinds it as Ctrl-C does.
    """
    with _sigterm_unwinds():
        with open(log, "wb") as handle:
            process = subprocess.Popen(
                list(command), stdout=handle, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
            )
        try:
            try:
                wait_until_ready(
                    f"127.0.0.1:{port}", timeout=timeout, process=process, what=what, log_file=log,
                    path="/health", reason=reason or (lambda: _last_error(log)),
                )  # fmt: skip
            except ServerError as exc:
                raise BenchError(exc.message, log_file=log) from None
            yield f"127.0.0.1:{port}"
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
