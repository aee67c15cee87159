"""Measure on a GPU node what only it can show: its CPU side at full size, and our model files on its GPU.

Runs with the node's own Python and what is carried to it, not with tritongen's venv: the real tritonserver
and perf_analyzer (from the nvidia-pytriton and tritonclient wheels, unpacked), the free-model repository of a
``DEVICE=gpu`` build sized for the node (``python -m tritongen.bench.free_step``'s output, made where the build
was), the build's FP32 and FP16 ``model.onnx``, and onnxruntime-gpu where it is installed.

1. The CPU side: the free-model repository served by tritonserver on the node's cores with the instances the
   build chose; perf_analyzer over gRPC with 1 and 32 texts per request; the server's CPU per request by process
   (``tritongen.bench.cpu_use``); the tokenizer's in-process ceiling on every core and on one
   (``tritongen.bench.tokenize_rate``).
2. The GPU: each ``model.onnx`` under ONNX Runtime's CUDA execution provider in process, and PyTorch FP16 on
   the same architecture (random weights: speed does not depend on them), on the bench texts tokenised by the
   build's own tokenizer step code, at several batch sizes.

``python scripts/gpu_node_bench.py --out DIR [--pytriton DIR --perf-analyzer BIN --free-repo DIR --name NAME]
[--fp32 MODEL --fp16 MODEL --config CONFIG_JSON] --tokenizer TOKENIZER_JSON --texts TEXTS_JSON``; each part runs
where its inputs are given. Writes ``gpu_node.json`` and ``gpu_node.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tritongen.bench.cpu_use import FRONTEND, cpu_snapshot  # stdlib only

CONCURRENCY = (64, 256)
BATCHES = (1, 32)
GPU_BATCHES = (1, 8, 32, 64, 128)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _libpython_dir() -> str:
    import sysconfig

    for folder in (sysconfig.get_config_var("LIBDIR"), "/usr/lib/x86_64-linux-gnu", "/usr/local/lib"):
        if folder and list(Path(folder).glob(f"libpython{sys.version_info.major}.{sys.version_info.minor}*.so*")):
            return str(folder)
    raise SystemExit(f"no libpython{sys.version_info.major}.{sys.version_info.minor} shared library for the stub")


def _runtime(pytriton: Path, work: Path) -> tuple[Path, dict[str, str]]:
    """A backend folder as ``tritongen.serve.server.prepare_runtime`` lays it out, and the server's environment."""
    home = pytriton / "pytriton" / "tritonserver"
    python_dir = work / "backends" / "python"
    python_dir.mkdir(parents=True)
    for item in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(home / "backends" / "python" / item, python_dir / item)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    shutil.copy2(home / "python_backend_stubs" / version / "triton_python_backend_stub", python_dir)
    stand_in = Path(__file__).resolve().parents[1] / "tritongen" / "steps" / "backends" / "onnxruntime" / "model.py"
    (work / "backends" / "onnxruntime").mkdir()
    shutil.copy2(stand_in, work / "backends" / "onnxruntime" / "model.py")
    lib = work / "lib"
    lib.mkdir()
    libs = pytriton / "nvidia_pytriton.libs"
    for pattern, name in (("libb64-*.so.0d", "libb64.so.0d"), ("libcudart-*.so.12*", "libcudart.so.12")):
        (lib / name).symlink_to(sorted(libs.glob(pattern))[0])
    import sysconfig

    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(libs), str(lib), _libpython_dir(), env.get("LD_LIBRARY_PATH", "")])
    # The stubs' packages: numpy, tokenizers, onnxruntime. The 24.10 stub is built against NumPy 1: where the node's
    # Python has NumPy 2, STUB_PYTHONPATH puts a NumPy 1 in front (NumPy 2 misreads its BYTES tensors).
    stub_path = [os.environ.get("STUB_PYTHONPATH", ""), sysconfig.get_paths()["purelib"]]
    env["PYTHONPATH"] = os.pathsep.join(p for p in stub_path if p)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return home / "bin" / "tritonserver", env


def _stats(http: str, model: str) -> tuple[int, int]:
    """(successful requests, inferences) of ``model`` so far."""
    with urllib.request.urlopen(f"http://{http}/v2/models/{model}/stats", timeout=30) as response:
        entries = json.loads(response.read())["model_stats"]
    best = max(entries, key=lambda e: int(e.get("inference_count", 0)))
    return int(best["inference_stats"]["success"]["count"]), int(best.get("inference_count", 0))


