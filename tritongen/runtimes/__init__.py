"""The model step's runtimes (ONNX Runtime, OpenVINO, TensorRT): one folder each, found through the registry.

A runtime folder holds its entry (``__init__.py``: a :class:`Runtime` subclass registered with
:func:`register_runtime`; it also names its pip package, whose releases the container table keys, and opens its
model file for the compat gate and the bench's ceiling), its build stages (``stages.py``, loaded when the build
calls the entry's hooks) and the local server's stand-in for its native backend (``backend.py``), where it needs
one. As with tasks, an unknown name raises an error that lists the registered ones, and nothing outside this
package compares runtime names.
"""

from __future__ import annotations

# The built-in runtimes register themselves on import.
from tritongen.runtimes import onnxruntime, openvino, tensorrt
from tritongen.runtimes.base import Export, ModelStep, Runtime, Variant
from tritongen.runtimes.registry import (
    RUNTIMES,
    container_requirements,
    get_runtime,
    register_runtime,
    runtime_names,
    runtime_of_backend,
)

__all__ = [
    "RUNTIMES", "Export", "ModelStep", "Runtime", "Variant", "container_requirements", "get_runtime", "onnxruntime",
    "openvino", "register_runtime", "runtime_names", "runtime_of_backend", "tensorrt",
]  # fmt: skip
