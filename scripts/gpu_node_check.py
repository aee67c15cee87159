"""One GPU-node check: the native onnxruntime backend serving our model step and our ensemble, measured.

Runs where what ``scripts/gpu_node_pack.py`` packed was unpacked (``CARRY``), with the node's own Python (3.12 on
the lent H100/H200 machines) and nothing else of ours installed; ``scripts/gpu_node_check.sh`` unpacks the parts
and calls it. In order, each part on its own (one that fails leaves the others' figures):

1. **layout**: pytriton's ``tritonserver`` with Triton's onnxruntime backend (the CUDA build for ONNX Runtime 1.31.1,
   its GPU libraries from the ``onnxruntime-gpu`` wheel) beside the Python backend; the Python steps' stub runs in
   this script's venv, which must hold NumPy 1 (pytriton 0.7.0's stub reads every input through NumPy 1's array
   ABI: with NumPy 2 it copies garbage, and a ``BYTES`` input fails with ``unpack_from requires a buffer of at least
   ...``; ``gpu_node_check.sh`` makes that venv);
2. **stub**: one ``BYTES`` request through a Python model, the proof that the stub reads text on this node;
3. **verify**: the shared folder's ``verify_gpu.sh`` (a KIND_CPU, a CUDA-provider and a TensorRT-provider model,
   each against numpy);
4. **model step**: the build's model step alone, KIND_GPU through the CUDA provider, FP16 and FP32, driven by
   perf_analyzer with the bench texts' token ids at c1, 8, 32, 128 and 256 under the build's dynamic batching:
   texts/s, p50 and p99, the batch sizes Triton formed, and the GPU's utilisation from ``nvidia-smi``;
5. **in process**: the same model files under ONNX Runtime's CUDA provider, and PyTorch FP16 on the same
   architecture, in this process, at batches of 1 to 128;
6. **ensemble**: the whole ``DEVICE=gpu`` build (its tokenizer instances sized for the node's cores) with text
   input at c1 to c256, the server's CPU per request by process (the CPU side's share).

``--cpu`` is the dry run on a machine without a GPU: KIND_CPU in place of KIND_GPU, the CPU build of ONNX Runtime
1.31.1's library in place of the GPU one, everything else the same. Writes ``gpu_node.json`` and ``gpu_node.md``.

``python gpu_node_check.py --carry CARRY --out OUT [--cpu] [--quick]``
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

CONCURRENCY = (1, 8, 32, 128, 256)
GPU_BATCHES = (1, 8, 32, 64, 128)
BATCHED = 64  # texts per request in the batched point: one padded shape, served and in process alike
BATCHED_CONCURRENCY = (1, 4)
PARITY_GROUP = 8  # texts per parity request, of mixed lengths
PARITY_TEXTS = 256  # the first bench texts: the pack computes the CPU build's outputs for them (reference.npz)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: every socket stays bound until all are picked (tritongen/serve/ports.py)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _run(command: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)


# --- 1. the server's layout --------------------------------------------------------------------------------------


class Node:
    """What was carried, laid out: the server's backend folder, the stub's venv, the environment to run them in."""

    def __init__(self, carry: Path, work: Path, *, cpu: bool) -> None:
        self.carry, self.work, self.cpu = carry, work, cpu
        self.pytriton = carry / "pytriton"
        self.backends = work / "backends"
        self.venv = Path(sys.prefix)  # this Python's venv: the stub's packages (gpu_node_check.sh makes it)
        self.env: dict[str, str] = {}

    @property
    def tritonserver(self) -> Path:
        return self.pytriton / "pytriton" / "tritonserver" / "bin" / "tritonserver"

    @property
    def perf_analyzer(self) -> Path:
        return self.carry / "bin" / "perf_analyzer"

    def lay_out(self) -> dict[str, Any]:
        """The backend folder, the stub's venv and the environment; what was laid out, for the report."""
        home = self.pytriton / "pytriton" / "tritonserver"
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        python_dir = self.backends / "python"
        python_dir.mkdir(parents=True)
        for item in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy2(home / "backends" / "python" / item, python_dir / item)
        shutil.copy2(home / "python_backend_stubs" / version / "triton_python_backend_stub", python_dir)
        ort = self.backends / "onnxruntime"
        shutil.copytree(self.carry / "backends" / "onnxruntime", ort)
        released = self._onnxruntime_libraries(ort)
        libpython = _libpython_dir(self.carry)
        libs = [str(self.pytriton / "nvidia_pytriton.libs"), str(self.carry / "lib"), libpython]
        if not self.cpu:
            # The node's own Python finds the NVIDIA libraries PyTorch installed (this venv reaches them via a .pth)
            node_python = os.environ.get("NODE_PYTHON", sys.executable)
            found = _run(["bash", str(self.carry / "gpu" / "tools" / "nvidia_lib_path.sh"), node_python])
            libs += [p for p in found.stdout.strip().split(":") if p]
        self.env = {
            **os.environ,
            "LD_LIBRARY_PATH": os.pathsep.join([*libs, os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep),
            "PATH": os.pathsep.join([str(self.venv / "bin"), os.environ.get("PATH", "")]),
        }
        self.env.pop("PYTHONPATH", None)
        if libpython == str(self.carry / "lib" / "libpython"):
            # the carried libpython (another 3.12 build) reads the node's standard library and this venv's packages
            import site
            import sysconfig

            self.env["PYTHONHOME"] = sys.base_prefix
            self.env["PYTHONPATH"] = os.pathsep.join([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
        import numpy

        if int(numpy.__version__.split(".")[0]) >= 2:
            raise SystemExit(
                f"NumPy {numpy.__version__} here: pytriton's stub needs NumPy 1 (gpu_node_check.sh's venv)"
            )
        return {"python": sys.version.split()[0], "stub_numpy": numpy.__version__, "onnxruntime": released,
                "libpython": libpython}  # fmt: skip

    def _onnxruntime_libraries(self, ort: Path) -> str:
        """ONNX Runtime 1.31.1's libraries beside the backend: the GPU wheel's on the node, the CPU one's here."""
        if self.cpu:
            import onnxruntime

            capi = Path(onnxruntime.__file__).parent / "capi"
            for library in capi.glob("libonnxruntime*.so*"):
                shutil.copy2(library, ort / library.name)
            source = f"onnxruntime {onnxruntime.__version__} (CPU wheel)"
        else:
            wheel = next((self.carry / "wheels").glob("onnxruntime_gpu-*.whl"))
            done = _run(["bash", str(self.carry / "gpu" / "tools" / "install_ort_gpu.sh"), str(wheel), str(ort)])
            if done.returncode != 0:
                raise SystemExit(f"install_ort_gpu.sh failed: {done.stderr[-800:]}")
            source = wheel.name
        release = next(ort.glob("libonnxruntime.so.1.*.*")).name.removeprefix("libonnxruntime.so.")
        link = ort / "libonnxruntime.so.1"
        link.unlink(missing_ok=True)
        link.symlink_to(f"libonnxruntime.so.{release}")
        return f"{release} from {source}"

    @contextlib.contextmanager
    def server(self, repository: Path, log: Path, models: list[str]) -> Iterator[dict[str, str]]:
        """tritonserver on free ports serving ``models`` of ``repository``; its URLs and pid; stopped after."""
        http, grpc, metrics = _free_ports(3)
        command = [
            str(self.tritonserver), f"--model-repository={repository}", f"--backend-directory={self.backends}",
            f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--exit-timeout-secs=5",
            f"--allow-gpu-metrics={'false' if self.cpu else 'true'}", "--model-control-mode=explicit",
            *(f"--load-model={m}" for m in models),
        ]  # fmt: skip
        with open(log, "wb") as handle:
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=self.env,
                                       start_new_session=True)  # fmt: skip
        try:
            _wait_ready(f"127.0.0.1:{http}", process, log)
            yield {"http": f"127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}", "pid": str(process.pid)}
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def _libpython_dir(carry: Path) -> str:
    """Where the stub finds libpython3.X: this Python's own, else the one the pack carried (``lib/libpython``)."""
    import sysconfig

    name = f"libpython{sys.version_info.major}.{sys.version_info.minor}"
    for folder in (sysconfig.get_config_var("LIBDIR"), "/usr/lib/x86_64-linux-gnu", "/usr/local/lib"):
        if folder and list(Path(folder).glob(f"{name}*.so*")):
            return str(folder)
    if list((carry / "lib" / "libpython").glob(f"{name}*.so*")):
        return str(carry / "lib" / "libpython")
    raise SystemExit(f"no {name} shared library for the stub, here or carried")


def _wait_ready(http: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"tritonserver exited: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        time.sleep(0.5)
    raise SystemExit(f"tritonserver not ready after 300 s: {log.read_text(errors='replace')[-2000:]}")


def _get(http: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{http}{path}", timeout=60) as response:
        return json.loads(response.read())


def _post(http: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        f"http://{http}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read() or b"{}")


# --- 2. the stub reads BYTES --------------------------------------------------------------------------------------

_ECHO = """import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("LENGTH", np.array([[len(t[0])] for t in
                pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()], dtype=np.int64))]) for r in requests]
"""
_ECHO_CONFIG = """name: "echo"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "LENGTH" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""


def stub(node: Node, out: Path) -> dict[str, Any]:
    """A BYTES request through a Python model: the stub must read each text's own length."""
    repository = node.work / "echo_repo"
    (repository / "echo" / "1").mkdir(parents=True)
    (repository / "echo" / "config.pbtxt").write_text(_ECHO_CONFIG)
    (repository / "echo" / "1" / "model.py").write_text(_ECHO)
    texts = ["hello", "a longer text, with ünïcödé"]
    with node.server(repository, out / "stub_server.log", ["echo"]) as at:
        body = {"inputs": [{"name": "TEXT", "shape": [2, 1], "datatype": "BYTES", "data": texts}]}
        answer = _post(at["http"], "/v2/models/echo/infer", body)
    lengths = answer["outputs"][0]["data"]
    expected = [len(t.encode()) for t in texts]
    if lengths != expected:
        raise SystemExit(f"the stub read BYTES wrong: lengths {lengths}, expected {expected}")
    return {"bytes_read": True, "lengths": lengths}


# --- 3. the shared folder's own check -----------------------------------------------------------------------------


def verify(node: Node, out: Path) -> dict[str, Any]:
    """``verify_gpu.sh`` over our backend folder: KIND_CPU always, the CUDA and TensorRT providers on a GPU."""
    test = node.work / "verify"
    shutil.copytree(node.carry / "gpu" / "test", test)
    shutil.copytree(node.carry / "gpu" / "tools", node.work / "tools")
    models = ["linear_cpu"] if node.cpu else ["linear_cpu", "linear_cuda", "linear_trt"]
    env = {**node.env, "BACKENDS": str(node.backends), "PORT": str(_free_ports(1)[0]), "LOG": str(out / "verify.log")}
    done = _run(["bash", str(test / "verify_gpu.sh"), str(node.tritonserver), sys.executable, *models], env=env)
    (out / "verify.txt").write_text(done.stdout + done.stderr)
    results = {
        line.split(":")[0][len("RESULT ") :]: line for line in done.stdout.splitlines() if line.startswith("RESULT")
    }
    return {"passed": done.returncode == 0, "results": results}


# --- 4. the model step alone -------------------------------------------------------------------------------------


def encoder_for(carry: Path) -> Any:
    """The tokenizer step's encoder, set up from the parameters its config has (``build.json``), as the step does."""
    sys.path.insert(0, str(carry / "src"))
    from tritongen.contract import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS
    from tritongen.encoding import TextEncoder
    from tritongen.parameters import TokenizerParameters

    tokens = TokenizerParameters.from_parameters(json.loads((carry / "build.json").read_text()), "the build")
    names = (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS)
    return TextEncoder.configured(str(carry / "tokenizer.json"), tokens, names)


def _encoder(node: Node) -> Any:
    return encoder_for(node.carry)


def _token_data(node: Node, texts: list[str], path: Path, inputs: list[str]) -> None:
    """perf_analyzer input: one request per text, its token ids bucket-padded as the tokenizer step pads them."""
    sys.path.insert(0, str(node.carry / "src"))
    encoder = _encoder(node)
    rows = []
    for text in texts:
        feeds = encoder([text])
        rows.append({name: {"content": feeds[name][0].tolist(), "shape": [feeds[name].shape[1]]} for name in inputs})
    path.write_text(json.dumps({"data": rows}))


class GpuSampler:
    """``nvidia-smi``'s utilisation every 0.2 s while a measurement runs (empty without a GPU)."""

    def __init__(self, cpu: bool) -> None:
        self.cpu, self.samples, self.halt = cpu, [], threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.halt.wait(0.2):
            done = _run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"], timeout=10)
            with contextlib.suppress(ValueError):
                self.samples.append(float(done.stdout.split()[0]))

    def __enter__(self) -> GpuSampler:
        if not self.cpu and shutil.which("nvidia-smi"):
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def summary(self) -> dict[str, float] | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return {"mean_pct": sum(ordered) / len(ordered), "p50_pct": ordered[len(ordered) // 2], "max_pct": ordered[-1]}


def _stats(http: str, model: str) -> tuple[int, int, int]:
    """(successful requests, inferences, executions) of ``model`` so far."""
    entries = _get(http, f"/v2/models/{model}/stats")["model_stats"]
    best = max(entries, key=lambda e: int(e.get("inference_count", 0)))
    return (
        int(best["inference_stats"]["success"]["count"]),
        int(best.get("inference_count", 0)),
        int(best.get("execution_count", 0)),
    )


def _perf(node: Node, at: dict[str, str], model: str, data: Path, concurrency: int, out: Path, quick: bool,
          batch: int = 1) -> dict[str, Any]:  # fmt: skip
    """One perf_analyzer point over gRPC, with what the server did and spent during it."""
    sys.path.insert(0, str(node.carry / "src"))
    from tritongen.bench.cpu_use import cpu_snapshot

    label = f"{model}_b{batch}_c{concurrency}"
    count = 16 if quick else max(512, 4 * concurrency)
    command = [
        str(node.perf_analyzer), "-m", model, "-u", at["grpc"], "-i", "grpc", "--input-data", str(data),
        "--concurrency-range", str(concurrency), "--measurement-mode", "count_windows",
        "--measurement-request-count", str(count), "-f", str(out / f"{label}.csv"),
        *(["-b", str(batch)] if batch > 1 else []),
        # quick: any spread counts as stable (the harness is under test: a loaded 2-core machine spread one point's
        # windows past 100x once); else perf_analyzer's own 10% over 3 windows. The bench's smoke runs use the same.
        *(["--max-trials", "3", "--stability-percentage", "1000000"] if quick else ["--max-trials", "10"]),
    ]  # fmt: skip
    before_cpu, before = cpu_snapshot(int(at["pid"])), _stats(at["http"], model)
    with GpuSampler(node.cpu) as gpu:
        done = _run(command, env=node.env)
    after_cpu, after = cpu_snapshot(int(at["pid"])), _stats(at["http"], model)
    if done.returncode != 0 or not (out / f"{label}.csv").is_file():
        return {"concurrency": concurrency, "error": (done.stdout + done.stderr)[-800:]}
    with open(out / f"{label}.csv") as handle:
        row = next(csv.DictReader(handle))
    requests, texts, executions = (a - b for a, b in zip(after, before, strict=True))
    spent = after_cpu.since(before_cpu)
    return {
        "concurrency": concurrency, "texts_per_request": batch, "texts_per_s": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000, "p99_ms": float(row["p99 latency"]) / 1000,
        "average_batch": texts / executions if executions else 0.0, "requests": requests,
        "cpu_ms_per_request": {k: 1000 * v / requests for k, v in spent.items()} if requests else {},
        "gpu_utilisation": gpu.summary(),
    }  # fmt: skip


def _step_repository(node: Node, precision: str) -> tuple[Path, str]:
    """The build's model step alone, at ``precision``, KIND_GPU (KIND_CPU in the dry run); its repository and name."""
    source = node.carry / "repo"
    step = next(p.name for p in source.iterdir() if p.name.endswith("_model"))
    repository = node.work / f"step_{precision}"
    target = repository / step
    (target / "1").mkdir(parents=True)
    (target / "1" / "model.onnx").symlink_to(node.carry / "models" / f"{precision}.onnx")
    (target / "config.pbtxt").write_text(_on_device((source / step / "config.pbtxt").read_text(), node.cpu))
    return repository, step


def _on_device(config: str, cpu: bool) -> str:
    """A model step's config as this node runs it: as built on a GPU, its instances on the CPU in the dry run."""
    if not cpu:
        return config
    lines = [line for line in config.splitlines() if not line.strip().startswith("gpus:")]
    return "\n".join(lines).replace("KIND_GPU", "KIND_CPU") + "\n"


def _fixed_rows(node: Node, texts: list[str], names: list[str]) -> dict[str, Any]:
    """``BATCHED`` texts encoded as one request: every row padded to one shape, as the batched point sends them."""
    return {k: v for k, v in _encoder(node)(texts[:BATCHED]).items() if k in names}


def _batched_data(rows: dict[str, Any], path: Path) -> None:
    """perf_analyzer input for ``-b BATCHED``: one entry per row, every row of the same length."""
    count = len(next(iter(rows.values())))
    entries = [{k: {"content": v[i].tolist(), "shape": [v.shape[1]]} for k, v in rows.items()} for i in range(count)]
    path.write_text(json.dumps({"data": entries}))


def _infer(http: str, model: str, feeds: dict[str, Any], inputs: dict[str, str], outputs: list[str]) -> dict:
    """One request over HTTP/JSON: ``feeds`` in (``inputs``: name to Triton datatype), ``outputs`` as float32."""
    import numpy as np

    body = {
        "inputs": [{"name": k, "shape": list(v.shape), "datatype": inputs[k], "data": v.ravel().tolist()}
                   for k, v in feeds.items()],
        "outputs": [{"name": name} for name in outputs],
    }  # fmt: skip
    answer = _post(http, f"/v2/models/{model}/infer", body)
    return {o["name"]: np.asarray(o["data"], dtype=np.float32).reshape(o["shape"]) for o in answer["outputs"]}


def parity(node: Node, at: dict[str, str], step: str, texts: list[str]) -> dict[str, Any]:
    """The served step's outputs against the CPU build's FP32 outputs (``reference.npz``, from the pack), row by row.

    Texts go in groups of ``PARITY_GROUP`` of mixed lengths, each padded as the tokenizer step pads it, as the pack
    grouped them. The cosine of each row with FP32's must pass the build's embedding gate
    (``tritongen.gates.accuracy.CosineGate``).
    """
    import numpy as np

    sys.path.insert(0, str(node.carry / "src"))
    from tritongen.gates.accuracy import COSINE_MEAN_MIN, COSINE_MIN_MIN, CosineGate

    if not (node.carry / "reference.npz").is_file():
        return {"skipped": "no CPU build's outputs were packed (gpu_node_pack.py --fp32)"}
    reference = np.load(node.carry / "reference.npz")
    config = _get(at["http"], f"/v2/models/{step}/config")
    inputs = {t["name"]: t["data_type"].removeprefix("TYPE_") for t in config["input"]}
    common = [t["name"] for t in config["output"] if t["name"] in reference.files]
    if not common:
        return {"error": f"no output in common: served {[t['name'] for t in config['output']]}, the CPU build's "
                         f"{reference.files}"}  # fmt: skip
    encoder, served = _encoder(node), []
    for start in range(0, len(texts), PARITY_GROUP):
        feeds = {k: v for k, v in encoder(texts[start : start + PARITY_GROUP]).items() if k in inputs}
        rows = _infer(at["http"], step, feeds, inputs, common[:1])[common[0]]
        served.append(rows.reshape(len(rows), -1))
    a = np.concatenate(served)
    b = reference[common[0]][: len(a)]
    gate = CosineGate()  # the build's own embedding gate: its cosine per text and its floors
    report = gate.report(f"{step} served", len(a), [gate.compare(b, a, np.ones(a.shape[:1], dtype=bool))])
    return {
        "output": common[0], "texts": report.texts, "cosine_mean": report.cosine_mean,
        "cosine_min": report.cosine_min, "max_abs_diff": float(np.abs(a - b).max()),
        "gate": {"mean": COSINE_MEAN_MIN, "min": COSINE_MIN_MIN}, "passed": report.passed,
    }  # fmt: skip


def model_step(node: Node, texts: list[str], out: Path, quick: bool) -> dict[str, Any]:
    """The model step alone through the native backend, FP16 and FP32: one text a request at every concurrency,
    ``BATCHED`` texts a request, and (FP16) its outputs against the CPU build's FP32 model."""
    results: dict[str, Any] = {}
    for precision in ("fp16", "fp32"):
        if not (node.carry / "models" / f"{precision}.onnx").is_file():
            continue
        repository, step = _step_repository(node, precision)
        with node.server(repository, out / f"step_{precision}_server.log", [step]) as at:
            inputs = [t["name"] for t in _get(at["http"], f"/v2/models/{step}/config")["input"]]
            if precision == "fp16":
                results["parity"] = parity(node, at, step, texts[: 2 * PARITY_GROUP if quick else PARITY_TEXTS])
                print(json.dumps({"parity": results["parity"]}), flush=True)
            data = out / f"step_input_data_{precision}.json"
            _token_data(node, texts, data, inputs)
            points = [_perf(node, at, step, data, c, out, quick) for c in CONCURRENCY]
            batched = out / f"step_batched_data_{precision}.json"
            _batched_data(_fixed_rows(node, texts, inputs), batched)
            results[f"{precision}_b{BATCHED}"] = [
                _perf(node, at, step, batched, c, out, quick, batch=BATCHED) for c in BATCHED_CONCURRENCY
            ]
        results[precision] = points
        print(json.dumps({precision: points, "batched": results[f"{precision}_b{BATCHED}"]}), flush=True)
    return results


# --- 5. in process ------------------------------------------------------------------------------------------------


def _rate(run: Callable[[dict], Any], feeds: list[dict], batch: int, seconds: float, sync=lambda: None) -> dict:
    for feed in feeds[:3]:
        run(feed)
    sync()
    done, start, latencies = 0, time.perf_counter(), []
    while time.perf_counter() - start < seconds:
        for feed in feeds:
            tick = time.perf_counter()
            run(feed)
            sync()
            latencies.append(time.perf_counter() - tick)
            done += batch
    latencies.sort()
    return {"texts_per_s": done / (time.perf_counter() - start), "p50_ms": 1000 * latencies[len(latencies) // 2]}


def in_process(node: Node, texts: list[str], quick: bool) -> dict[str, Any]:
    """The model files under ONNX Runtime's CUDA provider (CPU in the dry run), and PyTorch FP16 on a GPU."""
    sys.path.insert(0, str(node.carry / "src"))
    import onnxruntime as ort

    encoder = _encoder(node)
    seconds = 0.2 if quick else 3.0
    batches = (1, 8) if quick else GPU_BATCHES
    providers = ["CPUExecutionProvider"] if node.cpu else ["CUDAExecutionProvider", "CPUExecutionProvider"]
    results: dict[str, Any] = {"onnxruntime": ort.__version__}
    for precision in ("fp16", "fp32"):
        path = node.carry / "models" / f"{precision}.onnx"
        if not path.is_file():
            continue
        session = ort.InferenceSession(str(path), providers=providers)
        results[f"{precision}_providers"] = session.get_providers()
        names = {i.name for i in session.get_inputs()}
        for batch in batches:
            feeds = [{k: v for k, v in encoder(texts[i : i + batch]).items() if k in names}
                     for i in range(0, len(texts) - batch + 1, batch)]  # fmt: skip
            results[f"ort_{precision}_b{batch}"] = _rate(partial(session.run, None), feeds, batch, seconds)
        fixed = _fixed_rows(node, texts, sorted(names))  # the batched point's very request
        results[f"ort_{precision}_fixed_b{BATCHED}"] = _rate(partial(session.run, None), [fixed], BATCHED, seconds)
    if not node.cpu and (node.carry / "config.json").is_file():
        results.update(_torch_fp16(node, encoder, texts, batches, seconds))
    return results


def _torch_fp16(node: Node, encoder: Any, texts: list[str], batches: tuple[int, ...], seconds: float) -> dict:
    """PyTorch FP16 on the same architecture (random weights: speed does not depend on them), mean pooled."""
    import torch
    from transformers import AutoConfig, AutoModel

    from tritongen.contract import ATTENTION_MASK

    model = AutoModel.from_config(AutoConfig.from_pretrained(str(node.carry / "config.json"))).half().cuda().eval()

    def forward(feed: dict) -> None:
        with torch.inference_mode():
            inputs = {k: torch.from_numpy(v).cuda(non_blocking=True) for k, v in feed.items()}
            hidden = model(**inputs).last_hidden_state
            mask = inputs[ATTENTION_MASK].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            torch.nn.functional.normalize(pooled, dim=-1).float().cpu()

    results: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    for batch in batches:
        feeds = [encoder(texts[i : i + batch]) for i in range(0, len(texts) - batch + 1, batch)]
        results[f"torch_fp16_b{batch}"] = _rate(forward, feeds, batch, seconds, sync=torch.cuda.synchronize)
    return results


# --- 6. the whole ensemble ---------------------------------------------------------------------------------------


def ensemble(node: Node, texts: list[str], out: Path, quick: bool) -> dict[str, Any]:
    """The whole build served (KIND_GPU model step; KIND_CPU in the dry run), text in, at every concurrency."""
    repository = node.work / "ensemble_repo"
    shutil.copytree(node.carry / "repo", repository, symlinks=True)
    step = next(p for p in repository.iterdir() if p.name.endswith("_model"))
    model_file = next(p for p in step.glob("[0-9]*/model.onnx"))
    model_file.unlink(missing_ok=True)
    model_file.symlink_to(node.carry / "models" / "fp16.onnx")
    config = step / "config.pbtxt"
    config.write_text(_on_device(config.read_text(), node.cpu))
    name = json.loads((node.carry / "build.json").read_text())["name"]
    models = [p.name for p in repository.iterdir() if (p / "config.pbtxt").is_file()]
    data = out / "text_input_data.json"
    data.write_text(json.dumps({"data": [{"TEXT": {"content": [t], "shape": [1]}} for t in texts]}))
    with node.server(repository, out / "ensemble_server.log", models) as at:
        points = [_perf(node, at, name, data, c, out, quick) for c in CONCURRENCY]
        roles = {m: m.removeprefix(name + "_") for m in models if m != name}
        for point in points:  # the server's CPU by step, named by role (tokenizer, postprocess) and frontend
            point["cpu_ms_per_request"] = {roles.get(k, k): v for k, v in point.get("cpu_ms_per_request", {}).items()}
    return {"name": name, "cores": os.cpu_count(), "points": points}


# --- the report ---------------------------------------------------------------------------------------------------


def served_against_in_process(report: dict[str, Any]) -> dict[str, Any]:
    """Each precision's served texts/s at ``BATCHED`` texts a request over the same request run in process."""
    steps, alone = report.get("model_step") or {}, report.get("in_process") or {}
    ratios: dict[str, Any] = {}
    for precision in ("fp16", "fp32"):
        points = steps.get(f"{precision}_b{BATCHED}") if isinstance(steps, dict) else None
        base = alone.get(f"ort_{precision}_fixed_b{BATCHED}") if isinstance(alone, dict) else None
        if not points or not base:
            continue
        ratios[precision] = {
            "in_process_texts_per_s": base["texts_per_s"],
            **{f"c{p['concurrency']}": p.get("texts_per_s", 0.0) / base["texts_per_s"] for p in points},
        }
    return ratios


def _markdown(report: dict[str, Any]) -> str:
    lines = [f"# GPU-node check ({'dry run, KIND_CPU' if report['cpu'] else 'KIND_GPU'})", ""]
    lines += [f"- {key}: {value}" for key, value in report.get("layout", {}).items()]
    lines += [f"- device: {report.get('device', 'none')}", ""]
    for part in ("stub", "verify"):
        lines.append(f"- {part}: {json.dumps(report.get(part))[:600]}")
    for precision, points in (report.get("model_step") or {}).items():
        if not isinstance(points, list):
            continue
        header = "| concurrency | texts/s | p50 ms | p99 ms | batch | GPU % |"
        lines += ["", f"## Model step alone, {precision}", "", header, "|---:|---:|---:|---:|---:|---:|"]
        for p in points:
            gpu = (p.get("gpu_utilisation") or {}).get("mean_pct")
            lines.append(
                f"| {p['concurrency']} | {p.get('texts_per_s', 0):,.0f} | {p.get('p50_ms', 0):.2f} | "
                f"{p.get('p99_ms', 0):.2f} | {p.get('average_batch', 0):.1f} | {'' if gpu is None else f'{gpu:.0f}'} |"
            )
    lines += ["", f"- parity: {json.dumps((report.get('model_step') or {}).get('parity'))}"]
    for precision, ratio in (report.get("served_vs_in_process") or {}).items():
        figures = ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items() if k.startswith("c"))
        lines.append(f"- served / in process, {precision}, {BATCHED} texts a request: {figures} "
                     f"(in process {ratio['in_process_texts_per_s']:,.0f} texts/s)")  # fmt: skip
    whole = report.get("ensemble") or {}
    if isinstance(whole.get("points"), list):
        header = "| concurrency | texts/s | p50 ms | p99 ms | server CPU ms/request by process |"
        lines += ["", f"## The whole ensemble on {whole.get('cores')} cores", "", header, "|---:|---:|---:|---:|---|"]
        for p in whole["points"]:
            cpu = ", ".join(f"{k} {v:.3f}" for k, v in p.get("cpu_ms_per_request", {}).items())
            lines.append(f"| {p['concurrency']} | {p.get('texts_per_s', 0):,.0f} | {p.get('p50_ms', 0):.2f} | "
                         f"{p.get('p99_ms', 0):.2f} | {cpu} |")  # fmt: skip
    lines += ["", "In process: " + json.dumps(report.get("in_process"))[:3000]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carry", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="dry run: KIND_CPU in place of the GPU")
    parser.add_argument("--quick", action="store_true", help="a few requests a point: proves the harness only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-node-"))
    node = Node(args.carry.resolve(), work, cpu=args.cpu)
    texts = json.loads((node.carry / "texts.json").read_text())[: 64 if args.quick else None]
    report: dict[str, Any] = {"cpu": args.cpu, "cores": os.cpu_count()}
    if not args.cpu and shutil.which("nvidia-smi"):
        report["device"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                 "--format=csv,noheader"]).stdout.strip()  # fmt: skip
    parts: list[tuple[str, Callable[[], Any]]] = [
        ("layout", node.lay_out),
        ("stub", lambda: stub(node, args.out)),
        ("verify", lambda: verify(node, args.out)),
        ("model_step", lambda: model_step(node, texts, args.out, args.quick)),
        ("in_process", lambda: in_process(node, texts, args.quick)),
        ("ensemble", lambda: ensemble(node, texts, args.out, args.quick)),
    ]
    failed = False
    try:
        for key, measure in parts:
            print(f"gpu_node_check: {key}…", flush=True)
            try:
                report[key] = measure()
            except (Exception, SystemExit) as exc:  # a measurement script reports and goes on
                report[key] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                failed = True
                if key == "layout":
                    break
            (args.out / "gpu_node.json").write_text(json.dumps(report, indent=1))
        report["served_vs_in_process"] = served_against_in_process(report)
        parity_result = (report.get("model_step") or {}).get("parity") or {}
        failed = failed or parity_result.get("passed") is False or "error" in parity_result
        (args.out / "gpu_node.json").write_text(json.dumps(report, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (args.out / "gpu_node.md").write_text(_markdown(report))
    print((args.out / "gpu_node.md").read_text(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
