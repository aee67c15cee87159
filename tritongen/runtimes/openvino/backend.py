"""A Python-based Triton backend named ``openvino`` that runs ``model.xml`` (OpenVINO IR) on CPU.

The pytriton build of ``tritonserver`` ships only the Python backend. Installed as
``<backend-directory>/openvino/model.py``, this module serves every model whose config says
``backend: "openvino"`` -- the config files the official container serves with its native openvino
backend. It reads the same ``parameters`` as that backend (``PERFORMANCE_HINT``, ``NUM_STREAMS``,
``INFERENCE_NUM_THREADS``, ``HINT_BF16``) and no others, refuses what its load refuses, and batches exactly as the
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
        self.session = OpenVinoSession(path, backend_properties(parameters), batch=self.max_batch_size)
        self.refuse_as_native(config, self.session.signature("inputs"), self.session.signature("outputs"))

    def batch_refusal(self, rows: int) -> str | None:
        """With batching, the native backend runs only batches of exactly ``max_batch_size`` rows.

        Its ``ENABLE_BATCH_PADDING`` (the way around it) is broken upstream, so the generator never batches an
        openvino model step: it takes each request whole (``max_batch_size: 0``).
        """
        if self.max_batch_size <= 0 or rows == self.max_batch_size:
            return None
        return (
            f"expected requests with batch size '{self.max_batch_size}', got '{rows}'... this error can be avoided "
            "by setting 'ENABLE_BATCH_PADDING' parameter in model configuration to 'YES' at a performance cost."
        )
