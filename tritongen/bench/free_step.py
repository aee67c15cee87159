"""A built ensemble whose model step costs nothing: what its CPU side carries on its own.

On a GPU node the model step runs on the accelerator and everything else runs on the node's CPU: Triton's
frontend, the ensemble scheduler, and the Python tokenizer and postprocess steps. To measure that side apart
from any model, :func:`free_repository` copies an ensemble's newest versions with the model step swapped for
an ONNX graph of the same inputs and outputs that computes nothing: each output is a constant of the shape
the real one would have (its batch and sequence axes read from the first input's shape). It is served by
ONNX Runtime whatever the build's runtime (OpenVINO IR or a TensorRT plan), on the CPU, with the build's own
batching and instance counts.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from tritongen.configs.model_config import to_proto
from tritongen.configs.parser import read_config
from tritongen.errors import BenchError
from tritongen.repository.contents import step_names
from tritongen.repository.staging import existing_versions

__all__ = ["FREE_STEP_INSTANCES", "free_graph", "free_repository"]

# The free step's instances at least: here it is a Python stub, and the last step's instance thread also completes
# each request (a one-instance stand-in, not the CPU, carried 0.75x the one-text requests of two).
FREE_STEP_INSTANCES = 2

# Triton's data types (the config's enum names) as ONNX's.
_ONNX_TYPES = {
    "TYPE_FP32": "FLOAT",
    "TYPE_FP16": "FLOAT16",
    "TYPE_BF16": "BFLOAT16",
    "TYPE_FP64": "DOUBLE",
    "TYPE_INT64": "INT64",
    "TYPE_INT32": "INT32",
    "TYPE_INT8": "INT8",
    "TYPE_UINT8": "UINT8",
    "TYPE_BOOL": "BOOL",
}


def _full_dims(tensor: Any, batched: bool) -> list[int]:
    """A config tensor's dims with the batch axis in front where the model batches."""
    return ([-1] if batched else []) + list(tensor.dims)


def _onnx_type(config: Any, tensor: Any) -> int:
    from onnx import TensorProto
    from tritonclient.grpc import model_config_pb2 as mc

    name = mc.DataType.Name(tensor.data_type)
    if name not in _ONNX_TYPES:
        raise BenchError(f"`{config.name}`'s tensor {tensor.name} is {name}; a model step cannot take it")
    return int(getattr(TensorProto, _ONNX_TYPES[name]))


def _int64s(name: str, values: list[int]) -> Any:
    from onnx import TensorProto, helper

    return helper.make_node(
        "Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values)
    )


def free_graph(config: Any) -> Any:
    """An ONNX model with ``config``'s inputs and outputs that computes nothing (``config``: a ``ModelConfig``).

    Each output is zeros of its shape: fixed dims as declared, and the n-th variable one (batch, then sequence)
    the first input's n-th variable axis.
    """
    from onnx import helper

    batched = config.max_batch_size > 0
    first = config.input[0]
    variable = [axis for axis, d in enumerate(_full_dims(first, batched)) if d == -1]
    nodes = [helper.make_node("Shape", [first.name], ["shape_in"])]
    outputs = []
    for index, output in enumerate(config.output):
        parts, free = [], iter(variable)
        for position, dim in enumerate(_full_dims(output, batched)):
            part = f"out{index}_dim{position}"
            parts.append(part)
            if dim != -1:
                nodes.append(_int64s(part, [dim]))
                continue
            axis = next(free, None)
            if axis is None:
                raise BenchError(f"`{config.name}`'s output {output.name} has more free axes than its input")
            nodes += [_int64s(f"{part}_at", [axis]), _int64s(f"{part}_to", [axis + 1])]
            nodes.append(helper.make_node("Slice", ["shape_in", f"{part}_at", f"{part}_to"], [part]))
        kind = _onnx_type(config, output)
        nodes += [
            helper.make_node("Concat", parts, [f"out{index}_shape"], axis=0),
            helper.make_node(
                "ConstantOfShape",
                [f"out{index}_shape"],
                [output.name],
                value=helper.make_tensor("zero", kind, [1], [0]),
            ),
        ]
        # The declared shape, free axes named: the native backend holds outputs to their configured dims exactly.
        dims = [f"free{axis}" if dim == -1 else dim for axis, dim in enumerate(_full_dims(output, batched))]
        outputs.append(helper.make_tensor_value_info(output.name, kind, dims))
    inputs = [
        helper.make_tensor_value_info(t.name, _onnx_type(config, t), [None] * len(_full_dims(t, batched)))
        for t in config.input
    ]
    graph = helper.make_graph(nodes, f"{config.name}_free", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _served_config(config: Any) -> Any:
    """``config`` as ONNX Runtime serves the free graph on the CPU: batching and instance counts kept."""
    from tritonclient.grpc import model_config_pb2 as mc

    served = mc.ModelConfig()
    served.CopyFrom(config)
    served.platform = ""
    served.backend = "onnxruntime"
    served.default_model_filename = "model.onnx"
    served.ClearField("parameters")
    served.ClearField("optimization")
    for group in served.instance_group:
        group.kind = mc.ModelInstanceGroup.KIND_CPU
        group.count = max(group.count, FREE_STEP_INSTANCES)
        del group.gpus[:]
    return served


def free_repository(repository: Path, name: str, into: Path) -> Path:
    """``name``'s ensemble from ``repository`` in ``into``, its model step free; returns ``into``.

    Only each step's newest version is copied; the model step's folder gets the free graph and a config that
    serves it with ONNX Runtime.
    """
    from google.protobuf import text_format

    names = step_names(name)
    model = names["model"]
    for folder in names.values():
        source = Path(repository) / folder
        if not source.is_dir():
            continue  # a folded build has no postprocess step
        versions = existing_versions(source)
        if not versions:
            raise BenchError(f"{{path}} has no version; build `{name}` first", path=source)
        target = Path(into) / folder
        target.mkdir(parents=True)
        # No version policy: the newest version is the only one copied.
        config = to_proto(dataclasses.replace(read_config(source / "config.pbtxt"), version_policy=None))
        if folder == model:
            (target / str(versions[-1])).mkdir()
            (target / str(versions[-1]) / "model.onnx").write_bytes(free_graph(config).SerializeToString())
            config = _served_config(config)
        else:
            shutil.copytree(source / str(versions[-1]), target / str(versions[-1]))
        (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return Path(into)
