"""Run the real Triton server that the nvidia-pytriton wheel ships, on this machine.

That build (Triton 2.51, the same as the 24.10 container) has only the Python backend.
``prepare_runtime`` lays out a backend directory holding the Python backend with the stub
for this interpreter and, for each runtime's model steps, Triton's native backend where
``TRITONGEN_BACKENDS`` names a folder of them, else our Python stand-in
(:mod:`tritongen.serve.backends`), so the generated repository is served unchanged. The log's
first lines name what serves each backend. :class:`TritonServer` starts it on the ports asked for
(explicit model control, every model loaded, so that models can be reloaded through the
repository API), waits for readiness with :func:`wait_until_ready`, and always stops it: a
signal first, so that Triton drains in-flight requests for ``exit_timeout`` seconds, then
SIGKILL of its whole process group, stubs included.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.errors import PortTakenError, ServerCrashedError, ServerError
from tritongen.serve.backends import (
    ServedBackends,
    built_container,
    link_backend,
    served_backends,
    stand_in_runtimes,
)
from tritongen.serve.ports import free_ports, port_taken, start_on_free_ports
from tritongen.sources import module_file

REMOTE_SCHEMES = ("s3://", "gs://", "as://")  # repositories tritonserver reads itself

__all__ = [
    "REMOTE_SCHEMES",
    "Endpoints",
    "TritonServer",
    "cache_args",
    "prepare_runtime",
    "running_server",
    "server_environment",
    "triton_paths",
    "wait_until_ready",
]

# A model version the server could not load, and why (Triton's model_lifecycle log line).
_REFUSED = re.compile(r"failed to load '(?P<model>[^']+)' version \d+: (?P<reason>[^\"]+)")
# Error lines of a start without a GPU that are no reason for anything.
_BENIGN = re.compile(r"CudaDriverHelper has not been initialized|Unable to allocate pinned system memory|CUDA driver")
# Seconds past the exit timeout before the process group gets SIGKILL: Triton's own exit takes a moment.
_KILL_MARGIN_S = 10.0
# Triton's handler's line for a signal it received; SIGTERM and SIGINT are stops, any other is a crash.
_SIGNAL_LINE = re.compile(r"^Signal \((?P<number>\d+)\) received\.", re.MULTILINE)
_STOPS = {int(signal.SIGTERM), int(signal.SIGINT)}
# How often crash_watch reads the log's new lines.
_WATCH_PERIOD_S = 0.2
_SIGNAL_LINE_BYTES = 64  # longer than Triton's ``Signal (N) received.`` line


@functools.lru_cache(maxsize=1)
def triton_paths() -> dict[str, Path]:
    """Locations inside the installed nvidia-pytriton wheel."""
    try:
        import pytriton
    except ImportError:
        raise ServerError("nvidia-pytriton is not installed; run `make venv` to install the pinned packages") from None
    package = Path(pytriton.__file__).resolve().parent
    home = package / "tritonserver"
    paths = {
        "home": home,
        "binary": home / "bin" / "tritonserver",
        "python_backend": home / "backends" / "python",
        "stub": home
        / "python_backend_stubs"
        / f"{sys.version_info.major}.{sys.version_info.minor}"
        / "triton_python_backend_stub",
        "caches": home / "caches",
        "libs": package.parent / "nvidia_pytriton.libs",
    }
    for key in ("binary", "python_backend", "stub", "libs"):
        if not paths[key].exists():
            raise ServerError("the pytriton wheel lacks {path}; reinstall nvidia-pytriton==0.7.0", path=paths[key])
    return paths


@functools.cache
def prepare_runtime(backends: ServedBackends | None = None) -> Path:
    """Create (once per process and choice of ``backends``) a folder with ``backends/``, ``caches/`` and ``lib/``.

    ``backends`` (default: :func:`~tritongen.serve.backends.served_backends`) says which runtimes' steps the
    native backends serve; the others get their stand-in.

    ``lib/`` holds the unversioned names perf_analyzer looks for (``libb64.so.0d``,
    ``libcudart.so.12``), linked to the hashed copies in the wheel's libs folder.
    """
    paths = triton_paths()
    root = Path(tempfile.mkdtemp(prefix="tritongen-runtime-"))
    python_dir = root / "backends" / "python"
    python_dir.mkdir(parents=True)
    for item in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(paths["python_backend"] / item, python_dir / item)
    shutil.copy2(paths["stub"], python_dir / "triton_python_backend_stub")
    backends = backends if backends is not None else served_backends()
    for runtime in stand_in_runtimes():
        native = backends.of(runtime.backend)
        if native is not None:
            link_backend(native, root / "backends" / runtime.backend)
            continue
        (root / "backends" / runtime.backend).mkdir()
        shutil.copy2(module_file(runtime.local_backend), root / "backends" / runtime.backend / "model.py")
    (root / "caches").symlink_to(paths["caches"], target_is_directory=True)
    lib = root / "lib"
    lib.mkdir()
    for pattern, name in (("libb64-*.so.0d", "libb64.so.0d"), ("libcudart-*.so.12*", "libcudart.so.12")):
        found = sorted(paths["libs"].glob(pattern))
        if found:
            (lib / name).symlink_to(found[0])
    import atexit

    atexit.register(shutil.rmtree, root, True)
    return root


def cache_args(size: int) -> list[str]:
    """Tritonserver's arguments for a local response cache of ``size`` bytes (none for 0)."""
    return [f"--cache-config=local,size={size}"] if size else []


