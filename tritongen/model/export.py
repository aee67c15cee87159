"""Export the task's PyTorch module to ONNX with dynamic batch and sequence axes."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tritongen.errors import ExportError

if TYPE_CHECKING:
    import torch

__all__ = ["ONNX_OPSET", "export_onnx", "onnx_io"]

ONNX_OPSET = 18  # the 24.10 container's ONNX Runtime 1.19 and TensorRT 10.5 both take it


def export_onnx(
    module: torch.nn.Module,
    sample: Mapping[str, np.ndarray],
    output_name: str,
    path: Path,
    *,
    axes: Mapping[str, Mapping[int, str]] | None = None,
) -> None:
    """Export ``module`` to ``path`` (a single self-contained file).

    ``sample`` holds example inputs in the module's argument order; it should have a batch
    of at least 2 and a sequence of at least 2 tokens so that neither axis is specialised.
    ``axes`` names each input's dynamic axes beyond the batch (default: axis 1, the sequence, of every
    input; ``{}`` for an input of fixed shape, such as ``pixel_values``).
    """
    import onnx
    import torch

    names = list(sample)
    args = tuple(torch.from_numpy(np.asarray(sample[name])) for name in names)
    axes = {name: {1: "sequence"} for name in names} if axes is None else axes
    dims = {"batch": torch.export.Dim("batch")}
    for axis_names in axes.values():
        dims.update({n: torch.export.Dim(n) for n in axis_names.values() if n not in dims})
    dynamic = tuple({0: dims["batch"], **{a: dims[n] for a, n in axes.get(name, {}).items()}} for name in names)
    sink = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), _quiet_loggers():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module,
                args,
                dynamo=True,
                input_names=names,
                output_names=[output_name],
                dynamic_shapes=dynamic,
                opset_version=ONNX_OPSET,
                optimize=True,
                verbose=False,
            )
            model = program.model_proto
    except Exception as exc:  # torch.export raises many types; all mean "cannot export"
        raise ExportError(f"ONNX export failed: {str(exc).strip().splitlines()[0]}") from None
    onnx.checker.check_model(model)
    _require_dynamic_axes(model, sample, axes)
    _drop_stack_traces(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))


def _drop_stack_traces(model: object) -> None:
    """Remove the exporter's per-node Python stack traces, which name this machine's paths and our source lines.

    With them the same checkpoint gives other bytes from another checkout; the nodes' module paths stay.
    """
    for node in model.graph.node:  # type: ignore[attr-defined]
        kept = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        if len(kept) != len(node.metadata_props):
            del node.metadata_props[:]
            node.metadata_props.extend(kept)


def _require_dynamic_axes(
    model: object, sample: Mapping[str, np.ndarray], axes: Mapping[str, Mapping[int, str]]
) -> None:
    """Refuse an export that only runs at the traced shape (a step of the capability check).

    The exporter names the axes even where the model fixed one in its arithmetic, so the graph is run at a batch
    one larger and, for inputs with a sequence axis, a sequence three shorter than the sample (three longer for
    samples of at most three tokens, which may then reach past a short model's positions only in that case);
    a wrong-sized batch counts as a failure too. Inputs without a sequence axis (``pixel_values``) keep theirs.
    """
    import onnxruntime as ort

    for value in model.graph.input:  # type: ignore[attr-defined]
        dims = value.type.tensor_type.shape.dim
        fixed = not dims or not dims[0].dim_param or (1 in axes.get(value.name, {}) and not dims[1].dim_param)
        if fixed:
            raise ExportError(f"ONNX export fixed the batch or sequence axis of `{value.name}`")
    feeds = {}
    for name, array in sample.items():
        array = np.asarray(array)
        if 1 in axes.get(name, {}):
            if array.shape[1] > 3:
                array = array[:, :-3]
            else:
                array = np.concatenate([array, np.repeat(array[:, -1:], 3, axis=1)], axis=1)
        feeds[name] = np.concatenate([array, array[:1]], axis=0)
    batch = len(next(iter(feeds.values())))
    sequence = next((feeds[n].shape[1] for n in feeds if 1 in axes.get(n, {})), None)
    try:
        session = ort.InferenceSession(
            model.SerializeToString(),  # type: ignore[attr-defined]
            providers=["CPUExecutionProvider"],
        )
        output = session.run(None, feeds)[0]
    except Exception as exc:  # ONNX Runtime raises its own types; all mean "does not run at this shape"
        where = f"batch {batch}" + ("" if sequence is None else f" and sequence {sequence}")
        raise ExportError(
            f"the exported model does not run at {where}, only at the traced shape "
            f"({' '.join(str(exc).split())[:200]}); it does not export with dynamic batch and sequence axes"
        ) from None
    if output.shape[0] != batch:
        raise ExportError(
            f"the exported model returns {output.shape[0]} rows for a batch of {batch}; "
            "it does not export with a dynamic batch axis"
        )


@contextlib.contextmanager
def _quiet_loggers() -> object:
    loggers = [logging.getLogger(name) for name in ("torch", "torch.onnx", "onnxscript", "torch.export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def onnx_io(path: Path) -> tuple[list[str], list[str]]:
    """Input and output names of the ONNX model at ``path``."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return [i.name for i in model.graph.input], [o.name for o in model.graph.output]
