"""Deep readiness: one real inference per ensemble, as ``tritongen health`` and as an HTTP probe.

Triton's ``/v2/health/ready`` checks that models are loaded, not that they answer: with a dead
Python stub it still says 200. :func:`check` sends each ensemble of the repository one small
request through every step. The text (for ``IMAGE`` inputs, a one-pixel image) differs on every
call, so that the response cache cannot answer for a broken pipeline. :class:`HealthEndpoint` serves
the same check at ``/healthz``
(200 or 503, one line per ensemble) for a Kubernetes readiness probe, and ``/livez`` for the
liveness probe (200 while tritonserver runs).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from tritongen.contract import IMAGE, carried_by_text_requests
from tritongen.errors import RepositoryError

__all__ = [
    "Ensemble",
    "EnsembleProbe",
    "HealthEndpoint",
    "check",
    "deep_check",
    "ensembles_of",
    "find_ensembles",
    "healthy",
    "probe_payload",
]

_counter = itertools.count()


@dataclass(frozen=True)
class EnsembleProbe:
    """The outcome of one ensemble's probe; ``line`` is how the command and endpoint show it."""

    name: str
    ok: bool
    seconds: float
    detail: str = ""

    @property
    def line(self) -> str:
        """``ok   name (12 ms)`` or ``FAIL name: why``."""
        if self.ok:
            return f"ok   {self.name} ({self.seconds * 1000:.0f} ms)"
        return f"FAIL {self.name}: {self.detail}"


@dataclass(frozen=True)
class Ensemble:
    """An ensemble to probe: its name and the shape of a one-row request for each string input."""

    name: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape of a one-row request)


def ensembles_of(repository: Path) -> list[Ensemble]:
    """The ensembles of a repository with the shape of a one-row request for each string input."""
    from tritongen.configs.parser import read_config

    found = []
    for path in sorted(Path(repository).glob("*/config.pbtxt")):
        try:
            config = read_config(path)
        except RepositoryError:
            continue  # not ours to judge here: the server's own readiness reports it
        if config.platform != "ensemble":
            continue
        # One row: the batch axis (or, for whole requests, the first dim) is 1, as is every free dim.
        inputs = tuple(
            (i.name, (1, *(1 if d < 0 else d for d in i.dims)))
            for i in config.inputs
            if carried_by_text_requests(i.name, i.optional)
        )
        found.append(Ensemble(config.name or path.parent.name, inputs))
    return found


def probe_payload(name: str, text: str) -> str:
    """What a probe sends in input ``name``: ``text``, or for ``IMAGE`` a one-pixel image coloured by it.

    The image is a plain-text PPM: Pillow reads it, and it travels as text through the JSON API too.
    """
    if name != IMAGE:
        return text
    seed = sum(text.encode()) * 2654435761
    return f"P3\n1 1\n255\n{seed % 256} {(seed >> 8) % 256} {(seed >> 16) % 256}\n"


def _probe(client: object, ensemble: Ensemble, timeout: float) -> EnsembleProbe:
    import tritonclient.http as httpclient

    call, now = next(_counter), time.time_ns()
    tensors = []
    for name, shape in ensemble.inputs:
        payload = probe_payload(name, f"health check {call} {now}")
        tensor = httpclient.InferInput(name, list(shape), "BYTES")
        tensor.set_data_from_numpy(np.full(shape, payload.encode(), dtype=np.object_))
        tensors.append(tensor)
    start = time.monotonic()
    try:
        client.infer(ensemble.name, tensors, timeout=int(timeout * 1e6))  # type: ignore[attr-defined]
    except Exception as exc:  # InferenceServerException, timeouts and refused connections alike
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return EnsembleProbe(ensemble.name, False, time.monotonic() - start, message[:300])
    return EnsembleProbe(ensemble.name, True, time.monotonic() - start)


def _served_ensembles(client: object, headers: dict[str, str] | None = None) -> list[Ensemble]:
    """The ensembles the server has loaded, from its repository API (for remote repositories).

    That API is restricted to the admin key (:mod:`tritongen.serve.admin`): ``headers`` carry it.
    """
    found = []
    for row in client.get_model_repository_index(headers=headers):  # type: ignore[attr-defined]
        config = client.get_model_config(row["name"])  # type: ignore[attr-defined]
        if config.get("platform") != "ensemble":
            continue
        batch = (1,) if int(config.get("max_batch_size", 0)) > 0 else ()
        inputs = tuple(
            (i["name"], batch + tuple(1 if int(d) < 0 else int(d) for d in i.get("dims", [])))
            for i in config["input"]
            if carried_by_text_requests(i["name"], bool(i.get("optional")))
        )
        found.append(Ensemble(config["name"], inputs))
    return found


def find_ensembles(
    repository: Path | str, url: str, *, timeout: float = 10.0, headers: dict[str, str] | None = None
) -> list[Ensemble]:
    """The ensembles to probe: read from a local repository, else asked of the server at ``url``.

    A local repository is the better source: an ensemble that Triton has lost still counts there.
    Ask the server once, while everything is loaded, for an ``s3://`` repository.
    """
    if Path(repository).is_dir() and "://" not in str(repository):
        return ensembles_of(Path(repository))
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    try:
        return _served_ensembles(client, headers)
    finally:
        client.close()


def check(url: str, ensembles: Sequence[Ensemble], *, timeout: float = 10.0) -> list[EnsembleProbe]:
    """Probe each ensemble served at ``url`` (HTTP ``host:port``) with one real inference.

    All pass: the deployment answers. No ensemble gives an empty list, which
    :func:`healthy` counts as not ready.
    """
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    try:
        return [_probe(client, ensemble, timeout) for ensemble in ensembles]
    finally:
        client.close()


def deep_check(
    repository: Path | str, url: str, *, timeout: float = 10.0, headers: dict[str, str] | None = None
) -> list[EnsembleProbe]:
    """:func:`find_ensembles` then :func:`check`; a server that cannot list them is one failed probe."""
    try:
        ensembles = find_ensembles(repository, url, timeout=timeout, headers=headers)
    except Exception as exc:  # InferenceServerException and transport errors alike
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [EnsembleProbe(str(repository), False, 0.0, message[:300])]
    return check(url, ensembles, timeout=timeout)


def healthy(probes: Sequence[EnsembleProbe]) -> bool:
    """True when there is at least one ensemble and every probe passed."""
    return bool(probes) and all(p.ok for p in probes)


class HealthEndpoint:
    """A small HTTP server in a daemon thread: ``/healthz`` (deep check) and ``/livez``.

    ``probe()`` runs the deep check and ``alive()`` says whether tritonserver still runs.
    Checks are serialised, so a burst of probes does not become a burst of inferences.
    """

    def __init__(
        self,
        host: str,
        port: int,
        probe: Callable[[], list[EnsembleProbe]],
        alive: Callable[[], bool],
    ) -> None:
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/livez":
                    ok, body = alive(), ""
                elif path in ("/healthz", "/readyz"):
                    with lock:
                        probes = probe() if alive() else []
                    ok = healthy(probes)
                    body = "\n".join(p.line for p in probes) or "no ensemble answered"
                else:
                    self.send_error(404)
                    return
                data = (("ok" if ok else "not ready") + ("\n" + body if body else "") + "\n").encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass  # a probe every few seconds would flood serve's output

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="tritongen-health", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful when 0 was asked for)."""
        return int(self._server.server_address[1])

    def start(self) -> HealthEndpoint:
        """Start answering in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering and release the port."""
        self._server.shutdown()
        self._server.server_close()