def _wait_ready(http: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"tritonserver exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"tritonserver not ready after 300 s: {log.read_text()[-2000:]}")


def cpu_side(args: argparse.Namespace, out: Path) -> dict:
    """The free-model repository served on every core, measured as ``make bench --free-model-step`` does."""
    texts_file = Path(args.texts)
    data = out / "input_data.json"
    data.write_text(
        json.dumps({"data": [{"TEXT": {"content": [t], "shape": [1]}} for t in json.loads(texts_file.read_text())]})
    )
    ceiling = {}
    config = (args.free_repo / f"{args.name}_tokenizer" / "config.pbtxt").read_text()
    max_length = config.split('key: "max_length"')[1].split('string_value: "')[1].split('"')[0]
    buckets = config.split('key: "buckets"')[1].split('string_value: "')[1].split('"')[0]
    for label, threads in (("all_cores", None), ("one_thread", "1")):
        env = {k: v for k, v in os.environ.items() if k != "RAYON_NUM_THREADS"}
        env.update({"RAYON_NUM_THREADS": threads} if threads else {})
        env["TOKENIZERS_PARALLELISM"] = "true"
        done = subprocess.run(
            [sys.executable, "-m", "tritongen.bench.tokenize_rate", str(args.tokenizer), str(texts_file), max_length,
             buckets], capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1], timeout=600,
        )  # fmt: skip
        ceiling[label] = (
            json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else done.stderr[-500:]
        )
    work = Path(tempfile.mkdtemp(prefix="gpu-node-"))
    binary, env = _runtime(args.pytriton, work)
    http, grpc, metrics = _free_port(), _free_port(), _free_port()
    models = [p.name for p in args.free_repo.iterdir() if (p / "config.pbtxt").is_file()]
    log = out / "tritonserver.log"
    command = [str(binary), f"--model-repository={args.free_repo}", f"--backend-directory={work / 'backends'}",
               f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--allow-gpu-metrics=false",
               "--model-control-mode=explicit", *(f"--load-model={m}" for m in models)]  # fmt: skip
    with open(log, "wb") as handle:
        server = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    rows = []
    try:
        _wait_ready(f"127.0.0.1:{http}", server, log)
        roles = {m: m.removeprefix(args.name + "_") for m in models if m != args.name}
        for batch in BATCHES:
            for concurrency in CONCURRENCY:
                rows.append(_point(args, env, http, grpc, server.pid, data, out, batch, concurrency, roles))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    return {"cores": os.cpu_count(), "ceiling": ceiling, "points": rows, "instances": _instances(args.free_repo)}


def _instances(repo: Path) -> dict[str, int]:
    counts = {}
    for config in repo.glob("*/config.pbtxt"):
        text = config.read_text()
        if "count:" in text:
            counts[config.parent.name] = int(text.split("count:")[1].split()[0])
    return counts


def _point(args, env, http, grpc, pid, data, out, batch, concurrency, roles) -> dict:
    csv_path = out / f"cpu_side_b{batch}_c{concurrency}.csv"
    command = [str(args.perf_analyzer), "-m", args.name, "-u", f"127.0.0.1:{grpc}", "-i", "grpc", "--input-data",
               str(data), "--concurrency-range", str(concurrency), "--measurement-mode", "count_windows",
               "--measurement-request-count", str(max(512, 4 * concurrency)), "-f", str(csv_path),
               *(["-b", str(batch)] if batch > 1 else [])]  # fmt: skip
    before, (requests0, texts0) = cpu_snapshot(pid), _stats(f"127.0.0.1:{http}", args.name)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    after, (requests1, texts1) = cpu_snapshot(pid), _stats(f"127.0.0.1:{http}", args.name)
    if done.returncode != 0 or not csv_path.is_file():
        return {"batch": batch, "concurrency": concurrency, "error": (done.stdout + done.stderr)[-800:]}
    with open(csv_path) as handle:
        row = next(csv.DictReader(handle))
    spent = after.since(before)
    requests, texts = requests1 - requests0, texts1 - texts0
    cpu = {roles.get(owner, owner): seconds for owner, seconds in spent.items()}
    server = sum(cpu.values())
    return {
        "batch": batch, "concurrency": concurrency, "texts_per_s": float(row["Inferences/Second"]),
        "p99_ms": float(row["p99 latency"]) / 1000, "requests": requests, "texts": texts,
        "cpu_ms_per_request": {k: 1000 * v / requests for k, v in cpu.items()},
        "texts_per_s_per_core": texts / server if server else 0.0,
        "texts_per_s_per_core_native_model": texts / (server - cpu.get("model", 0.0)) if server else 0.0,
        "frontend": FRONTEND,
    }  # fmt: skip


