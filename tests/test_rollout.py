"""Roll-out and rollback under load, the canary, and the admin key, against the real `tritongen serve`.

Version 1 of `cls` is built from one tiny checkpoint and served; version 2, from a checkpoint with
other weights, is built while it serves. Sixteen client threads (eight gRPC, eight HTTP) keep
requests in flight through a roll-out and a rollback (`python -m tritongen rollout|rollback`, which
read the key file serve wrote). perf_analyzer cannot say which version answered each request,
hence the threads; the test prints p99 latency during the switches and outside them.
"""

from __future__ import annotations

import json
import os
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
from tritongen.admin import default_key_file, grpc_headers, http_headers
from tritongen.build import build_repository
from tritongen.canary import CANARY_FILE
from tritongen.server import server_environment
from tritongen.spec import BuildSpec

pytestmark = pytest.mark.e2e

NAME = "cls"
CONCURRENCY = 16
STEADY = 1500  # requests outside the switches: before, between and after them
TEXTS = [f"request text number {i}, with a few words" for i in range(8)]


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_factory, builds):
    # Version 1 is the default tiny classifier build, copied: version 2 is built into this repository.
    return builds.copy(builds(tiny_factory("bert"), NAME), into=tmp_path_factory.mktemp("rollout") / "model_repository")


@pytest.fixture(scope="module")
def served(repository, tiny_factory, tmp_path_factory):
    with ServeProcess(repository, tmp_path_factory.mktemp("serve") / "serve.log") as serve:
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


def test_rollout_and_rollback_under_load_fail_no_request_and_switch_the_outputs(served):
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
    outcomes = list(load.outcomes)
    failures = [o for o in outcomes if o.error]
    assert failures == [], failures[:5]
    assert all(v1[t] != v2[t] for t in TEXTS), (v1, v2)
    assert "now serves version 2 (was 1)" in out.stdout and "now serves version 1 (was 2)" in back.stdout
    for o in outcomes:
        if o.done < started:
            assert o.answer == v1[o.text], o
        elif rolled_out < o.sent and o.done < back_started:
            assert o.answer == v2[o.text], o
        elif o.sent > rolled_back:
            assert o.answer == v1[o.text], o
        else:  # in flight during a switch: one version or the other, never a mix
            assert o.answer in (v1[o.text], v2[o.text]), o

    def switching(o: _Outcome) -> bool:
        return any(
            o.done >= begin and o.sent <= end for begin, end in ((started, rolled_out), (back_started, rolled_back))
        )

    steady = [o for o in outcomes if not switching(o)]
    during = [o for o in outcomes if switching(o)]
    saw_new = sum(o.answer == v2[o.text] for o in outcomes)
    print(
        f"\n{len(outcomes)} requests at concurrency {CONCURRENCY}, 0 failed, {saw_new} answered by version 2; "
        f"rollout {rolled_out - started:.1f}s, rollback {rolled_back - back_started:.1f}s; "
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
