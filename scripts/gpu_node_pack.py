"""Pack what the GPU-node check needs into parts small enough to carry to a lent GPU machine, one call each.

The machine has Python 3.12, PyTorch with CUDA 13 and a CPU onnxruntime, no tritonserver and no network; each call
to it carries at most 64 MiB. So everything ``scripts/gpu_node_check.py`` uses goes into one tar, split into parts
of ``--part-mib`` (default 60) with a manifest of checksums:

- ``pytriton/``: the nvidia-pytriton 0.7.0 package (``tritonserver``, the Python backend and its stubs) and its
  libraries; ``bin/perf_analyzer`` and ``lib/`` (its unversioned ``libb64.so.0d`` and ``libcudart.so.12``);
- ``backends/onnxruntime/``: Triton's onnxruntime backend, the CUDA build for ONNX Runtime 1.31.1 from the shared
  folder (``gpu/``), with ``gpu/tools`` and ``gpu/test``;
- ``wheels/``: ``onnxruntime-gpu==1.31.1`` for Python 3.12 (its libraries go beside the backend, and it runs the
  in-process figures), and NumPy 1.26 and tokenizers for Python 3.12 (the stub's venv) from the 26.08 container's
  resolved wheels; none with ``--cpu`` (the dry run uses this machine's own);
- ``repo/``: the ``DEVICE=gpu`` build's newest version (its model file apart, in ``models/fp16.onnx``); the build's
  ``tokenizer.json``, its row length and buckets (``build.json``), the checkpoint's ``config.json`` (PyTorch's
  architecture), 512 bench texts;
- ``reference.npz``, where ``--fp32`` names a CPU build's FP32 ``model.onnx`` of the same model: its outputs for the
  parity texts, computed here under ONNX Runtime's CPU provider, that the served FP16 step must match on the GPU
  (the FP32 model itself stays here: it would cost a part of its own);
- ``src/tritongen`` and the check itself.

The tar is xz-compressed (``carry.tar.xz``): the server's libraries and perf_analyzer shrink to a third.

``python scripts/gpu_node_pack.py --repository REPO --name NAME --out DIR [--fp32 MODEL] [--cpu]``; then carry
``DIR/parts/*`` and run ``scripts/gpu_node_check.sh DIR/parts OUT`` there (docs/benchmarks.md, "On a GPU node").
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED_GPU = ROOT.parent / "shared" / "triton-backends" / "gpu"
ORT_GPU = "onnxruntime-gpu==1.31.1"
NODE_PYTHON = "3.12"


def _site_packages() -> Path:
    import pytriton

    return Path(pytriton.__file__).resolve().parents[1]


def _pytriton(carry: Path) -> None:
    """The pytriton package (only the stubs for the node's Python and this one's) and its libraries."""
    site = _site_packages()
    stubs = {NODE_PYTHON, f"{sys.version_info.major}.{sys.version_info.minor}"}

    def skip(folder: str, names: list[str]) -> list[str]:
        if Path(folder).name == "python_backend_stubs":
            return [n for n in names if n not in stubs]
        return [n for n in names if n == "__pycache__"]

    shutil.copytree(site / "pytriton", carry / "pytriton" / "pytriton", ignore=skip)
    shutil.copytree(site / "nvidia_pytriton.libs", carry / "pytriton" / "nvidia_pytriton.libs")
    (carry / "bin").mkdir()
    shutil.copy2(Path(sys.prefix) / "bin" / "perf_analyzer", carry / "bin" / "perf_analyzer")
    (carry / "lib").mkdir()
    for pattern, name in (("libb64-*.so.0d", "libb64.so.0d"), ("libcudart-*.so.12*", "libcudart.so.12")):
        shutil.copy2(sorted((site / "nvidia_pytriton.libs").glob(pattern))[0], carry / "lib" / name)
    # A libpython of the node's release, for a node whose Python has no shared library (the stub embeds one).
    found = sorted(Path.home().glob(f".pyenv/versions/{NODE_PYTHON}.*/lib/libpython{NODE_PYTHON}.so.1.0"))
    if found:
        (carry / "lib" / "libpython").mkdir()
        shutil.copy2(found[-1], carry / "lib" / "libpython" / found[-1].name)


def _backend(carry: Path) -> None:
    if not (SHARED_GPU / "onnxruntime" / "libtriton_onnxruntime.so").is_file():
        raise SystemExit(f"no GPU build of the onnxruntime backend in {SHARED_GPU}")
    target = carry / "backends" / "onnxruntime"
    target.mkdir(parents=True)
    for name in ("libtriton_onnxruntime.so", "libcudart.so.13"):
        shutil.copy2(SHARED_GPU / "onnxruntime" / name, target / name)
    for folder in ("tools", "test"):
        shutil.copytree(SHARED_GPU / folder, carry / "gpu" / folder)


def _wheels(carry: Path, cache: Path) -> None:
    """onnxruntime-gpu for the node's Python, and NumPy 1.26 and tokenizers for its stub."""
    target = carry / "wheels" / f"cp{NODE_PYTHON.replace('.', '')}"
    target.mkdir(parents=True)
    resolved = ROOT / ".venv-containers" / "26.08" / "wheels"
    for pattern in ("numpy-1.26*-cp312-*.whl", "tokenizers-*.whl"):
        found = sorted(resolved.glob(pattern)) or sorted(cache.glob(pattern))
        if not found:
            raise SystemExit(f"no {pattern} in {resolved} (make compat-venv resolves the 26.08 container's wheels)")
        shutil.copy2(found[-1], target)
    wheel = sorted(cache.glob("onnxruntime_gpu-1.31.1-cp312-*.whl"))
    if not wheel:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--python-version", NODE_PYTHON, "--platform", "manylinux_2_28_x86_64", "--dest", str(cache), ORT_GPU],
            check=True,
        )  # fmt: skip
        wheel = sorted(cache.glob("onnxruntime_gpu-1.31.1-cp312-*.whl"))
    shutil.copy2(wheel[-1], target)


