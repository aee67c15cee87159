"""ONNX Runtime's spec sections: the session (``onnxruntime``) and its TensorRT accelerator (``tensorrt``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tritongen.buildspec.sections import RuntimeSettings, setting
from tritongen.errors import SpecError
from tritongen.parameters import StepParameters

__all__ = ["OnnxRuntimeParameters", "OnnxRuntimeSettings", "TensorRTSettings"]


@dataclass(frozen=True)
class OnnxRuntimeParameters(StepParameters):
    """The model step's ``parameters`` the build writes, in the onnxruntime backend's own words: session threads."""

    intra_op_thread_count: int | None = None  # None: ONNX Runtime decides
    inter_op_thread_count: int | None = None


@dataclass(frozen=True)
class OnnxRuntimeSettings(RuntimeSettings):
    """Session settings for the onnxruntime backend (``parameters`` and ``optimization``)."""

    section: ClassVar[str] = "onnxruntime"

    intra_op_threads: int = setting(  # 0 lets ONNX Runtime decide
        0, flag="intra_op_threads", type=int, help="ONNX Runtime intra-op threads (0: default)"
    )
    inter_op_threads: int = setting(
        0, flag="inter_op_threads", type=int, help="ONNX Runtime inter-op threads (0: default)"
    )
    # Triton's scale, as the native backend reads it: 0 all optimisations, -1 basic, 1 extended, 2 none.
    graph_optimization_level: Literal[-1, 0, 1, 2] = 1
    # On a GPU node (``device: gpu``): ONNX Runtime's TensorRT provider at FP16, as the container has it, or its
    # CUDA provider alone (for a node without TensorRT's libraries).
    gpu_accelerator: Literal["tensorrt", "cuda"] = setting(
        "tensorrt",
        flag="gpu_accelerator",
        choices=("tensorrt", "cuda"),
        help="on a GPU node (--device gpu): ONNX Runtime's TensorRT provider at FP16 (default), or its CUDA "
        "provider alone",
    )

    retired: ClassVar[dict[str, str]] = {
        "allow_spinning": "Triton's onnxruntime backend has no switch for it (its intra-op threads spin between "
        "operators, ONNX Runtime's default), so the container never honoured it",
    }

    def validate(self) -> None:
        """A graph optimisation level on Triton's scale, and a known GPU accelerator."""
        if self.graph_optimization_level not in (-1, 0, 1, 2):
            raise SpecError("graph_optimization_level must be -1, 0, 1 or 2")
        if self.gpu_accelerator not in ("tensorrt", "cuda"):
            raise SpecError(f"gpu_accelerator must be tensorrt or cuda, got {self.gpu_accelerator}")


@dataclass(frozen=True)
class TensorRTSettings(RuntimeSettings):
    """The onnxruntime backend's TensorRT execution accelerator (GPU targets only)."""

    section: ClassVar[str] = "tensorrt"

    enabled: bool = False
    precision_mode: Literal["FP32", "FP16", "INT8"] = "FP16"
    max_workspace_size_bytes: int = 1 << 30
    engine_cache_path: str = "/tmp/trt_engine_cache"
    profile_shapes: bool = True
