"""A roll-out of every precision the build emits passes its canary: FP16, INT8 (dynamic, static) and a GPU spec's FP16
over a served FP32 version, one after another, through the real ``tritongen serve`` and ``tritongen rollout``.

The canary is recorded the way the step is served (the native backend where ``TRITONGEN_BACKENDS`` has it) and its
tolerance follows the precision, so each lossy version passes on the machine that serves it. The GPU spec's version
is served here on the CPU (its config's instances moved to KIND_CPU, the TensorRT accelerator dropped): the same
FP16 model file a GPU node's roll-out would compare, without the GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.deployment import ROOT, ServeProcess, deployment_pids
from tritongen.builder.pipeline import build_repository
from tritongen.builder.spec import load_spec
from tritongen.repository.canary import CANARY_FILE
from tritongen.serve.server import server_environment

pytestmark = pytest.mark.e2e

NAME = "rp"
VERSIONS = {  # version -> the build's settings over the FP32 version 1
    2: {"precision": "fp16"},
    3: {"precision": "int8", "quantization": "dynamic", "int8_curve": False},
    4: {"precision": "int8", "quantization": "static", "int8_curve": False},
    5: {"device": "gpu"},  # FP16 through ONNX Runtime's TensorRT accelerator on KIND_GPU instances
}


@pytest.fixture(scope="module")
def checkpoint(tiny_factory):
    return tiny_factory("bert", "embedding")


@pytest.fixture(scope="module")
def served(tmp_path_factory, checkpoint, builds):
    repository = builds.copy(builds(checkpoint, NAME), into=tmp_path_factory.mktemp("rollout_precisions") / "repo")
    with ServeProcess(repository, tmp_path_factory.mktemp("serve") / "serve.log", grace_period=3) as serve:
        yield serve
    assert deployment_pids(repository) == []


def _build(checkpoint, repository, settings: dict) -> None:
    # The tiny random model's FP16 and INT8 lose more than the accuracy gate allows: kept (and said so on the card),
    # since what is under test is that the served step answers as its build recorded.
    spec = load_spec(
        None, model=str(checkpoint), name=NAME, repository=repository, container_check=False,
        accept_accuracy_loss=True, model_instances={"count": 1}, onnxruntime={"intra_op_threads": 1}, **settings,
    )  # fmt: skip
    build_repository(spec)


def _on_cpu(repository) -> None:
    """The model step's config as a CPU machine must serve it: KIND_CPU, no TensorRT accelerator."""
    path = repository / f"{NAME}_model" / "config.pbtxt"
    config = text_format.Parse(path.read_text(), mc.ModelConfig())
    for group in config.instance_group:
        group.kind = mc.ModelInstanceGroup.KIND_CPU
        del group.gpus[:]
    config.optimization.ClearField("execution_accelerators")
    path.write_text(text_format.MessageToString(config))


def test_each_precision_rolls_out_over_fp32_and_passes_its_canary(served, checkpoint):
    """On every CPU: each lossy version's canary is recorded by this machine's kernels and compared on the same."""
    repository = served.repository
    for version, settings in VERSIONS.items():
        _build(checkpoint, repository, settings)
        record = json.loads((repository / NAME / str(version) / CANARY_FILE).read_text())
        assert record["served_by"] and record["tolerance"] >= 1e-4, record["served_by"]
        if settings.get("device") == "gpu":
            _on_cpu(repository)
        command = [
            sys.executable, "-m", "tritongen", "rollout", "--name", NAME, "--version", str(version),
            "--repository", str(repository), "--http-port", str(served.http_port),
            "--grpc-port", str(served.grpc_port),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"version {version} ({settings}): {done.stdout}{done.stderr}"
        assert f"canary of version {version} matches" in done.stdout + done.stderr, done.stdout + done.stderr
