"""OpenVINO's spec section (``openvino``): the native backend's properties."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tritongen.buildspec.sections import RuntimeSettings, setting
from tritongen.errors import SpecError
from tritongen.parameters import StepParameters

__all__ = ["OpenVinoParameters", "OpenVinoSettings"]


@dataclass(frozen=True)
class OpenVinoParameters(StepParameters):
    """The model step's ``parameters`` the build writes, in the openvino backend's own words (its properties)."""

    PERFORMANCE_HINT: str | None = None  # the backend's own spelling
    NUM_STREAMS: str | None = None  # a number, or AUTO
    INFERENCE_NUM_THREADS: int | None = None  # None: every core


@dataclass(frozen=True)
class OpenVinoSettings(RuntimeSettings):
    """The openvino backend's properties (its ``parameters``), for ``runtime: openvino``.

    There is no precision setting: OpenVINO computes in BF16 on CPUs that have it and FP32 elsewhere, and
    the native backend cannot force FP32, so the build gates both (``tritongen.runtimes.openvino.ir``).
    """

    section: ClassVar[str] = "openvino"

    performance_hint: Literal["LATENCY", "THROUGHPUT"] = setting(
        "LATENCY", flag="openvino_hint", choices=("LATENCY", "THROUGHPUT"), help="openvino PERFORMANCE_HINT"
    )
    num_streams: int = setting(  # executor streams per instance; 0: AUTO
        1, flag="openvino_streams", type=int, help="openvino NUM_STREAMS per instance (0: AUTO; default 1)"
    )
    inference_threads: int = setting(  # INFERENCE_NUM_THREADS; 0: OpenVINO's default (every core)
        0, flag="openvino_threads", type=int, help="openvino INFERENCE_NUM_THREADS (0: default)"
    )

    def validate(self) -> None:
        """A hint the backend knows, and counts it takes."""
        if self.performance_hint not in ("LATENCY", "THROUGHPUT"):
            raise SpecError(f"openvino performance_hint must be LATENCY or THROUGHPUT, got {self.performance_hint}")
        if self.num_streams < 0 or self.inference_threads < 0:
            raise SpecError("openvino num_streams and inference_threads must be >= 0 (0: OpenVINO decides)")
