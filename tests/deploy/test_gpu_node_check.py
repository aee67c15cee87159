"""The GPU-node check's dry run: packed, carried in parts, unpacked and run here with KIND_CPU in place of the GPU.

Everything but the GPU runs as it will on a lent GPU machine (scripts/gpu_node_pack.py, scripts/gpu_node_check.sh,
scripts/gpu_node_check.py): the parts joined and verified, the stub's venv, pytriton's tritonserver with the CUDA
build of Triton's onnxruntime backend (here with ONNX Runtime 1.31.1's CPU library), the stub's BYTES self-test,
the shared folder's verify_gpu.sh, the model step alone and the whole ensemble under perf_analyzer, the in-process
figures. A few requests a point: the harness is under test, not the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.deployment import ROOT
from tritongen.serve.server import server_environment

pytestmark = pytest.mark.e2e

GPU_BACKEND = ROOT.parent / "shared" / "triton-backends" / "gpu" / "onnxruntime" / "libtriton_onnxruntime.so"


@pytest.mark.skipif(not GPU_BACKEND.is_file(), reason="needs ../shared/triton-backends/gpu (the backend's CUDA build)")
def test_the_gpu_node_check_runs_whole_here_with_the_cpu_in_place_of_the_gpu(tiny_factory, builds, tmp_path):
    built = builds(tiny_factory("bert", "embedding"), "gpu_cuda", device="gpu", gpu_accelerator="cuda")
    cpu = builds(tiny_factory("bert", "embedding"), "cpu_folded", fold=True)  # the parity reference's FP32 model
    (tmp_path / "tmp").mkdir()
    env = {**server_environment(), "PYTHON": sys.executable, "TMPDIR": str(tmp_path / "tmp")}
    packed = subprocess.run(
        [sys.executable, "scripts/gpu_node_pack.py", "--repository", str(built.repository), "--name", "gpu_cuda",
         "--out", str(tmp_path / "pack"), "--cpu", "--part-mib", "8",
         "--fp32", str(cpu.repository / "cpu_folded_model" / "1" / "model.onnx")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert packed.returncode == 0, packed.stdout + packed.stderr
    manifest = json.loads((tmp_path / "pack" / "parts" / "MANIFEST.json").read_text())
    assert len(manifest["parts"]) > 1  # carried in parts, joined and checked there
    assert all((tmp_path / "pack" / "parts" / p).stat().st_size <= 8 * 2**20 for p in manifest["parts"])
    done = subprocess.run(
        ["bash", str(tmp_path / "pack" / "parts" / "gpu_node_check.sh"), str(tmp_path / "pack" / "parts"),
         str(tmp_path / "out"), "--cpu", "--quick"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    report = json.loads((tmp_path / "out" / "gpu_node.json").read_text())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report["layout"]["onnxruntime"].startswith("1.31.1") and report["layout"]["stub_numpy"].startswith("1.")
    assert report["stub"]["bytes_read"] and report["verify"]["passed"], report
    assert "PASS" in report["verify"]["results"]["linear_cpu"]
    for precision in ("fp16",):
        points = report["model_step"][precision]
        assert [p["concurrency"] for p in points] == [1, 8, 32, 128, 256]
        assert all(p["texts_per_s"] > 0 and p["p99_ms"] >= p["p50_ms"] > 0 and p["average_batch"] >= 1 for p in points)
    assert report["in_process"]["ort_fp16_b1"]["texts_per_s"] > 0
    # the served step's rows against the CPU build's FP32 rows, computed by the pack; the FP16 gate the build passed
    parity = report["model_step"]["parity"]
    assert parity["texts"] == 16 and parity["output"] and parity["passed"], parity
    batched = report["model_step"]["fp16_b64"]
    assert [p["concurrency"] for p in batched] == [1, 4] and all(p["texts_per_request"] == 64 for p in batched)
    assert all(p["texts_per_s"] > 0 and p["average_batch"] >= 64 for p in batched), batched
    assert report["served_vs_in_process"]["fp16"]["c1"] > 0
    whole = report["ensemble"]["points"]
    assert all(p["texts_per_s"] > 0 and "tokenizer" in p["cpu_ms_per_request"] for p in whole), whole
    assert "## The whole ensemble" in (tmp_path / "out" / "gpu_node.md").read_text()
    left = [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith(("gpu-node", "gpu-pack"))]
    assert left == []  # the unpacked parts, the venv and the work folders removed
