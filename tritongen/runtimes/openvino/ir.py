"""OpenVINO for the model step: convert the exported ONNX graph to IR, and run it as the backend will.

Triton's native ``openvino`` backend reads ``model.xml``/``model.bin`` (OpenVINO IR) and takes a few
properties from the config's ``parameters``: ``PERFORMANCE_HINT``, ``NUM_STREAMS``, ``INFERENCE_NUM_THREADS``
and ``HINT_BF16`` (``YES`` only). It cannot force FP32: OpenVINO's CPU plugin computes in BF16 by default on
CPUs that have it (AVX512_BF16, AMX). So a build gates every precision the served model can run at: FP32,
and BF16 wherever this CPU has it; the model card says which were measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.cpu import BF16_FLAGS, cpu_flags

__all__ = [
    "CONTAINER_OPENING",
    "IR_FILE",
    "OpenVinoSession",
    "backend_properties",
    "convert_to_ir",
    "cpu_precisions",
    "openvino_version",
]

IR_FILE = "model.xml"  # the native backend's default model file; its weights are model.bin beside it

# The compat gate's worker opening (``Runtime.container_opening``): the IR in the container's OpenVINO, compiled
# for the CPU at the precision asked. It imports only openvino: it runs in a venv of the container's releases.
CONTAINER_OPENING = r"""
import openvino as ov
core = ov.Core()
compiled = core.compile_model(core.read_model(model), "CPU", {"INFERENCE_PRECISION_HINT": precision})
request = compiled.create_infer_request()
version = label = "OpenVINO " + ov.get_version().split("-")[0]
def run(names, feeds):
    results = {port.get_any_name(): value for port, value in request.infer(feeds).items()}
    return [results[n].copy() for n in (names or [p.get_any_name() for p in compiled.outputs])]
"""


def openvino_version() -> str:
    """The installed OpenVINO release, e.g. ``2026.4.1``."""
    import openvino

    return openvino.get_version().split("-")[0]


def convert_to_ir(onnx_path: Path, xml_path: Path) -> None:
    """Convert ``onnx_path`` to IR at ``xml_path`` (weights kept in FP32: precision is a runtime hint)."""
    import openvino as ov

    model = ov.convert_model(str(onnx_path))
    ov.save_model(model, str(xml_path), compress_to_fp16=False)


def cpu_precisions() -> tuple[str, ...]:
    """The inference precisions OpenVINO's CPU plugin can run here: ``f32``, and ``bf16`` where the CPU has it.

    OpenVINO asks the CPU itself; flags given in ``TRITONGEN_CPU_FLAGS`` without a BF16 one take BF16 away.
    """
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    bf16 = "BF16" in capabilities and any(flag in cpu_flags() for flag in BF16_FLAGS)
    return ("f32", "bf16") if bf16 else ("f32",)


# The CPU parameters the r24.10 native backend reads (``ModelState::ParseParameters``); it reads no other key.
_NATIVE_PARAMETERS = (
    "INFERENCE_NUM_THREADS",
    "COMPILATION_NUM_THREADS",
    "HINT_BF16",
    "NUM_STREAMS",
    "PERFORMANCE_HINT",
)
_HINTS = ("latency", "throughput", "cumulative_throughput")
# OpenVINO's element types as Triton's.
_TRITON_TYPES = {
    "f32": "TYPE_FP32", "f16": "TYPE_FP16", "f64": "TYPE_FP64", "i64": "TYPE_INT64", "i32": "TYPE_INT32",
    "i16": "TYPE_INT16", "i8": "TYPE_INT8", "u8": "TYPE_UINT8", "boolean": "TYPE_BOOL",
}  # fmt: skip


def backend_properties(parameters: Mapping[str, str]) -> dict[str, Any]:
    """OpenVINO properties from a model config's ``parameters``, read as the r24.10 native backend reads them.

    Each value lower-cased; an empty one skipped; a thread count all digits; ``HINT_BF16`` only ``YES``;
    ``NUM_STREAMS`` ``AUTO``, ``NUMA`` or a number; ``PERFORMANCE_HINT`` one of the three modes. Any other key is
    not read, there or here (so no config can ask for FP32 on a BF16 CPU: ``cpu_precisions``).
    """
    properties: dict[str, Any] = {}
    for key in _NATIVE_PARAMETERS:
        value = str(parameters.get(key, "")).lower()
        if not value:
            continue
        if key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if not value.isdigit():
                raise ValueError(f"expected the parameter '{key}' to be a non-negative number, got {value}")
            properties[key] = int(value)
        elif key == "HINT_BF16":
            if value != "yes":
                raise ValueError(f"expected the parameter 'HINT_BF16' to be YES, got {value}")
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        elif key == "NUM_STREAMS":
            if value not in ("auto", "numa") and not value.isdigit():
                raise ValueError(
                    f"expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got {value}"
                )
            properties["NUM_STREAMS"] = int(value) if value.isdigit() else value.upper()
        else:
            if value not in _HINTS:
                modes = "/".join(h.upper() for h in _HINTS)
                raise ValueError(f"expected the parameter 'PERFORMANCE_HINT' to be {modes}, got {value}")
            properties["PERFORMANCE_HINT"] = value.upper()
    return properties


class OpenVinoSession:
    """An IR compiled for the CPU with ``properties``, answering ``run(names, feeds)`` like an ONNX Runtime session."""

    def __init__(self, xml_path: Path, properties: Mapping[str, Any] | None = None, *, batch: int = 0) -> None:
        """``batch``: fix every input's first axis at that size, as the native backend does for ``max_batch_size``."""
        import openvino as ov

        core = ov.Core()
        self.model = core.read_model(str(xml_path))
        self.signatures = {ports: self._signature(ports) for ports in ("inputs", "outputs")}
        if batch > 0:
            steps = ov.preprocess.PrePostProcessor(self.model)
            for port in self.model.inputs:
                steps.input(port.get_any_name()).tensor().set_layout(ov.Layout("N..."))
            self.model = steps.build()
            ov.set_batch(self.model, batch)
        self.compiled = core.compile_model(self.model, "CPU", dict(properties or {}))
        self.request = self.compiled.create_infer_request()
        self.output_names = [port.get_any_name() for port in self.compiled.outputs]

    @property
    def precision(self) -> str:
        """The inference precision the plugin chose (``f32`` or ``bf16``)."""
        return str(self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())

    def signature(self, ports: str) -> dict[str, tuple[str, list[int]]]:
        """The IR's ``inputs`` or ``outputs`` as the native backend's load checks read them (free axes -1)."""
        return self.signatures[ports]

    def _signature(self, ports: str) -> dict[str, tuple[str, list[int]]]:
        found = {}
        for port in getattr(self.model, ports):
            dims = [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]
            kind = port.get_element_type().get_type_name()
            found[port.get_any_name()] = (_TRITON_TYPES.get(kind, kind), dims)
        return found

    def run(self, names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs ``names`` (all when None) for one batch of ``feeds``."""
        results = self.request.infer({name: np.ascontiguousarray(value) for name, value in feeds.items()})
        by_name = {port.get_any_name(): value for port, value in results.items()}
        return [np.asarray(by_name[name]).copy() for name in (names or self.output_names)]
