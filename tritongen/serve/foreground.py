"""``tritongen serve``: run tritonserver in the foreground, supervised, until a signal or its death.

What an orchestrator needs from the process it starts:

* SIGTERM and SIGINT stop it cleanly: ``/healthz`` turns 503, Triton drains in-flight requests
  for up to ``grace_period`` seconds (its ``--exit-timeout-secs``), and whatever of its process
  group is left after that gets SIGKILL, so no tritonserver or stub outlives ``serve``;
* a dead Python stub is brought back by :class:`tritongen.serve.supervisor.Supervisor`, and readiness
  (:mod:`tritongen.serve.health`) is false until the deployment answers again;
* when tritonserver itself dies, ``serve`` stops its stubs and fails with one line (exit code 2
  at the CLI), so that the orchestrator restarts it;
* only holders of the admin key (:mod:`tritongen.serve.admin`) may load or unload models: the
  supervisor, ``tritongen rollout`` and ``rollback``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from tritongen.containers import LOCAL_CONTAINER, container
from tritongen.errors import ServerCrashedError, ServerError
from tritongen.serve.admin import AdminClient, http_headers, restricted_args, serving_key
from tritongen.serve.health import HealthEndpoint, check, find_ensembles
from tritongen.serve.otlp import TRACE_RACE_FIXED_IN, opentelemetry_args, traces_url
from tritongen.serve.server import Endpoints, TritonServer, cache_args
from tritongen.serve.supervisor import Supervisor

__all__ = ["ServeOptions", "serve"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True)
class ServeOptions:
    """Settings of one ``serve`` run; ``health_port`` 0 turns the health endpoint off."""

    repository: Path | str
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    health_port: int = 8003
    cache_size: int = 16 * 1024 * 1024
    grace_period: int = 20
    supervise: bool = True
    probe_timeout: float = 10.0
    admin_key_file: Path | None = None  # None: TRITONGEN_ADMIN_KEY, else a fresh key beside the repository
    otlp_endpoint: str | None = None  # an OTLP/HTTP collector Triton sends a trace of every request to

    @property
    def endpoints(self) -> Endpoints:
        """Where tritonserver listens."""
        return Endpoints(self.host, self.http_port, self.grpc_port, self.metrics_port)


class _Interrupted(BaseException):
    """A stop signal arrived while tritonserver was still starting (BaseException, like Ctrl-C)."""


def gpu_models(repository: Path | str) -> list[str]:
    """The models of a local ``repository`` whose instances run on a GPU (KIND_GPU), by name."""
    from tritongen.configs.parser import read_config

    root = Path(repository)
    if "://" in str(repository) or not root.is_dir():
        return []
    configs = sorted(root.glob("*/config.pbtxt"))
    return [c.parent.name for c in configs if read_config(c).on_gpu]


def has_gpu() -> bool:
    """Whether an NVIDIA GPU can be used here: the driver's library loads and counts a device."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def refuse_gpu_build_without_gpu(repository: Path | str) -> None:
    """A GPU build cannot load here: one line naming it and the fix, instead of Triton's CUDA error in its log."""
    on_gpu = gpu_models(repository)
    if on_gpu and not has_gpu():
        raise ServerError(
            f"`{on_gpu[0]}` in {repository} was built for a GPU node (KIND_GPU instances) and this machine has no "
            "NVIDIA GPU; serve it on a GPU node, or rebuild it for the CPU (make repo DEVICE=cpu)"
        )