def _batches(tokenizer: Path, texts: list[str], batch: int, max_length: int, buckets: list[int]) -> list[dict]:
    from tritongen.steps.tokenizer import TextEncoder

    encoder = TextEncoder(
        str(tokenizer), max_length, buckets, input_names=("input_ids", "attention_mask", "token_type_ids")
    )
    return [encoder(texts[i : i + batch]) for i in range(0, len(texts) - batch + 1, batch)]


def _rate(run, batches: list, batch: int, seconds: float = 3.0, sync=lambda: None) -> dict:
    for feed in batches[:5]:
        run(feed)
    sync()
    done, start, latencies = 0, time.perf_counter(), []
    while time.perf_counter() - start < seconds:
        for feed in batches:
            tick = time.perf_counter()
            run(feed)
            sync()
            latencies.append(time.perf_counter() - tick)
            done += batch
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {"texts_per_s": done / elapsed, "p50_ms": 1000 * latencies[len(latencies) // 2]}


def gpu(args: argparse.Namespace) -> dict:
    """The build's model files under ONNX Runtime's CUDA provider, and PyTorch FP16, in process."""
    texts = json.loads(Path(args.texts).read_text())
    results: dict = {}
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    results["onnxruntime"] = ort.__version__
    for label, path in (("fp32", args.fp32), ("fp16", args.fp16)):
        if path is None:
            continue
        session = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        results[f"{label}_providers"] = session.get_providers()
        names = {i.name for i in session.get_inputs()}
        for batch in GPU_BATCHES:
            feeds = [
                {k: v for k, v in f.items() if k in names}
                for f in _batches(args.tokenizer, texts, batch, 256, [16, 32, 64, 128])
            ]
            results[f"ort_cuda_{label}_b{batch}"] = _rate(partial(session.run, None), feeds, batch)
            print(label, batch, results[f"ort_cuda_{label}_b{batch}"], flush=True)
    if args.config is not None:
        import torch
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig.from_json_file(str(args.config))).half().cuda().eval()

        def forward(feed: dict) -> None:
            with torch.inference_mode():
                inputs = {k: torch.from_numpy(v).cuda(non_blocking=True) for k, v in feed.items()}
                hidden = model(**inputs).last_hidden_state
                mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
                torch.nn.functional.normalize(pooled, dim=-1).float().cpu()

        results["torch"] = torch.__version__
        results["device"] = torch.cuda.get_device_name(0)
        for batch in GPU_BATCHES:
            feeds = _batches(args.tokenizer, texts, batch, 256, [16, 32, 64, 128])
            results[f"torch_fp16_b{batch}"] = _rate(forward, feeds, batch, sync=torch.cuda.synchronize)
            print("torch", batch, results[f"torch_fp16_b{batch}"], flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--texts", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--pytriton", type=Path)
    parser.add_argument("--perf-analyzer", type=Path)
    parser.add_argument("--free-repo", type=Path)
    parser.add_argument("--name")
    parser.add_argument("--fp32", type=Path)
    parser.add_argument("--fp16", type=Path)
    parser.add_argument("--config", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"python": sys.version.split()[0], "cores": os.cpu_count()}
    parts = [("gpu", lambda: gpu(args), bool(args.fp32 or args.fp16 or args.config))]
    parts.append(("cpu_side", lambda: cpu_side(args, args.out), args.free_repo is not None))
    for key, measure, asked in parts:  # each part on its own: one that fails leaves the other's figures
        if not asked:
            continue
        try:
            report[key] = measure()
        except (Exception, SystemExit) as exc:  # a measurement script reports and goes on
            report[key] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        (args.out / "gpu_node.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
