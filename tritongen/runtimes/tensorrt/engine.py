"""TensorRT plans: optimisation profiles, builder flags and the engine build on a GPU node.

A plan is tied to the GPU architecture and the TensorRT version that built it (the 24.10
container has TensorRT 10.5), so ``make repo RUNTIME=tensorrt`` writes ``model.onnx`` and an
``engine.json`` build plan next to it, and ``make engine`` builds ``model.<sm>.plan`` on the
GPU node with the tensorrt Python package. The config's ``cc_model_filenames`` maps each
compute capability to its plan file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tritongen.errors import EngineError

__all__ = [
    "CC_TARGETS",
    "EnginePlan",
    "Profile",
    "build_engine",
    "builder_flags",
    "cc_model_filenames",
    "gpu_compute_capability",
    "plan_profiles",
]

# Data-centre GPUs the 24.10 container supports: A100, A10/A40, L4/L40, H100/H200.
CC_TARGETS = ("8.0", "8.6", "8.9", "9.0")


@dataclass(frozen=True)
class Profile:
    """One optimisation profile: (batch, sequence) shapes for min, opt and max."""

    min: tuple[int, int]
    opt: tuple[int, int]
    max: tuple[int, int]


@dataclass(frozen=True)
class EnginePlan:
    """Everything ``make engine`` needs, written as ``engine.json`` beside ``model.onnx``."""

    inputs: list[str]
    profiles: list[Profile]
    flags: list[str]
    workspace_bytes: int
    cc_model_filenames: dict[str, str]

    def to_json(self) -> str:
        """The plan as JSON."""
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> EnginePlan:
        """Read a plan written by :meth:`to_json`."""
        data = json.loads(text)
        data["profiles"] = [Profile(**{k: tuple(v) for k, v in p.items()}) for p in data["profiles"]]
        return cls(**data)


def plan_profiles(buckets: Sequence[int], max_batch_size: int) -> list[Profile]:
    """One profile per length bucket, so each padded shape gets kernels tuned for it.

    The tokenizer pads every request to a bucket, so profile ``i`` covers sequence lengths
    from just above the previous bucket up to bucket ``i``, and batch 1..max_batch_size,
    tuned for half the maximum batch.
    """
    if max_batch_size < 1:
        raise EngineError("TensorRT profiles need max_batch_size >= 1")
    profiles, previous = [], 0
    for bucket in sorted(set(buckets)):
        opt_batch = max(1, max_batch_size // 2)
        profiles.append(Profile(min=(1, previous + 1), opt=(opt_batch, bucket), max=(max_batch_size, bucket)))
        previous = bucket
    return profiles


def builder_flags(precision: str) -> list[str]:
    """TensorRT builder flags for a precision: INT8 keeps FP16 as the fallback for unquantised layers."""
    flags = {"fp32": [], "fp16": ["FP16"], "int8": ["INT8", "FP16"]}
    try:
        return flags[precision]
    except KeyError:
        raise EngineError(f"precision `{precision}` has no TensorRT flags; use fp32, fp16 or int8") from None


def cc_model_filenames(targets: Sequence[str] = CC_TARGETS) -> dict[str, str]:
    """Plan file name per compute capability, e.g. ``{"9.0": "model.sm90.plan"}``."""
    return {cc: f"model.sm{cc.replace('.', '')}.plan" for cc in targets}


def gpu_compute_capability() -> str | None:
    """Compute capability of GPU 0 (e.g. ``"9.0"``), or None without an NVIDIA GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()  # fmt: skip
    except (subprocess.SubprocessError, OSError):
        return None
    return out[0] if out else None


def build_engine(version_dir: Path, *, log: object = print) -> Path:
    """Build the plan for this machine's GPU from ``model.onnx`` and ``engine.json`` in ``version_dir``."""
    cc = gpu_compute_capability()
    if cc is None:
        raise EngineError(
            "no NVIDIA GPU found: build the engine on the GPU node that will serve it "
            "(a TensorRT plan is tied to its GPU and TensorRT version)"
        )
    try:
        import tensorrt as trt
    except ImportError:
        raise EngineError(
            "the tensorrt Python package is missing; install tensorrt matching the server's TensorRT"
        ) from None
    plan = EnginePlan.from_json((version_dir / "engine.json").read_text())
    filename = plan.cc_model_filenames.get(cc, f"model.sm{cc.replace('.', '')}.plan")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(version_dir / "model.onnx")):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EngineError(f"TensorRT cannot parse model.onnx: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, plan.workspace_bytes)
    for flag in plan.flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    for profile in plan.profiles:
        shapes = builder.create_optimization_profile()
        for name in plan.inputs:
            shapes.set_shape(name, profile.min, profile.opt, profile.max)
        config.add_optimization_profile(shapes)
    log(f"Building TensorRT engine for sm{cc} with {len(plan.profiles)} profiles, flags {plan.flags or ['FP32']}…")
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineError("TensorRT failed to build the engine (see the messages above)")
    target = version_dir / filename
    target.write_bytes(bytes(serialized))
    return target
