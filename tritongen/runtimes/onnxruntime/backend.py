"""A Python-based Triton backend named ``onnxruntime`` that runs ``model.onnx`` on CPU.

The pytriton build of ``tritonserver`` ships only the Python backend. Installed as
``<backend-directory>/onnxruntime/model.py``, this module serves every model whose config
says ``backend: "onnxruntime"`` -- the same config files the official container serves
with its native onnxruntime backend.

All requests of one ``execute`` are concatenated and run in a single ``InferenceSession.run``, every column as
sent (the tokenizer pads each request to its length bucket, and the native backend computes that padding too: a
dynamic INT8 model's scales see it); the outputs are split back per request. Triton batches only requests of one
shape; should widths differ, the narrower are widened with padding on the side their requests are padded on
(``padding_side: left`` checkpoints: masks that start with zeros and end with ones).
Session settings come from the config exactly as the native backend reads them (:func:`session_options`), so
that what is measured here is what the container runs, and a config the native backend refuses at load is refused
here too, with its words (:func:`native_refusal`; ``tests/runtimes/test_backend_conformance.py`` holds both to
one table).
What still differs: each execute is one more process hop (the Python stub), and its ONNX Runtime is the
project's own release, not the container's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.contract import ATTENTION_MASK

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # outside the server: importable for tests
    pb_utils = None

__all__ = [
    "TritonPythonModel",
    "cpp_int",
    "native_options",
    "native_refusal",
    "pad_and_concatenate",
    "padding_side",
    "session_options",
]

# Triton's ``optimization.graph.level`` -> ONNX Runtime's, as the native backend maps it (``src/onnxruntime.cc``,
# r24.10 to r26.06): -1 basic, 1 extended, 2 none; absent, 0 or anything else all optimisations.
_GRAPH_LEVELS = {-1: "ORT_ENABLE_BASIC", 1: "ORT_ENABLE_EXTENDED", 2: "ORT_DISABLE_ALL"}
# The model config ``parameters`` the native backend turns into session options (besides its CUDA and TensorRT
# ones): the thread counts and execution mode, the two memory switches and one session config entry.
_THREADS = {"intra_op_thread_count": "intra_op_num_threads", "inter_op_thread_count": "inter_op_num_threads"}
_SWITCHES = {"enable_mem_arena": "enable_cpu_mem_arena", "enable_mem_pattern": "enable_mem_pattern"}
_SESSION_ENTRIES = ("session.use_device_allocator_for_initializers",)


# ONNX Runtime's element types as Triton's (``tensor(int64)`` -> ``TYPE_INT64``), for the native load checks.
_ORT_TYPES = {
    "tensor(float)": "TYPE_FP32", "tensor(float16)": "TYPE_FP16", "tensor(double)": "TYPE_FP64",
    "tensor(int64)": "TYPE_INT64", "tensor(int32)": "TYPE_INT32", "tensor(int16)": "TYPE_INT16",
    "tensor(int8)": "TYPE_INT8", "tensor(uint8)": "TYPE_UINT8", "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32", "tensor(uint64)": "TYPE_UINT64", "tensor(bool)": "TYPE_BOOL",
    "tensor(string)": "TYPE_STRING",
}  # fmt: skip
_TRUE, _FALSE = ("true", "on", "1"), ("false", "off", "0")
Signature = dict[str, tuple[str, list[int]]]  # a model's tensors: name -> (Triton type, dims with -1 for free axes)


def cpp_int(value: str, key: str) -> int:
    """``value`` as the backends' ``std::stoi`` reads it: a leading integer, the rest ignored; else refused."""
    leading = re.match(r"\s*([+-]?\d+)", value)
    if leading is None:
        raise ValueError(f"failed to convert '{value}' to integral number (parameter '{key}')")
    return int(leading.group(1))


def _cpp_bool(value: str, key: str) -> bool:
    lowered = value.lower()
    if lowered not in _TRUE + _FALSE:
        raise ValueError(f"failed to convert '{value}' to boolean (parameter '{key}')")
    return lowered in _TRUE


