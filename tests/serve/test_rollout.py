"""Roll-out and rollback under load, the canary, and the admin key, against the real `tritongen serve`.

Version 1 of `cls` is built from one tiny checkpoint and served; version 2, from a checkpoint with
other weights, is built while it serves. Sixteen client threads (eight gRPC, eight HTTP) keep
requests in flight through a roll-out and a rollback (`python -m tritongen rollout|rollback`, which
read the key file serve wrote). perf_analyzer cannot say which version answered each request,
hence the threads; the test prints p99 latency during the switches and outside them. The tests of what
a rollback leaves behind (the repository's configs, the ensemble's metadata, a stub's recovery) run after
those switches, whatever order they run in: the switches are a module fixture.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.deployment import ROOT, ServeProcess, deployment_pids
from tritongen.builder.pipeline import build_repository
from tritongen.buildspec import BuildSpec
from tritongen.cli import main
from tritongen.repository.canary import CANARY_FILE
from tritongen.serve.admin import default_key_file, grpc_headers, http_headers
from tritongen.serve.server import server_environment
from tritongen.serve.supervisor import STUB_NAME

pytestmark = pytest.mark.e2e

NAME = "cls"
CONCURRENCY = 16
STEADY = 1500  # requests outside the switches: before, between and after them
TEXTS = [f"request text number {i}, with a few words" for i in range(8)]
RECOVERY_BOUND_S = 120  # a guard against a hang, not a measure: a stub's model reloads in seconds


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_factory, builds):
    # Version 1 is the default tiny classifier build, copied: version 2 is built into this repository.
    return builds.copy(builds(tiny_factory("bert"), NAME), into=tmp_path_factory.mktemp("rollout") / "model_repository")


@pytest.fixture(scope="module")
def served(repository, tiny_factory, tmp_path_factory):
    # A short grace: Triton 24.10 never finishes unloading a version whose stub was killed (the last test
    # here kills one), so its shutdown would wait out the whole grace period.
    with ServeProcess(repository, tmp_path_factory.mktemp("serve") / "serve.log", grace_period=3) as serve:
        # Version 2 (other weights) appears while version 1 serves, as it does in production.
        build_repository(BuildSpec(model=str(tiny_factory("bert", seed=1)), name=NAME, repository=repository))
        yield serve
    assert deployment_pids(repository) == []


def _probabilities(url: str) -> dict[str, tuple[float, ...]]:
    client = grpcclient.InferenceServerClient(url)
    try:
        return {text: _infer(client, text) for text in TEXTS}
    finally:
        client.close()


def _infer(client, text: str) -> tuple[float, ...]:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    tensor = module.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_))
    return tuple(np.round(client.infer(NAME, [tensor]).as_numpy("PROBABILITIES")[0], 5).tolist())


def _command(serve: ServeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tritongen", *args, "--repository", str(serve.repository)]
    cmd += ["--http-port", str(serve.http_port), "--grpc-port", str(serve.grpc_port)]
    return subprocess.run(cmd, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=600)


@dataclass
class _Outcome:
    sent: float
    done: float
    text: str
    answer: tuple[float, ...] | None
    error: str | None


class _Load:
    """``CONCURRENCY`` threads, each one request at a time (half gRPC, half HTTP), every outcome kept."""

    def __init__(self, serve: ServeProcess) -> None:
        self.serve = serve
        self.outcomes: list[_Outcome] = []
        self.halt = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CONCURRENCY)]

    def _run(self, index: int) -> None:
        if index % 2:
            client = httpclient.InferenceServerClient(self.serve.http_url, network_timeout=120)
        else:
            client = grpcclient.InferenceServerClient(self.serve.grpc_url)
        n = index
        while not self.halt.is_set():
            text = TEXTS[n % len(TEXTS)]
            n += 1
            sent = time.monotonic()
            try:
                answer, error = _infer(client, text), None
            except Exception as exc:
                answer, error = None, str(exc)[:300]
            self.outcomes.append(_Outcome(sent, time.monotonic(), text, answer, error))
        client.close()

    def __enter__(self) -> _Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while len(self.outcomes) < count:
            assert time.monotonic() < deadline, "the load sent too few requests"
            time.sleep(0.05)


def _p99_ms(outcomes: list[_Outcome]) -> float:
    return float(np.percentile([(o.done - o.sent) * 1000 for o in outcomes], 99)) if outcomes else float("nan")


def test_restricted_apis_refuse_an_unload_without_the_key_while_inference_stays_open(served, repository):
    key_file = default_key_file(repository)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    http = httpclient.InferenceServerClient(served.http_url)
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        with pytest.raises(Exception, match="restricted"):
            http.unload_model(NAME)
        with pytest.raises(Exception, match="restricted"):
            grpc.unload_model(NAME)
        with pytest.raises(Exception, match="restricted"):
            http.unload_model(NAME, headers={"tritongen-admin-key": "wrong"})
        assert http.is_model_ready(NAME) and grpc.is_model_ready(NAME)
        assert _probabilities(served.grpc_url)  # inference answers without a key
        names = {row["name"] for row in http.get_model_repository_index(headers=http_headers(key))}
        assert NAME in names
        assert grpc.get_model_repository_index(headers=grpc_headers(key)).models
    finally:
        http.close()
        grpc.close()
    assert key not in served.output()


@dataclass
class _Switches:
    """A roll-out to version 2 and a rollback to 1 under load: each version's answers and every outcome."""

    v1: dict[str, tuple[float, ...]]
    v2: dict[str, tuple[float, ...]]
    out: subprocess.CompletedProcess[str]
    back: subprocess.CompletedProcess[str]
    outcomes: list[_Outcome]
    started: float
    rolled_out: float
    back_started: float
    rolled_back: float


