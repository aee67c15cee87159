"""The model step's runtimes (ONNX Runtime, OpenVINO, TensorRT): one folder each, found through the registry.

A runtime folder holds its entry (``__init__.py``: a :class:`Runtime` subclass registered with
:func:`register_runtime`) and the modules its hooks load when the build calls them. As with tasks, an unknown
name raises an error that lists the registered ones, and nothing outside this package compares runtime names.
"""

from __future__ import annotations

# The built-in runtimes register themselves on import.
from tritongen.runtimes import onnxruntime, openvino, tensorrt
from tritongen.runtimes.base import BuildStages, ModelStepView, Runtime, SpecView
from tritongen.runtimes.registry import (
    RUNTIMES,
    get_runtime,
    register_runtime,
    register_stages,
    runtime_names,
    runtime_of_backend,
)

__all__ = [
    "RUNTIMES", "BuildStages", "ModelStepView", "Runtime", "SpecView", "get_runtime", "onnxruntime", "openvino",
    "register_runtime", "register_stages", "runtime_names", "runtime_of_backend", "tensorrt",
]  # fmt: skip