def _shape(dims: list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _dims_refusal(name: str, tensor: str, model: list[int], dims: list[int], batching: int, exact: bool) -> str | None:
    """The onnxruntime backend's ``CompareDimsSupported``: why ``model``'s shape cannot serve the config's ``dims``."""
    if batching and (not model or model[0] != -1):
        return (
            f"model '{name}', tensor '{tensor}': for the model to support batching the shape should have at least 1 "
            f"dimension and the first dimension must be -1; but shape expected by the model is {_shape(model)}"
        )
    full = [-1, *dims] if batching else list(dims)
    same = len(model) == len(full) and all(m == f for m, f in zip(model, full, strict=True) if exact or m != -1)
    return None if same else _dims_message(name, tensor, model, full)


def _openvino_dims_refusal(
    name: str, tensor: str, model: list[int], dims: list[int], batching: int, exact: bool
) -> str | None:
    """The openvino backend's ``CompareDimsSupported``.

    Its batch axis is set to ``max_batch_size`` (``set_batch``) rather than compared, a config's free axis is not
    compared on inputs, and a free model axis matches anything.
    """
    if batching and not model:
        return f"model '{name}', tensor '{tensor}': for the model to support batching the shape should have at least 1"
    full = [batching, *dims] if batching else list(dims)
    if len(model) != len(full):
        return _dims_message(name, tensor, model, full)
    for axis, (m, f) in enumerate(zip(model, full, strict=True)):
        compared = exact or not batching or (axis != 0 and f != -1)
        if compared and not (batching and axis == 0) and m != -1 and m != f:
            return _dims_message(name, tensor, model, full)
    return None


def _dims_message(name: str, tensor: str, model: list[int], full: list[int]) -> str:
    return (
        f"model '{name}', tensor '{tensor}': the model expects {len(model)} dimensions (shape {_shape(model)}) but "
        f"the model configuration specifies {len(full)} dimensions (shape {_shape(full)})"
    )


def _config_dims(tensor: dict[str, Any]) -> list[int]:
    reshape = tensor.get("reshape")
    dims = reshape.get("shape", []) if isinstance(reshape, dict) and "shape" in reshape else tensor.get("dims", [])
    return [int(d) for d in dims]


def native_refusal(
    config: dict[str, Any], inputs: Signature, outputs: Signature, *, backend: str = "onnxruntime"
) -> str | None:
    """Why the native backend refuses to load ``config`` over a model of these tensors; None where it loads it.

    The r24.10 onnxruntime and openvino (``backend``) backends' ``ValidateInputs``/``ValidateOutputs``: as many
    inputs as the model has, each named as in the model, of its type (the openvino backend converts types
    instead) and of compatible dims (a free model axis takes any size); each output named as in the model, of
    its type and of exactly its dims; with batching, the model's first axis free (openvino sets it instead).
    """
    name = config.get("name", "")
    batching = max(int(config.get("max_batch_size", 0)), 0)
    check_types = backend != "openvino"
    compare = _openvino_dims_refusal if backend == "openvino" else _dims_refusal
    declared = config.get("input", [])
    if len(declared) != len(inputs):
        return (
            f"unable to load model '{name}', configuration expects {len(declared)} inputs, model provides {len(inputs)}"
        )
    for kind, tensors, model, exact in (
        ("input", declared, inputs, False),
        ("output", config.get("output", []), outputs, True),
    ):
        for tensor in tensors:
            io = tensor["name"]
            if kind == "input" and tensor.get("optional") and batching:
                return f"unable to load model '{name}', optional input '{io}' is not supported with batching"
            if io not in model:
                return f"unexpected inference {kind} '{io}', allowed {kind}s are: {', '.join(sorted(model))}"
            dtype, shape = model[io]
            if check_types and dtype != tensor.get("data_type"):
                return (
                    f"unable to load model '{name}', configuration expects datatype {tensor.get('data_type')} for "
                    f"{kind} '{io}', model provides {dtype}"
                )
            if shape:  # a scalar model tensor is not compared
                why = compare(name, io, shape, _config_dims(tensor), batching, exact)
                if why:
                    return why
    return None


def ort_signature(ports: list[Any]) -> Signature:
    """An ONNX Runtime session's inputs or outputs as :data:`Signature` (symbolic and unknown axes free)."""
    return {
        port.name: (
            _ORT_TYPES.get(port.type, port.type),
            [d if isinstance(d, int) and d >= 0 else -1 for d in port.shape or []],
        )
        for port in ports
    }


def session_options(model_config: dict[str, Any]) -> Any:
    """``onnxruntime.SessionOptions`` from a Triton model config, as the native onnxruntime backend makes them.

    It reads the parameters above and the graph level, and nothing else. Other ``session.*`` parameters are
    ignored there, so they are here: in particular ``session.intra_op.allow_spinning``, so that the intra-op
    threads spin between operators, ONNX Runtime's default and the only behaviour the container offers.
    """
    params = {k: v["string_value"] for k, v in (model_config.get("parameters") or {}).items()}
    mode = cpp_int(params.get("execution_mode", "0"), "execution_mode")
    if mode not in (0, 1):
        raise ValueError(
            f"Invalid configuration value provided. Expected values for execution_mode are 0 or 1 but got {mode}"
        )
    threads = [cpp_int(params.get(key, "0"), key) for key in _THREADS]
    level = int(((model_config.get("optimization") or {}).get("graph") or {}).get("level", 0))
    options = native_options(*threads, level, parallel=mode == 1)
    for key, attribute in _SWITCHES.items():
        if key in params:
            setattr(options, attribute, _cpp_bool(params[key], key))
    for key in _SESSION_ENTRIES:
        if key in params:
            options.add_session_config_entry(key, params[key])
    return options


def native_options(intra_op: int = 0, inter_op: int = 0, graph_level: int = 0, *, parallel: bool = False) -> Any:
    """``onnxruntime.SessionOptions`` as the native backend sets them from these values of a config.

    The intra- and inter-op thread counts where above 0 (else ONNX Runtime's default), Triton's graph level
    mapped to ONNX Runtime's, and the parallel execution mode; :func:`session_options` reads them from a config.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    if parallel:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    for attribute, threads in zip(_THREADS.values(), (intra_op, inter_op), strict=True):
        if threads > 0:
            setattr(options, attribute, threads)
    level = _GRAPH_LEVELS.get(graph_level, "ORT_ENABLE_ALL")
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    return options


def pad_and_concatenate(arrays: list[np.ndarray], side: str = "right") -> np.ndarray:
    """Concatenate [batch, seq] arrays along batch, padding shorter ones with zeros on ``side``."""
    if len(arrays) == 1:
        return arrays[0]
    if all(a.ndim < 2 for a in arrays) or len({a.shape[1:] for a in arrays}) == 1:
        return np.concatenate(arrays, axis=0)
    width = max(a.shape[1] for a in arrays)

    def widen(a: np.ndarray) -> list[tuple[int, int]]:
        extra = width - a.shape[1]
        return [(0, 0), (extra, 0) if side == "left" else (0, extra)] + [(0, 0)] * (a.ndim - 2)

    return np.concatenate([np.pad(a, widen(a)) for a in arrays], axis=0)


def padding_side(masks: list[np.ndarray]) -> str:
    """``left`` when some request is padded on the left (a row starts with padding and ends with a token)."""
    for mask in masks:
        if mask.ndim == 2 and mask.shape[1] and bool(((mask[:, 0] == 0) & (mask[:, -1] != 0)).any()):
            return "left"
    return "right"


class TritonPythonModel:
    """Runs the model step with ONNX Runtime.

    The batching is the runtime's ``session.run(names, feeds)`` only: the local openvino backend subclasses
    this class with an OpenVINO session that answers the same call.
    """

    runtime = "onnxruntime"
    default_model_filename = "model.onnx"

    def initialize(self, args: dict[str, str]) -> None:
        """Open an inference session on the version folder's model file."""
        import onnxruntime as ort

        config, path = self.setup(args)
        self.session = ort.InferenceSession(str(path), session_options(config), providers=["CPUExecutionProvider"])
        self.refuse_as_native(
            config, ort_signature(self.session.get_inputs()), ort_signature(self.session.get_outputs())
        )

    def refuse_as_native(self, config: dict[str, Any], inputs: Signature, outputs: Signature) -> None:
        """Fail the load where the native backend would (:func:`native_refusal`), with its words."""
        why = native_refusal(config, inputs, outputs, backend=self.runtime)
        if why is not None:
            raise ValueError(why)

    def setup(self, args: dict[str, str]) -> tuple[dict[str, Any], Path]:
        """Read the config's tensors; return the config and the model file's path (which must exist)."""
        config = json.loads(args["model_config"])
        filename = config.get("default_model_filename") or self.default_model_filename
        path = Path(args["model_repository"]) / args["model_version"] / filename
        if not path.is_file():
            raise FileNotFoundError(f"model file `{path}` is missing")
        self.input_names = [inp["name"] for inp in config["input"]]
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.outputs = {
            out["name"]: pb_utils.triton_string_to_numpy(out["data_type"]) if pb_utils else np.float32
            for out in config["output"]
        }
        return config, path

    def batch_refusal(self, rows: int) -> str | None:
        """Why the native backend fails a batch of ``rows`` rows, as it words it; None: it runs any batch."""
        return None

    def execute(self, requests: list[Any]) -> list[Any]:
        """Run all requests in one session call and split the outputs back."""
        feeds: dict[str, list[np.ndarray]] = {name: [] for name in self.input_names}
        sizes = []
        for request in requests:
            for name in self.input_names:
                feeds[name].append(pb_utils.get_input_tensor_by_name(request, name).as_numpy())
            sizes.append(feeds[self.input_names[0]][-1].shape[0])
        refused = self.batch_refusal(sum(sizes))
        if refused is not None:
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(refused)) for _ in requests]
        side = padding_side(feeds.get(ATTENTION_MASK, []))
        inputs = {name: pad_and_concatenate(arrays, side) for name, arrays in feeds.items()}
        # Only what some request asked for: an ensemble step asks for the outputs it maps, so a graph that
        # also keeps its raw output (a folded postprocess) does not copy it back for nothing.
        every = set(self.outputs)
        wanted = [set(request.requested_output_names()) & every or every for request in requests]
        names = [name for name in self.outputs if any(name in w for w in wanted)]
        try:
            values = self.session.run(names, inputs)
        except Exception as exc:  # onnxruntime raises its own exception types for bad inputs
            error = pb_utils.TritonError(f"{self.runtime} failed: {exc}".splitlines()[0])
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        results = dict(zip(names, values, strict=True))
        responses = []
        start = 0
        for size, asked in zip(sizes, wanted, strict=True):
            tensors = [
                pb_utils.Tensor(name, np.ascontiguousarray(results[name][start : start + size], dtype=dtype))
                for name, dtype in self.outputs.items()
                if name in asked
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses
