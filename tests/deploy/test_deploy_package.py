"""tritongen package: the deploy folder's files agree with TritonArgs and requirements.lock, written atomically."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tritongen import contract
from tritongen.cli import main
from tritongen.containers import CONTAINERS, DEFAULT_CONTAINER
from tritongen.deploy import PackageOptions, TritonArgs, dashboard_queries, probe, write_package
from tritongen.deploy.dashboard import DATASOURCE_UID, GPU_METRICS
from tritongen.deploy.gateway import GATEWAY_PACKAGES, GATEWAY_PORT, run_command
from tritongen.deploy.package import PROBE_PATH
from tritongen.errors import DeployError
from tritongen.gates.compat import VENVS
from tritongen.steps.helpers import STEP_PACKAGE, helper_file, write_helpers

LOCK = Path(__file__).resolve().parents[2] / "requirements.lock"
SOURCE = Path(__file__).resolve().parents[2] / "tritongen"
STEPS = ("demo", "demo_tokenizer", "demo_model", "demo_postprocess")
TRITON_MODELS = Path(__file__).resolve().parents[2] / "tritongen" / "steps"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A stand-in built repository of a text model: the four model folders of `demo`, each with a config and a
    version, and the Python steps' real sources (what the image's pip line is read from)."""
    root = tmp_path / "repo"
    for step in STEPS:
        (root / step / "1").mkdir(parents=True)
        (root / step / "config.pbtxt").write_text(f'name: "{step}"\n')
        (root / step / "1" / "payload.bin").write_bytes(b"x")
    for step, source in (("demo_tokenizer", "tokenizer.py"), ("demo_postprocess", "postprocess.py")):
        shutil.copy(TRITON_MODELS / source, root / step / "1" / "model.py")
        write_helpers(root / step / "1", ("tritongen.steps._common", "tritongen.contract", "tritongen.encoding"))
    _wire(root, STEPS[1:])
    return root


def _image_model(repo: Path) -> Path:
    """The stand-in as an image model: its tokenizer step decodes images (Pillow)."""
    shutil.copy(TRITON_MODELS / "image.py", repo / "demo_tokenizer" / "1" / "model.py")
    for step in ("demo_tokenizer", "demo_postprocess"):  # an image task's steps get no text encoding
        (repo / step / "1" / helper_file("tritongen.encoding")).unlink()
    return repo


def _on_gpu(repo: Path) -> Path:
    """The stand-in as a GPU build: the model step's instances on KIND_GPU."""
    (repo / "demo_model" / "config.pbtxt").write_text('name: "demo_model"\ninstance_group [{ kind: KIND_GPU }]\n')
    return repo


def _pip_line(dockerfile: str) -> list[str]:
    (run,) = [line for line in dockerfile.splitlines() if line.startswith("RUN pip install")]
    return [word for word in run.split()[3:] if not word.startswith("--")]


def _wire(root: Path, steps: tuple[str, ...], version: int = -1, policy: str = "") -> None:
    """The ensemble's config names its steps: the package takes the folders it wires (``version``: their pin)."""
    wired = "".join(f'step {{ model_name: "{step}" model_version: {version} }} ' for step in steps)
    (root / "demo" / "config.pbtxt").write_text(
        f'name: "demo"\nplatform: "ensemble"\n{policy}ensemble_scheduling {{ {wired}}}\n'
    )


def _second_version(root: Path) -> None:
    """Version 2 of every model folder, as a second build adds it."""
    for step in STEPS:
        (root / step / "2").mkdir()
        (root / step / "2" / "payload.bin").write_bytes(b"y")


def _pin_steps(root: Path, version: int) -> None:
    """The step configs as a roll-out leaves them: one specific version."""
    for step in STEPS[1:]:
        policy = f"version_policy {{ specific {{ versions: {version} }} }}"
        (root / step / "config.pbtxt").write_text(f'name: "{step}"\n{policy}\n')


def _versions(out: Path) -> dict[str, list[str]]:
    return {f.name: sorted(p.name for p in f.iterdir()) for f in (out / "model_repository").iterdir()}


def test_package_copies_only_the_pinned_version_when_a_rollback_pinned_the_configs(repo, tmp_path, capsys):
    _second_version(repo)
    _wire(repo, STEPS[1:], version=1, policy="version_policy { specific { versions: 1 } }\n")
    _pin_steps(repo, 1)
    out = tmp_path / "pkg"
    assert main(["package", "demo", "--repository", str(repo), "--output", str(out)]) == 0
    assert _versions(out) == {step: ["1", "config.pbtxt"] for step in STEPS}
    assert "Packaged version 1 of `demo`" in capsys.readouterr().out
    assert (out / "model_repository" / "demo_model" / "1" / "payload.bin").read_bytes() == b"x"
    assert (out / "model_repository" / "demo" / "config.pbtxt").read_text() == (
        repo / "demo" / "config.pbtxt"
    ).read_text()


def test_package_copies_only_the_newest_version_when_no_config_pins_one(repo, tmp_path, capsys):
    _second_version(repo)
    out = tmp_path / "pkg"
    assert main(["package", "demo", "--repository", str(repo), "--output", str(out)]) == 0
    assert _versions(out) == {step: ["2", "config.pbtxt"] for step in STEPS}
    assert "Packaged version 2 of `demo`" in capsys.readouterr().out


def test_package_refuses_in_one_line_when_the_models_would_serve_different_versions(repo, tmp_path, capsys):
    _second_version(repo)
    _wire(repo, STEPS[1:], version=1)  # the ensemble calls version 1, but the steps load only their newest, 2
    assert main(["package", "demo", "--repository", str(repo), "--output", str(tmp_path / "pkg")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and "does not load version 1, which `demo` calls" in errors[0], errors
    assert "roll `demo` out or back to one built version" in errors[0]
    assert not (tmp_path / "pkg").exists()
    _wire(repo, STEPS[1:])
    _pin_steps(repo, 1)  # every step pinned to 1, the ensemble itself at its newest, 2
    with pytest.raises(DeployError, match=r"serve different versions \(`demo` 2, `demo_model` 1"):
        write_package("demo", repo, tmp_path / "pkg")


def test_package_takes_the_three_folders_of_a_folded_ensemble(repo, tmp_path):
    shutil.rmtree(repo / "demo_postprocess")
    _wire(repo, ("demo_tokenizer", "demo_model"))
    out = write_package("demo", repo, tmp_path / "pkg")
    assert sorted(p.name for p in (out / "model_repository").iterdir()) == ["demo", "demo_model", "demo_tokenizer"]


def _lock_pin(package: str) -> str:
    for line in LOCK.read_text().splitlines():
        if line.lower().startswith(f"{package}=="):
            return line.split("==")[1].strip()
    raise AssertionError(f"{package} is not pinned in requirements.lock")


def test_package_writes_dockerfile_with_locked_pins_and_no_pillow_for_a_text_model(repo, tmp_path):
    out = write_package("demo", repo, tmp_path / "deploy" / "demo")
    dockerfile = (out / "Dockerfile").read_text()
    assert f"FROM nvcr.io/nvidia/tritonserver:{DEFAULT_CONTAINER}-py3" in dockerfile.splitlines()
    assert _pip_line(dockerfile) == [f"numpy=={_lock_pin('numpy')}", f"tokenizers=={_lock_pin('tokenizers')}"]
    # Ubuntu 24.04 marks its Python externally managed: the image installs into it anyway, on purpose.
    assert "--break-system-packages" in dockerfile
    # Nothing is installed when the container starts: the entry point is tritonserver itself.
    assert 'ENTRYPOINT ["tritonserver"]' in dockerfile
    cmd = json.loads(next(line for line in dockerfile.splitlines() if line.startswith("CMD "))[4:])
    assert cmd == TritonArgs().argv()
    assert "COPY model_repository /models" in dockerfile
    assert sorted(p.name for p in (out / "model_repository").iterdir()) == sorted(STEPS)
    ignore = (out / ".dockerignore").read_text().splitlines()
    assert "*" in ignore and "!model_repository" in ignore


def test_package_compose_runs_triton_args_and_scrapes_its_metrics_port_when_ports_change(repo, tmp_path):
    args = TritonArgs(http_port=9000, grpc_port=9001, metrics_port=9002, exit_timeout_secs=45)
    out = write_package("demo", repo, tmp_path / "pkg", options=PackageOptions(args=args))
    compose = yaml.safe_load((out / "compose.yaml").read_text())
    triton = compose["services"]["triton"]
    assert triton["command"] == args.argv()
    assert "--metrics-config=summary_latencies=true" in triton["command"]
    assert triton["ports"] == ["9000:9000", "9001:9001", "9002:9002"]
    assert triton["stop_grace_period"] == "55s"
    assert triton["healthcheck"]["test"] == ["CMD", "python3", PROBE_PATH, "--url", "http://127.0.0.1:9000", "demo"]
    assert f"COPY probe.py contract.py {Path(PROBE_PATH).parent}/" in (out / "Dockerfile").read_text()
    assert (out / "probe.py").read_text() == Path(probe.__file__).read_text()
    assert (out / "contract.py").read_text() == Path(contract.__file__).read_text()  # the names the probe reads
    assert "deploy" not in triton  # a CPU build reserves no GPU
    assert {"prometheus", "grafana"} <= set(compose["services"])
    scrape = yaml.safe_load((out / "prometheus" / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["static_configs"][0]["targets"] == ["triton:9002"]


def test_package_provisions_grafana_datasource_and_dashboard_when_written(repo, tmp_path):
    out = write_package("demo", repo, tmp_path / "pkg")
    grafana = out / "grafana"
    source = yaml.safe_load((grafana / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    assert source["datasources"][0]["uid"] == DATASOURCE_UID
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((grafana / "provisioning" / "dashboards" / "tritongen.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    compose = yaml.safe_load((out / "compose.yaml").read_text())
    assert "./grafana/dashboards:/var/lib/grafana/dashboards:ro" in compose["services"]["grafana"]["volumes"]
    board = json.loads((grafana / "dashboards" / "demo.json").read_text())
    titles = {p["title"] for p in board["panels"]}
    assert {"Request rate", "Failure rate", "Queue vs compute time per request", "GPU utilisation"} <= titles
    for panel in board["panels"]:
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID
    exprs = " ".join(expr for _, expr in dashboard_queries(board))
    wanted = ("nv_inference_count", "nv_inference_exec_count", "nv_inference_request_summary_us", *GPU_METRICS[:2])
    for metric in wanted:
        assert metric in exprs
    assert 'model=~"demo|demo_tokenizer|demo_model|demo_postprocess"' in exprs


def test_package_refuses_to_overwrite_when_not_forced(repo, tmp_path):
    out = write_package("demo", repo, tmp_path / "pkg")
    (out / "marker").write_text("mine")
    with pytest.raises(DeployError, match="already exists"):
        write_package("demo", repo, out)
    assert (out / "marker").is_file()
    write_package("demo", repo, out, force=True)
    assert not (out / "marker").exists() and (out / "Dockerfile").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["pkg", "repo"]  # no staging or old folders left


def test_package_leaves_nothing_when_copying_fails(repo, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(shutil, "copytree", broken)
    with pytest.raises(OSError, match="disk full"):
        write_package("demo", repo, tmp_path / "out" / "pkg")
    assert list((tmp_path / "out").iterdir()) == []


def test_package_names_missing_steps_when_not_built(repo, tmp_path):
    shutil.rmtree(repo / "demo_model")
    with pytest.raises(DeployError, match="missing demo_model"):
        write_package("demo", repo, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_package_cli_exits_2_when_output_exists(repo, tmp_path, capsys):
    out = tmp_path / "pkg"
    assert main(["package", "demo", "--repository", str(repo), "--output", str(out)]) == 0
    assert main(["package", "demo", "--repository", str(repo), "--output", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["package", "demo", "--repository", str(repo), "--output", str(out), "--force"]) == 0


# -- the optional OpenAI/TEI gateway ------------------------------------------------------------------------------


def test_package_adds_the_gateway_image_and_service_only_when_asked(repo, tmp_path):
    plain = write_package("demo", repo, tmp_path / "plain")
    assert "gateway" not in yaml.safe_load((plain / "compose.yaml").read_text())["services"]
    assert not (plain / "gateway").exists()
    args = TritonArgs(grpc_port=9001, http_port=9000)
    options = PackageOptions(args=args, image="registry.example/demo:1", gateway=True)
    out = write_package("demo", repo, tmp_path / "pkg", options=options)
    service = yaml.safe_load((out / "compose.yaml").read_text())["services"]["gateway"]
    assert service["build"] == "./gateway" and service["image"] == "registry.example/demo-gateway:1"
    assert service["command"] == ["--triton-url", "triton:9001", "--triton-http-url", "triton:9000"]
    assert service["depends_on"] == {"triton": {"condition": "service_healthy"}}
    assert service["ports"] == [f"{GATEWAY_PORT}:{GATEWAY_PORT}"]
    # compose refuses to start while the key is unset: `${VAR?message}`; an empty value means no key
    assert service["environment"]["TRITONGEN_GATEWAY_KEY"].startswith("${TRITONGEN_GATEWAY_KEY?")
    # the image reads the ensemble's folders but the model step's, and runs tritongen's own gateway source
    models = sorted(p.name for p in (out / "gateway" / "models").iterdir())
    assert models == ["demo", "demo_postprocess", "demo_tokenizer"]
    assert (out / "gateway" / "tritongen" / "gateway" / "app.py").read_text() == (
        SOURCE / "gateway" / "app.py"
    ).read_text()


def test_gateway_dockerfile_pins_what_the_lock_pins_and_runs_the_gateway_on_every_address(repo, tmp_path):
    out = write_package("demo", repo, tmp_path / "pkg", options=PackageOptions(gateway=True))
    dockerfile = (out / "gateway" / "Dockerfile").read_text()
    run = next(line for line in dockerfile.splitlines() if line.startswith("RUN pip install"))
    for package in ("tritonclient", "starlette", "uvicorn", "tokenizers", "numpy"):
        assert f'{package}{"[grpc]" if package == "tritonclient" else ""}=={_lock_pin(package)}"' in run
    entrypoint = json.loads(next(line for line in dockerfile.splitlines() if line.startswith("ENTRYPOINT "))[11:])
    cmd = json.loads(next(line for line in dockerfile.splitlines() if line.startswith("CMD "))[4:])
    assert cmd == ["--triton-url", "triton:8001", "--triton-http-url", "triton:8000"]
    assert entrypoint + cmd == run_command(cmd)
    assert entrypoint[:4] == ["python", "-m", "tritongen", "gateway"] and "0.0.0.0" in entrypoint


# Run in a fresh interpreter where a package the gateway's image does not install cannot be imported (an optional
# import then fails as it would in the image): the gateway's command line and app must still come up.
_ONLY_THE_IMAGE = """
import importlib.abc, importlib.metadata, json, re, sys
allowed, owners = set(json.loads(sys.argv[1])), importlib.metadata.packages_distributions()

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if {re.sub(r"[-_.]+", "-", d).lower() for d in owners.get(top, ["tritongen"])}.isdisjoint(allowed):
            raise ModuleNotFoundError(f"{top} is not in the gateway's image", name=top)

sys.meta_path.insert(0, Refuse())
try:
    import torch
    sys.exit("the refusal does not work")
except ModuleNotFoundError:
    pass
import uvicorn, uvloop, httptools
from tritongen.cli import _parser
from tritongen.gateway import GatewayOptions, create_app
_parser().parse_args(["gateway"])
create_app(GatewayOptions())
"""


def test_gateway_image_installs_every_package_the_gateway_imports():
    allowed = json.dumps(sorted(_installed_with(GATEWAY_PACKAGES) | {"tritongen"}))
    done = subprocess.run(
        [sys.executable, "-c", _ONLY_THE_IMAGE, allowed], capture_output=True, text=True, cwd=SOURCE.parent
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_with(packages) -> set[str]:
    """``packages`` (``name[extra]``) and everything pip installs with them, from this venv's metadata."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    pending = [Requirement(p) for p in packages]
    while pending:
        requirement = pending.pop()
        name = _canonical(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        extras = requirement.extras or {""}
        for text in importlib.metadata.requires(name) or []:
            child = Requirement(text)
            if child.marker is None or any(child.marker.evaluate({"extra": e}) for e in extras):
                pending.append(child)
    return seen


@pytest.mark.parametrize("release", list(CONTAINERS))
def test_package_pins_resolve_for_the_container_python_and_platform(repo, tmp_path, release):
    """The Dockerfile's exact pip line, for a text and an image model, is one `make compat-venv` resolved with
    `pip download --only-binary=:all: --python-version X.Y --platform manylinux_...` for that image."""
    resolved = VENVS / release / "resolved.json"
    if not resolved.is_file():
        pytest.skip(f"the {release} container's lines were not resolved (make compat-venv; needs its Python)")
    lines = json.loads(resolved.read_text())["lines"]
    text = write_package("demo", repo, tmp_path / "text", options=_for_release(repo, release))
    image = write_package("demo", _image_model(repo), tmp_path / "image", options=_for_release(repo, release))
    assert _pip_line((text / "Dockerfile").read_text()) == lines["text"]
    assert _pip_line((image / "Dockerfile").read_text()) == lines["image"]
    assert f"FROM {CONTAINERS[release].image}" in (image / "Dockerfile").read_text()


def _for_release(repo: Path, release: str) -> PackageOptions:
    from tritongen.deploy.package import Target, model_folders

    return PackageOptions(target=Target.of(model_folders(repo, "demo"), release))


def test_package_pins_a_pillow_with_a_wheel_for_python_3_10_in_the_24_10_image(repo, tmp_path):
    out = write_package("demo", _image_model(repo), tmp_path / "pkg", options=_for_release(repo, "24.10"))
    assert "pillow==12.3.0" in _pip_line((out / "Dockerfile").read_text())  # 13.0.0 has no cp310 wheel
    assert _lock_pin("pillow") == "13.0.0"


def test_package_refuses_a_step_importing_what_no_image_installs(repo, tmp_path):
    (repo / "demo_postprocess" / "1" / "extra.py").write_text("import scipy\n")
    with pytest.raises(DeployError, match="import scipy, which no image installs"):
        write_package("demo", repo, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_package_reads_the_steps_helper_package_and_refuses_a_fallback_to_tritongen(repo, tmp_path):
    helpers = repo / "demo_postprocess" / "1" / STEP_PACKAGE
    (helpers / "extra.py").write_text("import scipy\n")
    with pytest.raises(DeployError, match="import scipy, which no image installs"):
        write_package("demo", repo, tmp_path / "pkg")
    (helpers / "extra.py").write_text(  # the image has no tritongen to fall back on
        "try:\n    from _tritongen_step.vectors import softmax\n"
        "except ImportError:\n    from tritongen.vectors import softmax\n"
    )
    with pytest.raises(DeployError, match="import tritongen, which no image installs"):
        write_package("demo", repo, tmp_path / "pkg")


def test_package_reserves_one_gpu_only_for_a_build_on_gpu_instances(repo, tmp_path):
    out = write_package("demo", _on_gpu(repo), tmp_path / "pkg")
    triton = yaml.safe_load((out / "compose.yaml").read_text())["services"]["triton"]
    assert triton["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    ]


def test_package_targets_the_container_the_build_was_checked_for(repo, tmp_path, capsys):
    (repo / "demo" / "1" / "build.json").write_text(json.dumps({"container": "24.10"}))
    out = tmp_path / "pkg"
    assert main(["package", "--name", "demo", "--repository", str(repo), "--output", str(out)]) == 0
    assert "FROM nvcr.io/nvidia/tritonserver:24.10-py3" in (out / "Dockerfile").read_text()
    assert "Triton 24.10" in capsys.readouterr().out
    assert (
        main(["package", "demo", "--repository", str(repo), "--output", str(out), "--force", "--container", "25.12"])
        == 0
    )
    assert "FROM nvcr.io/nvidia/tritonserver:25.12-py3" in (out / "Dockerfile").read_text()


def test_package_cli_refuses_two_different_names(repo, tmp_path, capsys):
    assert main(["package", "demo", "--name", "other", "--repository", str(repo)]) == 2
    assert "two names" in capsys.readouterr().err


def test_nothing_we_ship_needs_client_shared_memory_which_26_04_turns_off(repo, tmp_path, monkeypatch):
    """From 26.04 a client's shared-memory regions need ``--allow-client-shm=true``: nothing of ours uses them."""
    import subprocess

    from tritongen.bench import perf
    from tritongen.deploy import ManifestOptions, manifests

    argv = TritonArgs().argv()
    assert not any("allow-client-shm" in a for a in argv)
    out = write_package("demo", repo, tmp_path / "pkg", options=PackageOptions(args=TritonArgs(), gateway=True))
    written = "\n".join(p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix in ("", ".yaml", ".yml"))
    assert "allow-client-shm" not in written and "shared_memory" not in written
    options = ManifestOptions(name="demo", repository_url="s3://bucket/demo", image="img:1", gateway=True)
    rendered = "\n".join(yaml.safe_dump_all(documents) for documents in manifests(options).values())
    assert "allow-client-shm" not in rendered
    seen: list[list[str]] = []

    def fake_run(command, model, concurrency):
        seen.append(command)
        csv_path = Path(command[command.index("-f") + 1])
        csv_path.write_text(
            "Concurrency,Inferences/Second,p50 latency,p95 latency,p99 latency,Avg latency\n1,1,1,1,1,1\n"
        )
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(perf, "_run", fake_run)
    perf.run_perf_analyzer("c", "demo", "127.0.0.1:1", tmp_path / "in.json", 1, perf.Sweep(fixed_requests=8), tmp_path)
    assert seen and "--shared-memory" not in seen[0]  # perf_analyzer's default: tensors in the request body
