"""One HTTP server the bench runs beside Triton (infinity-emb, the gateway): started, awaited, always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from tritongen.errors import BenchError, ServerError
from tritongen.serve.server import wait_until_ready

__all__ = ["http_process"]


@contextlib.contextmanager
def http_process(
    command: Sequence[str],
    port: int,
    log: Path,
    *,
    what: str,
    env: Mapping[str, str],
    timeout: float,
    reason: Callable[[], str] = lambda: "",
) -> Iterator[str]:
    """Run ``command`` (listening on ``port``) in its own session, logging to ``log``; yield its ``host:port``.

    Ready once ``/health`` answers 200; a server that exits or never answers is a BenchError naming ``log``. At
    exit its whole process group gets SIGTERM, then SIGKILL after 20 s, so no child outlives the bench.
    """
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            list(command), stdout=handle, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
        )
    url = f"127.0.0.1:{port}"
    try:
        try:
            wait_until_ready(
                url, timeout=timeout, process=process, what=what, log_file=log, path="/health", reason=reason
            )
        except ServerError as exc:
            raise BenchError(exc.message, log_file=log) from None
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