def _build(carry: Path, repository: Path, name: str, fp32: Path | None) -> None:
    """The build's newest version, its model file apart; what the check reads of it."""
    from google.protobuf import text_format

    from tritongen.configs.model_config import to_proto
    from tritongen.configs.parser import read_config
    from tritongen.parameters import TokenizerFileParameters, TokenizerParameters
    from tritongen.repository.contents import step_names
    from tritongen.repository.staging import existing_versions

    (carry / "models").mkdir()
    for role, folder in step_names(name).items():
        source = repository / folder
        if not source.is_dir():
            continue  # a folded build has no postprocess step
        version = existing_versions(source)[-1]
        ignore = shutil.ignore_patterns("model.onnx") if role == "model" else None
        shutil.copytree(source / str(version), carry / "repo" / folder / "1", ignore=ignore)
        config = dataclasses.replace(read_config(source / "config.pbtxt"), version_policy=None)
        (carry / "repo" / folder / "config.pbtxt").write_text(text_format.MessageToString(to_proto(config)))
        if role == "model":
            shutil.copy2(source / str(version) / "model.onnx", carry / "models" / "fp16.onnx")
            (carry / "repo" / folder / "1" / "model.onnx").write_bytes(b"")  # the check links the model in
        if role == "tokenizer":
            tokenizer_file = config.read(TokenizerFileParameters).tokenizer_file
            shutil.copy2(source / str(version) / tokenizer_file, carry / "tokenizer.json")
            # The tokenizer step's parameters, as its config has them: the check reads them as the step does.
            summary = {"name": name, **config.read(TokenizerParameters).to_parameters()}
            (carry / "build.json").write_text(json.dumps(summary))
    record = json.loads((repository / name / str(existing_versions(repository / name)[-1]) / "build.json").read_text())
    checkpoint = Path(record["checkpoint"]) / "config.json"
    if checkpoint.is_file():
        shutil.copy2(checkpoint, carry / "config.json")
    if fp32 is not None:
        _reference(carry, fp32)


