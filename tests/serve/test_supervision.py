"""The supervisor and the deep health check without a server: fake stubs, a fake repository API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tritongen.serve.health import EnsembleProbe, ensembles_of, healthy
from tritongen.serve.supervisor import STUB_NAME, Stub, Supervisor, stubs_of

_ENSEMBLE = """
name: "demo"
platform: "ensemble"
max_batch_size: 8
input [{ name: "QUESTION", data_type: TYPE_STRING, dims: [1] }, { name: "CONTEXT", data_type: TYPE_STRING, dims: [-1] }]
output [{ name: "ANSWER", data_type: TYPE_STRING, dims: [1] }]
ensemble_scheduling { step [{ model_name: "demo_tokenizer", model_version: -1 }] }
"""


class _FakeRepositoryAPI:
    """Records unload/load calls and the configs loaded; ``failures`` loads fail first.

    ``served`` is the version policy the server reports; ``unloaded`` versions are listed as UNAVAILABLE.
    """

    def __init__(self, models: list[str], failures: int = 0, served=(1,), unloaded=()) -> None:
        self.models, self.failures, self.calls, self.loaded = models, failures, [], []
        self.served, self.unloaded = list(served), list(unloaded)

    def get_model_repository_index(self) -> list[dict]:
        ready = [{"name": m, "version": "1", "state": "READY"} for m in self.models]
        return ready + [
            {"name": m, "version": str(v), "state": "UNAVAILABLE"} for m in self.models for v in self.unloaded
        ]

    def unload_model(self, name: str) -> None:
        self.calls.append(("unload", name))

    def get_model_config(self, name: str) -> dict:
        return {"name": name, "version_policy": {"specific": {"versions": self.served}}}

    def load_model(self, name: str, config: str | None = None) -> None:
        assert config is None or json.loads(config)["name"] == name  # reloaded with the config it was served with
        self.calls.append(("load", name))
        self.loaded.append(json.loads(config) if config else None)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("load failed")


@pytest.fixture
def fake_stub(tmp_path):
    """A child of this process whose command line is a Python stub's, for model `demo_tokenizer`."""
    model = tmp_path / "repo" / "demo_tokenizer" / "1" / "model.py"
    model.parent.mkdir(parents=True)
    model.write_text("import time\ntime.sleep(600)\n")
    args = ["shm_region", "1048576", "1048576", "1", "/backends/python", "336", "demo_tokenizer_0_0", "DEFAULT"]
    # `exec -a` names argv[0] as the stub is named; python runs model.py (argv[1], as for a real stub).
    command = ["bash", "-c", 'exec -a "$0" "$@"', str(tmp_path / STUB_NAME), sys.executable, str(model), *args]
    process = subprocess.Popen(command)
    yield process
    process.kill()
    process.wait()


