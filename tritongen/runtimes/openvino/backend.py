"""A Python-based Triton backend named ``openvino`` that runs ``model.xml`` (OpenVINO IR) on CPU.

The pytriton build of ``tritonserver`` ships only the Python backend. Installed as
``<backend-directory>/openvino/model.py``, this module serves every model whose config says
``backend: "openvino"`` -- the config files the official container serves with its native openvino
backend. It reads the same ``parameters`` as that backend (``PERFORMANCE_HINT``, ``NUM_STREAMS``,
``INFERENCE_NUM_THREADS``, ``HINT_BF16``) and refuses others as it does, and batches exactly as the
local onnxruntime backend does (one run per ``execute``, padding columns cut).
"""

from __future__ import annotations

from tritongen.runtimes.onnxruntime.backend import TritonPythonModel as _BatchedModel
from tritongen.runtimes.openvino.ir import IR_FILE, OpenVinoSession, backend_properties

__all__ = ["TritonPythonModel"]


class TritonPythonModel(_BatchedModel):
    """Runs the model step with OpenVINO's CPU plugin."""

    runtime = "openvino"
    default_model_filename = IR_FILE

    def initialize(self, args: dict[str, str]) -> None:
        """Compile the version folder's IR with the config's properties."""
        config, path = self.setup(args)
        parameters = {k: v["string_value"] for k, v in (config.get("parameters") or {}).items()}
        self.session = OpenVinoSession(path, backend_properties(parameters))
