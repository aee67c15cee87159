"""The built-in runtimes' build stages, attached to their runtimes on import; only the build imports this.

Each runtime folder's ``stages.py`` registers with ``@register_stages``; they read the build's plan
(``tritongen.builder.plan``), which sits above the runtimes' declarative entries.
"""

from __future__ import annotations

from tritongen.runtimes.onnxruntime import stages as onnxruntime
from tritongen.runtimes.openvino import stages as openvino
from tritongen.runtimes.tensorrt import stages as tensorrt

__all__ = ["onnxruntime", "openvino", "tensorrt"]
