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
    "IR_FILE",
    "OpenVinoSession",
    "backend_properties",
    "convert_to_ir",
    "cpu_precisions",
    "openvino_version",
    "quantize_ir",
]

IR_FILE = "model.xml"  # the native backend's default model file; its weights are model.bin beside it


def openvino_version() -> str:
    """The installed OpenVINO release, e.g. ``2026.4.1``."""
    import openvino

    return openvino.get_version().split("-")[0]


def convert_to_ir(onnx_path: Path, xml_path: Path) -> None:
    """Convert ``onnx_path`` to IR at ``xml_path`` (weights kept in FP32: precision is a runtime hint)."""
    import openvino as ov

    model = ov.convert_model(str(onnx_path))
    ov.save_model(model, str(xml_path), compress_to_fp16=False)


def quantize_ir(xml_path: Path, target: Path, feeds: Sequence[Mapping[str, np.ndarray]]) -> str:
    """Post-training INT8 of the IR at ``xml_path`` into ``target`` with NNCF; return NNCF's version.

    NNCF's transformer preset: MatMul weights per channel and activations calibrated on ``feeds`` (model
    inputs, one text each), with the ops that lose accuracy in INT8 (softmax, layer norms...) left in float.
    The result is IR with FakeQuantize nodes, which the CPU plugin runs as INT8 kernels (VNNI/AMX where the
    CPU has them) and which any OpenVINO since 2022 reads.
    """
    import logging

    import nncf
    import openvino as ov

    nncf.set_log_level(logging.ERROR)
    model = ov.Core().read_model(str(xml_path))
    quantized = nncf.quantize(
        model,
        nncf.Dataset(list(feeds)),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(feeds),
    )
    ov.save_model(quantized, str(target), compress_to_fp16=False)
    return str(nncf.__version__)


def cpu_precisions() -> tuple[str, ...]:
    """The inference precisions OpenVINO's CPU plugin can run here: ``f32``, and ``bf16`` where the CPU has it.

    OpenVINO asks the CPU itself; flags given in ``TRITONGEN_CPU_FLAGS`` without a BF16 one take BF16 away.
    """
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    bf16 = "BF16" in capabilities and any(flag in cpu_flags() for flag in BF16_FLAGS)
    return ("f32", "bf16") if bf16 else ("f32",)


def backend_properties(parameters: Mapping[str, str]) -> dict[str, Any]:
    """OpenVINO properties from a model config's ``parameters``, read as the native backend reads them.

    ``INFERENCE_PRECISION_HINT`` is ours, for the build's gate and the local backend only: the native backend
    refuses parameters it does not know, so generated configs never carry it.
    """
    properties: dict[str, Any] = {}
    for key, raw in parameters.items():
        value = str(raw).strip()
        if key == "PERFORMANCE_HINT":
            properties["PERFORMANCE_HINT"] = value.upper()
        elif key == "NUM_STREAMS":
            properties["NUM_STREAMS"] = value.upper() if not value.isdigit() else int(value)
        elif key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            properties[key] = int(value)
        elif key == "HINT_BF16":
            if value.upper() != "YES":
                raise ValueError(f"expected the parameter 'HINT_BF16' to be YES, got {value}")
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        elif key == "INFERENCE_PRECISION_HINT":
            properties["INFERENCE_PRECISION_HINT"] = value.lower()
        else:
            raise ValueError(f"the parameter '{key}' is not supported by the openvino backend")
    return properties


class OpenVinoSession:
    """An IR compiled for the CPU with ``properties``, answering ``run(names, feeds)`` like an ONNX Runtime session."""

    def __init__(self, xml_path: Path, properties: Mapping[str, Any] | None = None) -> None:
        import openvino as ov

        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(str(xml_path)), "CPU", dict(properties or {}))
        self.request = self.compiled.create_infer_request()
        self.output_names = [port.get_any_name() for port in self.compiled.outputs]

    @property
    def precision(self) -> str:
        """The inference precision the plugin chose (``f32`` or ``bf16``)."""
        return str(self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())

    def run(self, names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs ``names`` (all when None) for one batch of ``feeds``."""
        results = self.request.infer({name: np.ascontiguousarray(value) for name, value in feeds.items()})
        by_name = {port.get_any_name(): value for port, value in results.items()}
        return [np.asarray(by_name[name]).copy() for name in (names or self.output_names)]