def serve(options: ServeOptions, *, log: Callable[[str], None] = print) -> None:
    """Serve until SIGTERM or SIGINT (return) or until tritonserver dies (raise ServerError)."""
    refuse_gpu_build_without_gpu(options.repository)
    key, key_file = serving_key(options.repository, options.admin_key_file)
    server = TritonServer(
        options.repository,
        options.endpoints,
        exit_timeout=options.grace_period,
        extra_args=cache_args(options.cache_size) + restricted_args(key) + opentelemetry_args(options.otlp_endpoint),
    )
    stopping = threading.Event()
    started = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        first = not stopping.is_set()
        stopping.set()
        if first and not started.is_set():
            raise _Interrupted

    previous = {sig: signal.signal(sig, on_signal) for sig in _SIGNALS}
    supervisor: Supervisor | None = None
    endpoint: HealthEndpoint | None = None
    try:
        try:
            server.start()
            started.set()  # inside the try: a signal just before this line still lands in the except
        except _Interrupted:
            return
        supervisor, endpoint = _start_watchers(server, options, key, stopping, log)
        health = f", health http://{options.host}:{endpoint.port}/healthz" if endpoint else ""
        log(
            f"Triton is serving {options.repository} — HTTP {server.http_url}, gRPC {server.grpc_url}, "
            f"metrics {options.host}:{options.metrics_port}{health} (log: {server.log_file}). "
            f"Ctrl-C or SIGTERM stops it ({options.grace_period}s grace)."
        )
        log("Model steps served by: " + "; ".join(server.backends.lines()))
        if options.otlp_endpoint:
            log(
                f"Every request is traced to {traces_url(options.otlp_endpoint)}. This tritonserver is "
                f"{container(LOCAL_CONTAINER).triton}: before {TRACE_RACE_FIXED_IN} Triton can crash while it traces "
                "ensembles under load (serve then exits 2); trace in production on a newer container."
            )
        if key_file is not None:
            log(f"The admin key (model loading and unloading) is in {key_file}.")
        _wait(server, stopping)
    finally:
        if supervisor is not None:  # first, so that stubs ending with the server are not "recovered"
            supervisor.stop()
            supervisor.join(timeout=options.grace_period + 30)
        stopping.set()  # /healthz answers 503 while Triton drains
        server.stop()
        if endpoint is not None:
            endpoint.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_watchers(
    server: TritonServer, options: ServeOptions, key: str, stopping: threading.Event, log: Callable[[str], None]
) -> tuple[Supervisor | None, HealthEndpoint | None]:
    import tritonclient.http as httpclient

    assert server.process is not None
    process = server.process
    supervisor = None
    if options.supervise:
        # A model load can take minutes for a large checkpoint on a busy machine.
        client = AdminClient(
            httpclient.InferenceServerClient(server.http_url, connection_timeout=30, network_timeout=600),
            http_headers(key),
        )
        supervisor = Supervisor(process.pid, client, log=log)
        supervisor.start()
    endpoint = None
    if options.health_port:
        ensembles = find_ensembles(
            server.repository, server.http_url, timeout=options.probe_timeout, headers=http_headers(key)
        )
        try:
            endpoint = HealthEndpoint(
                options.host,
                options.health_port,
                probe=lambda: check(server.http_url, ensembles, timeout=options.probe_timeout),
                alive=lambda: process.poll() is None and not stopping.is_set(),
            ).start()
        except OSError as exc:
            raise ServerError(f"cannot serve health checks on {options.host}:{options.health_port}: {exc}") from None
    return supervisor, endpoint


def _wait(server: TritonServer, stopping: threading.Event) -> None:
    """Return on a stop signal; raise ServerError as soon as tritonserver exits by itself, or crashes and hangs.

    Triton's handler for a fatal signal logs ``Signal (11) received.`` and can then hang with its ports open; the
    log is read as it grows, and such a server is killed, so that the pod restarts rather than hold a dead server.
    """
    assert server.process is not None
    crashed = server.crash_poller(since=0)
    while not stopping.wait(0.5):
        code = server.process.poll()
        if code is not None:
            raise ServerError(
                f"tritonserver exited unexpectedly with code {code}; stopping so that it can be restarted",
                log_file=server.log_file,
            )
        number = crashed()
        if number is not None:
            server.kill()
            what = "it served; stopping so that it can be restarted"
            raise ServerCrashedError(what, number, log_file=server.log_file)