@pytest.fixture(scope="module")
def switched(served) -> _Switches:
    """The module's roll-out and rollback, done once: the tests of what a rollback leaves find version 1 serving."""
    v1 = _probabilities(served.grpc_url)
    with _Load(served) as load:
        load.wait_for(STEADY)
        started = time.monotonic()
        out = _command(served, "rollout", "--name", NAME)
        rolled_out = time.monotonic()
        assert out.returncode == 0, out.stdout + out.stderr
        load.wait_for(len(load.outcomes) + STEADY)
        v2 = _probabilities(served.grpc_url)
        back_started = time.monotonic()
        back = _command(served, "rollback", "--name", NAME)
        rolled_back = time.monotonic()
        assert back.returncode == 0, back.stdout + back.stderr
        load.wait_for(len(load.outcomes) + STEADY)
    return _Switches(v1, v2, out, back, list(load.outcomes), started, rolled_out, back_started, rolled_back)


def test_rollout_and_rollback_under_load_fail_no_request_and_switch_the_outputs(switched):
    s = switched
    v1, v2, outcomes = s.v1, s.v2, s.outcomes
    failures = [o for o in outcomes if o.error]
    assert failures == [], failures[:5]
    assert all(v1[t] != v2[t] for t in TEXTS), (v1, v2)
    assert "now serves version 2 (was 1)" in s.out.stdout and "now serves version 1 (was 2)" in s.back.stdout
    for o in outcomes:
        if o.done < s.started:
            assert o.answer == v1[o.text], o
        elif s.rolled_out < o.sent and o.done < s.back_started:
            assert o.answer == v2[o.text], o
        elif o.sent > s.rolled_back:
            assert o.answer == v1[o.text], o
        else:  # in flight during a switch: one version or the other, never a mix
            assert o.answer in (v1[o.text], v2[o.text]), o

    def switching(o: _Outcome) -> bool:
        return any(
            o.done >= begin and o.sent <= end
            for begin, end in ((s.started, s.rolled_out), (s.back_started, s.rolled_back))
        )

    steady = [o for o in outcomes if not switching(o)]
    during = [o for o in outcomes if switching(o)]
    saw_new = sum(o.answer == v2[o.text] for o in outcomes)
    print(
        f"\n{len(outcomes)} requests at concurrency {CONCURRENCY}, 0 failed, {saw_new} answered by version 2; "
        f"rollout {s.rolled_out - s.started:.1f}s, rollback {s.rolled_back - s.back_started:.1f}s; "
        f"p99 steady {_p99_ms(steady):.0f} ms ({len(steady)} requests), "
        f"during the switches {_p99_ms(during):.0f} ms ({len(during)} requests)"
    )