def _reference(carry: Path, fp32: Path) -> None:
    """The CPU build's FP32 outputs for the check's parity texts, encoded as the check encodes them."""
    import numpy as np
    import onnxruntime as ort

    sys.path.insert(0, str(carry))
    from gpu_node_check import PARITY_GROUP, PARITY_TEXTS, encoder_for

    texts = json.loads((carry / "texts.json").read_text())[:PARITY_TEXTS]
    encoder = encoder_for(carry)
    session = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    outputs: dict[str, list] = {o.name: [] for o in session.get_outputs()}
    for start in range(0, len(texts), PARITY_GROUP):
        feeds = {k: v for k, v in encoder(texts[start : start + PARITY_GROUP]).items() if k in wanted}
        for name, value in zip(outputs, session.run(list(outputs), feeds), strict=True):
            outputs[name].append(value.reshape(len(value), -1).astype(np.float32))
    np.savez(carry / "reference.npz", **{name: np.concatenate(parts) for name, parts in outputs.items()})


def _texts(carry: Path) -> None:
    from tritongen.data.datasets import bench_texts

    (carry / "texts.json").write_text(json.dumps(bench_texts(512), ensure_ascii=False))


def _sources(carry: Path) -> None:
    shutil.copytree(ROOT / "tritongen", carry / "src" / "tritongen", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "scripts" / "gpu_node_check.py", carry / "gpu_node_check.py")


def split(tar: Path, parts: Path, part_bytes: int) -> dict[str, object]:
    """``tar`` cut into ``carry.tar.xz.part-NN`` files of at most ``part_bytes``; the manifest of checksums."""
    parts.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    names = []
    with open(tar, "rb") as handle:
        while chunk := handle.read(part_bytes):
            whole.update(chunk)
            name = f"carry.tar.xz.part-{len(names):02d}"
            (parts / name).write_bytes(chunk)
            names.append(name)
    manifest = {"sha256": whole.hexdigest(), "bytes": tar.stat().st_size, "parts": names}
    (parts / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    shutil.copy2(ROOT / "scripts" / "gpu_node_check.sh", parts / "gpu_node_check.sh")
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--name", required=True, help="a DEVICE=gpu build (GPU_ACCELERATOR=cuda without TensorRT)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fp32", type=Path, help="a CPU build's FP32 model.onnx: the parity reference")
    parser.add_argument("--cpu", action="store_true", help="for the dry run here: no GPU wheels")
    parser.add_argument("--part-mib", type=int, default=56, help="a part + the working tree: at most 64 MiB")
    parser.add_argument("--cache", type=Path, default=ROOT / "build" / "wheels", help="downloaded wheels")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-pack-") as tmp:
        carry = Path(tmp) / "carry"
        carry.mkdir()
        _pytriton(carry)
        _backend(carry)
        if not args.cpu:
            _wheels(carry, args.cache)
        _texts(carry)
        _sources(carry)
        _build(carry, args.repository, args.name, args.fp32)
        plain = Path(tmp) / "carry.tar"
        with tarfile.open(plain, "w") as archive:
            archive.add(carry, arcname="carry")
        print(f"compressing {plain.stat().st_size / 2**20:.0f} MiB (xz)…", flush=True)
        subprocess.run(["xz", "-T2", "-6", str(plain)], check=True)
        tar = Path(tmp) / "carry.tar.xz"
        shutil.rmtree(args.out / "parts", ignore_errors=True)
        manifest = split(tar, args.out / "parts", args.part_mib * 1024 * 1024)
    print(f"{manifest['bytes'] / 2**20:.0f} MiB in {len(manifest['parts'])} parts under {args.out / 'parts'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
