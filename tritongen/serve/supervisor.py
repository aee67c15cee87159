"""Bring Python steps back when their stub process dies.

Triton's Python backend runs each model instance in a ``triton_python_backend_stub`` child
of tritonserver. When a stub dies (OOM killer, segfault in a library, ``kill -9``) the
backend answers every later request with "Stub process ... is not healthy" and never
restarts it, while ``/v2/health/ready`` still says 200. :class:`Supervisor` watches the stubs
in ``/proc`` and, when one dies, reloads its model through the repository API: an unload
and a load, since a load of an unchanged, loaded model is a no-op in Triton 2.51. The load
passes the configuration the server was using, with the versions that were loaded (READY)
as its policy, so that a roll-out's pins stay and nothing it unloaded comes back. Triton then
reloads the ensembles that use the model by itself.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STUB_NAME", "Stub", "Supervisor", "stubs_of"]

STUB_NAME = "triton_python_backend_stub"


@dataclass(frozen=True)
class Stub:
    """One live stub: its pid, the model instance it runs (``tiny_tokenizer_0_0``) and the model."""

    pid: int
    instance: str
    model: str


def _stat(pid: int | str) -> tuple[int, str] | None:
    """``(ppid, state)`` of a process, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0]


def _stub_of(pid: str) -> Stub | None:
    """The stub a process is, from its command line, or None.

    The stub's arguments are the model file (``<repository>/<model>/<version>/model.py``), the
    shared-memory region and sizes, the parent pid, the backend folder, a message size and the
    instance name; the model is read from the path, so instance names need no parsing.
    """
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if len(argv) < 9 or not argv[0].endswith(STUB_NAME):
        return None
    stub = Stub(pid=int(pid), instance=argv[8], model=Path(argv[1]).parent.parent.name)
    # While a model loads, the backend also runs a stub named after the model itself (it checks the
    # config) and ends it on purpose; taking its end for a death made every model load a "crash".
    return None if stub.instance == stub.model else stub


def stubs_of(server_pid: int) -> dict[str, Stub]:
    """The live (not zombie) stubs that are children of ``server_pid``, by instance name."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(entry.name)
        if stat is None or stat[0] != server_pid or stat[1] in ("Z", "X"):
            continue
        stub = _stub_of(entry.name)
        if stub is not None:
            found[stub.instance] = stub
    return found


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] not in ("Z", "X")


class Supervisor(threading.Thread):
    """A daemon thread that reloads the model of any stub of ``server_pid`` that dies.

    ``client`` is a tritonclient ``InferenceServerClient`` of the server (HTTP; it is used from
    this thread only). ``log`` receives one line per recovery or failed attempt. A model the
    repository no longer lists as READY was unloaded on purpose and is left alone.
    """

    def __init__(
        self, server_pid: int, client: object, *, interval: float = 0.5, log: Callable[[str], None] = print
    ) -> None:
        super().__init__(name="tritongen-supervisor", daemon=True)
        self.server_pid = server_pid
        self.client = client
        self.interval = interval
        self.log = log
        self.recoveries: list[tuple[str, float]] = []  # (model, seconds from detection to loaded)
        self._known: dict[str, Stub] = stubs_of(server_pid)
        self._pending: dict[str, tuple[int, float]] = {}  # model -> (failed attempts, monotonic time of the next)
        self._configs: dict[str, str] = {}  # model -> the config of its first attempt, for retries once unloaded
        self._halt = threading.Event()

    def stop(self) -> None:
        """Ask the thread to finish after its current step; ``join`` waits for it."""
        self._halt.set()

    def run(self) -> None:
        """Poll until stopped; a step that fails is logged and tried again on the next poll.

        The client is closed on the way out: Triton's shutdown waits for every open HTTP connection, so a
        keep-alive one left by a reload would hold an idle server for its whole grace period.
        """
        try:
            while not self._halt.wait(self.interval):
                try:
                    self.check()
                except Exception as exc:  # never let the watcher die: log and try again
                    self.log(f"supervisor: check failed: {type(exc).__name__}: {exc}")
        finally:
            close = getattr(self.client, "close", None)
            if callable(close):
                close()

    def check(self) -> list[str]:
        """One poll: reload the models whose stubs died since the last one; return them."""
        if not _alive(self.server_pid):
            return []
        current = stubs_of(self.server_pid)
        # A stub replaced under the same instance name (a reload by someone else) is not a death.
        dead = [stub for name, stub in self._known.items() if name not in current and not _alive(stub.pid)]
        models = {stub.model for stub in dead}
        reloaded = []
        # Models whose reload failed earlier are ours to retry even though they are no longer READY,
        # with a doubling pause (up to a minute) so that a model that cannot load does not flood the log.
        now = time.monotonic()
        due = {m for m, (_, at) in self._pending.items() if at <= now}
        for model in sorted({m for m in models if self._still_wanted(m)} | due):
            if self._halt.is_set():
                break
            instances = ", ".join(f"{s.instance} (pid {s.pid})" for s in dead if s.model == model)
            if self._reload(model, f"stub {instances} died" if instances else "retrying"):
                self._pending.pop(model, None)
                reloaded.append(model)
            else:
                attempts = self._pending.get(model, (0, now))[0] + 1
                self._pending[model] = (attempts, time.monotonic() + min(2.0**attempts, 60.0))
        self._known = stubs_of(self.server_pid) if reloaded or dead else current
        return reloaded

    def _still_wanted(self, model: str) -> bool:
        index: Iterable[dict] = self.client.get_model_repository_index()  # type: ignore[attr-defined]
        return any(row.get("name") == model and row.get("state") == "READY" for row in index)

    def _serving_config(self, model: str) -> str:
        """The config ``model`` serves with, its version policy replaced by the versions loaded now (JSON).

        Triton 2.51 keeps in each loaded version the config it was created with, and a load that changes
        only the version policy keeps the versions it still wants as they are: after a roll-out and a
        rollback, the config the server reports still says the roll-out's ``specific [old, new]``, and
        reloading with it would bring the version the rollback unloaded back.
        """
        config = self.client.get_model_config(model)  # type: ignore[attr-defined]
        index: Iterable[dict] = self.client.get_model_repository_index()  # type: ignore[attr-defined]
        ready = {
            int(row["version"])
            for row in index
            if row.get("name") == model and row.get("state") == "READY" and row.get("version")
        }
        if ready:
            config["version_policy"] = {"specific": {"versions": sorted(ready)}}
        return json.dumps(config)

    def _reload(self, model: str, cause: str) -> bool:
        start = time.monotonic()
        try:
            if model not in self._configs:  # once unloaded, a model has no config to read back
                self._configs[model] = self._serving_config(model)
            config = self._configs[model]
            self.client.unload_model(model)  # type: ignore[attr-defined]
            self.client.load_model(model, config=config)  # type: ignore[attr-defined]
        except Exception as exc:  # tritonclient's InferenceServerException and transport errors
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.log(f"supervisor: {cause}; reloading `{model}` failed: {message}")
            return False
        took = time.monotonic() - start
        self._configs.pop(model, None)
        self.recoveries.append((model, took))
        self.log(f"supervisor: {cause}; reloaded `{model}` in {took:.1f}s")
        return True