def server_environment() -> dict[str, str]:
    """Environment for tritonserver and perf_analyzer: libraries found, this venv's Python first."""
    env = dict(os.environ)
    libs = [str(triton_paths()["libs"]), str(prepare_runtime() / "lib")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    # The Python backend stub imports packages from the first `python` on PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), env.get("PATH", "")])
    return env


def wait_until_ready(
    url: str,
    *,
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    what: str = "tritonserver",
    log_file: Path | None = None,
    reason: Callable[[], str] = lambda: "",
    path: str = "/v2/health/ready",
) -> None:
    """Poll ``http://{url}{path}`` until it answers 200; raise ServerError otherwise.

    The one readiness poller: Triton, the bench's baselines and tests use it. It gives up as soon
    as ``process`` (the server being waited for) exits, and after ``timeout`` seconds;
    ``reason()`` adds the telling log line to the error.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            detail = reason()
            raise ServerError(
                f"{what} exited with code {process.returncode}" + (f": {detail}" if detail else ""), log_file=log_file
            )
        with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError):
            with urllib.request.urlopen(f"http://{url}{path}", timeout=2) as response:
                if response.status == 200:
                    return
        if time.monotonic() > deadline:
            detail = reason()
            raise ServerError(
                f"{what} was not ready after {timeout:.0f}s" + (f": {detail}" if detail else ""), log_file=log_file
            )
        time.sleep(0.25)


@dataclass(frozen=True)
class Endpoints:
    """Where a tritonserver listens: one host, and a port for each of HTTP, gRPC and metrics."""

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    # Picked free by us (:meth:`free`), not asked for: a server that finds one taken starts again on others.
    picked: bool = field(default=False, compare=False)

    @classmethod
    def free(cls, host: str = "127.0.0.1") -> Endpoints:
        """Three distinct ports that are free right now on ``host`` (tests and the bench run beside other servers)."""
        return cls(host, *free_ports(3, host), picked=True)

    @property
    def ports(self) -> tuple[int, int, int]:
        """The HTTP, gRPC and metrics ports."""
        return self.http_port, self.grpc_port, self.metrics_port

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint."""
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint."""
        return f"{self.host}:{self.grpc_port}"


class TritonServer:
    """A tritonserver process serving one repository; use as a context manager."""

    def __init__(
        self,
        repository: Path | str,
        endpoints: Endpoints = Endpoints(),
        *,
        models: Sequence[str] | None = None,
        log_file: Path | None = None,
        exit_timeout: int = 10,
        extra_args: Sequence[str] = (),
        backends: ServedBackends | None = None,
    ) -> None:
        # A local folder, or a remote repository URL tritonserver reads itself (s3://, gs://, as://).
        remote = str(repository).startswith(REMOTE_SCHEMES)
        self.repository: Path | str = str(repository) if remote else Path(repository).resolve()
        self.endpoints = endpoints
        self.models = list(models) if models is not None else ["*"]
        self.exit_timeout = exit_timeout
        self.extra_args = list(extra_args)
        # Default: the native backends of $TRITONGEN_BACKENDS for the release the repository's builds target.
        self.backends = backends if backends is not None else served_backends(built_container(self.repository))
        self._own_log = log_file is None
        self.log_file = log_file or Path(tempfile.mkstemp(prefix="tritonserver-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint."""
        return self.endpoints.http_url

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint."""
        return self.endpoints.grpc_url

    def command(self) -> list[str]:
        """The tritonserver command line."""
        runtime, at = prepare_runtime(self.backends), self.endpoints
        cmd = [
            str(triton_paths()["binary"]),
            f"--model-repository={self.repository}",
            f"--backend-directory={runtime / 'backends'}",
            f"--cache-directory={runtime / 'caches'}",
            f"--http-address={at.host}",
            f"--http-port={at.http_port}",
            f"--grpc-address={at.host}",
            f"--grpc-port={at.grpc_port}",
            f"--metrics-address={at.host}",
            f"--metrics-port={at.metrics_port}",
            "--allow-metrics=true",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={self.exit_timeout}",
            "--strict-readiness=true",
        ]
        cmd.append("--model-control-mode=explicit")
        cmd += [f"--load-model={name}" for name in self.models]
        return cmd + self.extra_args

    def start(self, timeout: float = 240.0) -> TritonServer:
        """Start the server and block until it reports ready; raise ServerError otherwise.

        Where the ports were picked free (:meth:`Endpoints.free`) and one was taken before the server bound it, they
        are picked again and the server started again, a bounded number of times; ports asked for are not.
        """
        if isinstance(self.repository, Path) and not self.repository.is_dir():
            raise ServerError("model repository {path} does not exist; build one first", path=self.repository)
        if not self.endpoints.picked:
            self._start(timeout)
            return self

        def start(attempt: int) -> None:
            if attempt > 1:
                self.endpoints = Endpoints.free(self.endpoints.host)
            self._start(timeout)

        start_on_free_ports(start, "tritonserver")
        return self

    def _start(self, timeout: float) -> None:
        """One start on the current endpoints; its log alone (an earlier start's refusal is no reason for this one)."""
        at = self.endpoints
        for port in at.ports:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                if sock.connect_ex((at.host, port)) == 0:
                    raise PortTakenError("tritonserver", (port,), at.host)
        with open(self.log_file, "wb") as log:
            log.write("".join(f"tritongen: {line}\n" for line in self.backends.lines()).encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=server_environment(), start_new_session=True
            )
        try:
            self.wait_ready(timeout)
        except ServerError:
            exited = self.process is not None and self.process.poll() is not None
            self.stop()
            if exited and port_taken(self.logs()):
                raise PortTakenError("tritonserver", at.ports, at.host, log_file=self.log_file) from None
            raise
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float) -> None:
        """Block until ``/v2/health/ready`` answers 200; raise ServerError if the process dies or time runs out."""
        wait_until_ready(
            self.http_url, timeout=timeout, process=self.process, log_file=self.log_file, reason=self.failure_reason
        )

    def logs(self) -> str:
        """The server's output so far."""
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def failure_reason(self) -> str:
        """The most telling error line of the log (see the log file for the rest).

        A model its backend refused comes first, as ``model `X` refused by its backend: <reason>``; lines that
        every CPU-only start logs (no CUDA driver) never count as the reason.
        """
        lines = [ln for ln in self.logs().splitlines() if ln.strip() and not ln.startswith("tritongen: ")]
        for line in lines:
            refused = _REFUSED.search(line)
            if refused:
                return f"model `{refused['model']}` refused by its backend: {refused['reason']}"[:600]
        errors = [
            ln for ln in lines
            if (ln.startswith("E") or "failed" in ln.lower() or "error" in ln.lower()) and not _BENIGN.search(ln)
        ]  # fmt: skip
        picked = (errors or lines or ["no output"])[0 if errors else -1]
        return picked.strip()[:400]

    def fatal_signal(self, since: int = 0) -> int | None:
        """The signal tritonserver logged receiving, past byte ``since`` of its log, other than a stop; None if none.

        Triton's handler logs ``Signal (11) received.`` and may then hang rather than exit, so the process can look
        alive after a crash; its log cannot.
        """
        with contextlib.suppress(OSError), open(self.log_file, "rb") as log:
            log.seek(since)
            for found in _SIGNAL_LINE.finditer(log.read().decode(errors="replace")):
                if int(found["number"]) not in _STOPS:
                    return int(found["number"])
        return None

    def kill(self) -> None:
        """SIGKILL to the server's process group at once (a server that crashed and hangs); :meth:`stop` reaps it."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def crash_poller(self, since: int | None = None) -> Callable[[], int | None]:
        """A reader of the log from byte ``since`` (default: its end now) on: each call gives a fatal signal or None.

        Each call reads only what was added since the last (and a line's worth before it, for a line cut at the end).
        """
        read = self._log_size() if since is None else since

        def poll() -> int | None:
            nonlocal read
            size = self._log_size()
            number = self.fatal_signal(read)
            read = max(read, size - _SIGNAL_LINE_BYTES)
            return number

        return poll

    def _log_size(self) -> int:
        return self.log_file.stat().st_size if self.log_file.is_file() else 0

    @contextlib.contextmanager
    def crash_watch(self, what: str) -> Iterator[None]:
        """Raise :class:`ServerCrashedError` if tritonserver crashes during the block (``what`` it was doing).

        The server is killed the moment its log shows the crash, so clients inside the block fail at once rather
        than wait out their time-outs on a server that hangs.
        """
        poll = self.crash_poller()
        done, lock = threading.Event(), threading.Lock()
        crashed: list[int] = []

        def check() -> bool:
            with lock:
                number = poll()
                if number is not None:
                    crashed.append(number)
                    self.kill()
                return bool(crashed)

        def watch() -> None:
            while not done.wait(_WATCH_PERIOD_S) and not check():
                pass

        watcher = threading.Thread(target=watch, name="tritonserver-crash-watch", daemon=True)
        watcher.start()
        failure: BaseException | None = None
        try:
            yield
        except Exception as exc:  # a client's error is the crash's doing where the server crashed
            failure = exc
        finally:
            done.set()
            watcher.join()
        if check():
            raise ServerCrashedError(what, crashed[0], log_file=self.log_file) from failure
        if failure is not None:
            raise failure

    def stop(self) -> None:
        """Stop the server and every process of its group, stubs included.

        SIGTERM to tritonserver alone: Triton then refuses new work, drains in-flight requests for
        up to ``exit_timeout`` seconds and stops its stubs. Whatever of the group is still there
        a margin later (or at once, when tritonserver has already died) gets SIGKILL.
        """
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self.exit_timeout + _KILL_MARGIN_S)
        # The group outlives its leader when stubs linger; killpg reaches them by the leader's pid.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_server(repository: Path | str, **settings: Any) -> Iterator[TritonServer]:
    """Start a server on free ports and stop it afterwards; ``settings`` are :class:`TritonServer`'s."""
    with TritonServer(repository, Endpoints.free(), **settings) as server:
        yield server