def _wait_for_stub(pid: int) -> None:
    deadline = time.monotonic() + 30
    while "demo_tokenizer_0_0" not in stubs_of(pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL, and return once it has exited; WNOWAIT leaves it a zombie, as tritonserver leaves a stub."""
    process.kill()
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)


def test_stubs_of_finds_instance_and_model_when_a_stub_runs(fake_stub):
    _wait_for_stub(os.getpid())
    stub = stubs_of(os.getpid())["demo_tokenizer_0_0"]
    assert (stub.pid, stub.model) == (fake_stub.pid, "demo_tokenizer")


def test_supervisor_reloads_the_model_when_its_stub_dies(fake_stub):
    _wait_for_stub(os.getpid())
    api, lines = _FakeRepositoryAPI(["demo", "demo_tokenizer"]), []
    supervisor = Supervisor(os.getpid(), api, log=lines.append)
    assert supervisor.check() == []
    _kill(fake_stub)
    assert supervisor.check() == ["demo_tokenizer"]
    assert api.calls == [("unload", "demo_tokenizer"), ("load", "demo_tokenizer")]
    assert len(lines) == 1 and "demo_tokenizer_0_0" in lines[0] and "reloaded `demo_tokenizer`" in lines[0]
    assert supervisor.check() == []  # one recovery per death


def test_supervisor_reloads_only_the_loaded_versions_when_the_served_config_names_more(fake_stub):
    """After a roll-out to 2 and a rollback to 1, Triton still reports the roll-out's `specific [1, 2]` policy."""
    _wait_for_stub(os.getpid())
    api = _FakeRepositoryAPI(["demo_tokenizer"], served=(1, 2), unloaded=(2,))
    supervisor = Supervisor(os.getpid(), api, log=lambda line: None)
    _kill(fake_stub)
    assert supervisor.check() == ["demo_tokenizer"]
    assert api.loaded == [{"name": "demo_tokenizer", "version_policy": {"specific": {"versions": [1]}}}]


def test_supervisor_retries_when_a_reload_fails(fake_stub):
    _wait_for_stub(os.getpid())
    api, lines = _FakeRepositoryAPI(["demo_tokenizer"], failures=1), []
    supervisor = Supervisor(os.getpid(), api, log=lines.append)
    _kill(fake_stub)
    assert supervisor.check() == []
    api.models = []  # the failed reload left it unloaded; it is still ours to bring back
    assert supervisor.check() == []  # not before its pause
    deadline = time.monotonic() + 30
    while (reloaded := supervisor.check()) == []:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert reloaded == ["demo_tokenizer"]
    assert "failed: load failed" in lines[0] and "reloaded" in lines[1]


def test_supervisor_leaves_a_model_alone_when_it_was_unloaded_on_purpose(fake_stub):
    _wait_for_stub(os.getpid())
    api = _FakeRepositoryAPI([])
    supervisor = Supervisor(os.getpid(), api, log=lambda line: None)
    _kill(fake_stub)
    assert supervisor.check() == [] and api.calls == []


def test_ensembles_of_gives_one_row_shapes_when_the_repository_has_an_ensemble(tmp_path: Path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "config.pbtxt").write_text(_ENSEMBLE)
    (tmp_path / "demo_tokenizer").mkdir()
    (tmp_path / "demo_tokenizer" / "config.pbtxt").write_text('name: "demo_tokenizer"\nbackend: "python"\n')
    (only,) = ensembles_of(tmp_path)
    assert only.name == "demo"
    assert only.inputs == (("QUESTION", (1, 1)), ("CONTEXT", (1, 1)))


def test_healthy_is_false_when_there_is_no_ensemble_or_one_fails():
    good, bad = EnsembleProbe("a", True, 0.01), EnsembleProbe("b", False, 0.02, "Stub process 'x' is not healthy.")
    assert healthy([good]) and not healthy([]) and not healthy([good, bad])
    assert bad.line == "FAIL b: Stub process 'x' is not healthy." and good.line == "ok   a (10 ms)"


class _ClosingClient:
    """A repository API whose every call fails, and which records being closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __getattr__(self, name: str):
        def fail(*args, **kwargs):
            raise ConnectionError("Triton is gone")

        return fail

    def close(self) -> None:
        self.closed.set()


def test_supervisor_logs_a_failed_check_keeps_watching_and_closes_its_client_when_stopped():
    """The watcher never dies of a check, and closes its client on the way out (Triton's shutdown would wait for
    an open keep-alive connection)."""
    client, lines = _ClosingClient(), []
    supervisor = Supervisor(os.getpid(), client, interval=0.01, log=lines.append)
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process, as a stub that died and was collected
    supervisor._known = {"gone_0_0": Stub(pid=gone.pid, instance="gone_0_0", model="gone")}
    supervisor.start()
    deadline = time.monotonic() + 30
    while not any("check failed" in line for line in lines):
        assert time.monotonic() < deadline, lines
        time.sleep(0.01)
    assert supervisor.is_alive() and not client.closed.is_set()
    supervisor.stop()
    supervisor.join(timeout=30)
    assert client.closed.is_set() and not supervisor.is_alive()