def test_failed_canary_leaves_the_old_version_serving(served, repository):
    before = _probabilities(served.grpc_url)
    record = repository / NAME / "2" / CANARY_FILE
    original = record.read_text()
    data = json.loads(original)
    data["values"][0][0] += 0.5
    record.write_text(json.dumps(data))
    try:
        result = _command(served, "rollout", "--name", NAME, "--version", "2")
    finally:
        record.write_text(original)
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(errors) == 1 and f"canary of `{NAME}` version 2 failed" in errors[0], result.stderr
    assert "version 1 still serves" in errors[0]
    assert _probabilities(served.grpc_url) == before
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        key = default_key_file(repository).read_text().strip()
        ready = {
            (row["name"], row["version"])
            for row in client.get_model_repository_index(headers=http_headers(key))
            if row.get("state") == "READY"
        }
    finally:
        client.close()
    assert (f"{NAME}_model", "2") not in ready and (f"{NAME}_model", "1") in ready


def test_rollout_is_refused_without_the_key(served, tmp_path):
    wrong = tmp_path / "key"
    wrong.write_text("not-the-key\n")
    result = _command(served, "rollout", "--name", NAME, "--admin-key-file", str(wrong))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "restricted" in result.stderr
    assert not os.environ.get("TRITONGEN_ADMIN_KEY")  # the tests rely on the key file serve wrote


def _ready(serve: ServeProcess, repository) -> set[tuple[str, str]]:
    """(model, version) of every READY version, from the repository index (the admin key serve wrote)."""
    client = httpclient.InferenceServerClient(serve.http_url)
    try:
        key = default_key_file(repository).read_text().strip()
        index = client.get_model_repository_index(headers=http_headers(key))
    finally:
        client.close()
    return {(row["name"], row["version"]) for row in index if row.get("state") == "READY"}


def test_package_ships_only_the_version_a_rollback_left_serving(switched, repository, tmp_path, capsys):
    out = tmp_path / "pkg"
    assert main(["package", NAME, "--repository", str(repository), "--output", str(out)]) == 0
    for folder in sorted((out / "model_repository").iterdir()):
        assert sorted(p.name for p in folder.iterdir()) == ["1", "config.pbtxt"], folder
    printed = capsys.readouterr().out
    assert f"Packaged version 1 of `{NAME}`" in printed, printed
    # The rollback pinned the configs on disk: a restart, or the image, serves version 1 whatever else is built.
    ensemble = (repository / NAME / "config.pbtxt").read_text()
    assert "model_version: 1" in ensemble and "model_version: -1" not in ensemble


def test_ensemble_metadata_names_the_version_a_rollback_left_serving(switched, served, repository):
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        metadata = client.get_model_metadata(NAME)
    finally:
        client.close()
    assert metadata["versions"] == ["1"], metadata
    assert (NAME, "1") in _ready(served, repository) and (NAME, "2") not in _ready(served, repository)


def _stub_pid(repository, model: str, version: int) -> int:
    """The pid of the stub running ``version`` of ``model`` (its model file is the stub's first argument)."""
    wanted = f"/{model}/{version}/model.py"
    for pid in deployment_pids(repository):
        argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
        if argv[0].endswith(STUB_NAME) and argv[1].endswith(wanted) and argv[8] != model:
            return pid
    raise AssertionError(f"no stub runs {model} version {version}")


# Last in the module: a killed stub's version never finishes unloading in Triton 24.10.
def test_supervisor_reloads_only_the_serving_version_when_a_stub_dies_after_a_rollback(switched, served, repository):
    model = f"{NAME}_tokenizer"
    assert {v for m, v in _ready(served, repository) if m == model} == {"1"}
    os.kill(_stub_pid(served.repository, model, 1), signal.SIGKILL)
    deadline = time.monotonic() + RECOVERY_BOUND_S
    while f"reloaded `{model}`" not in served.output() or served.health() != 200:
        assert time.monotonic() < deadline, served.output()[-3000:]
        time.sleep(0.2)
    assert {v for m, v in _ready(served, repository) if m == model} == {"1"}, served.output()[-3000:]
    assert _probabilities(served.grpc_url) == switched.v1
