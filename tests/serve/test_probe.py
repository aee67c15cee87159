"""The image's deep readiness probe, run by a bare ``python3`` (stdlib only) against a real server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tritongen import contract
from tritongen.deploy import probe
from tritongen.serve.server import running_server
from tritongen.serve.supervisor import stubs_of

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"  # not the venv's: nothing of ours installed


@pytest.mark.e2e
def test_probe_passes_an_answering_ensemble_and_fails_a_missing_one(tiny_factory, builds, tmp_path):
    # Its own server: the test kills a stub.
    repo = builds.repository(builds(tiny_factory("bert"), "cls"), into=tmp_path / "repo")
    image = tmp_path / "opt"  # as the image holds it: the probe and the contract's module, nothing else of ours
    image.mkdir()
    for module in (Path(probe.__file__), Path(contract.__file__)):
        shutil.copyfile(module, image / module.name)
    script = image / "probe.py"
    with running_server(repo) as server:
        url = f"http://{server.http_url}"
        ok = subprocess.run([PYTHON, str(script), "--url", url, "cls"], capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert ok.stdout.strip() == "OK   cls"
        bad = subprocess.run(
            [PYTHON, str(script), "--url", url, "cls", "nothing"], capture_output=True, text=True, timeout=60
        )
        # A dead tokenizer stub (no supervisor here): Triton still says ready, the probe does not.
        stub = next(s for s in stubs_of(server.process.pid).values() if s.model == "cls_tokenizer")
        os.kill(stub.pid, signal.SIGKILL)
        time.sleep(1)
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=10) as response:
            assert response.status == 200
        dead = subprocess.run([PYTHON, str(script), "--url", url, "cls"], capture_output=True, text=True, timeout=60)
        assert dead.returncode == 1 and dead.stdout.startswith("FAIL cls: HTTP"), dead.stdout
    assert bad.returncode == 1
    assert "OK   cls" in bad.stdout and "FAIL nothing: HTTP 404" in bad.stdout
    down = subprocess.run([PYTHON, str(script), "--url", url, "cls"], capture_output=True, text=True, timeout=60)
    assert down.returncode == 1 and down.stdout.startswith("FAIL cls: URLError"), down.stdout
