"""Offline graph optimisation and precision conversion of the exported ONNX model.

- fusion: ONNX Runtime's transformer optimiser (attention, LayerNorm, GELU fusions), saved;
- fp16: float16 weights and compute, float32 inputs and outputs kept;
- int8 static: QDQ quantisation calibrated on texts (ONNX Runtime runs it on CPU; with
  symmetric int8 activations TensorRT takes it as explicit INT8);
- int8 dynamic: weights quantised ahead of time, activations at run time.

Every result still has to pass the accuracy gate (``generator.accuracy``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from generator.checkpoint import Checkpoint
from generator.errors import ExportError

__all__ = ["OptimizeReport", "optimize_model"]


@dataclass
class OptimizeReport:
    """What was done to the model, for the model card."""

    steps: list[str] = field(default_factory=list)
    fused_operators: dict[str, int] = field(default_factory=dict)
    quantized_nodes: int = 0


def _heads_and_hidden(checkpoint: Checkpoint) -> tuple[int, int]:
    config = checkpoint.config
    heads = config.get("num_attention_heads") or config.get("n_heads") or 0
    return int(heads), checkpoint.hidden_size


def _fuse(source: Path, target: Path, checkpoint: Checkpoint, *, attention: bool, report: OptimizeReport) -> None:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model as ort_optimize

    heads, hidden = _heads_and_hidden(checkpoint)
    options = FusionOptions("bert")
    options.enable_attention = attention  # attention fusion hides the MatMuls that int8 quantises
    model = ort_optimize(
        str(source), model_type="bert", num_heads=heads, hidden_size=hidden, optimization_options=options, opt_level=0
    )
    report.fused_operators = {k: int(v) for k, v in model.get_fused_operator_statistics().items() if v}
    model.save_model_to_file(str(target))
    report.steps.append("transformer fusions" + ("" if attention else " (attention left unfused for int8)"))


def _to_fp16(source: Path, target: Path, report: OptimizeReport) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save_model(model, str(target))
    report.steps.append("float16 (float32 inputs and outputs kept)")


def _calibration_reader(encoder: Any, texts: Sequence[str], batch_size: int = 16) -> Any:
    """An ONNX Runtime calibration reader over batches of encoded texts."""
    from onnxruntime.quantization import CalibrationDataReader

    # Every batch gets the same width: histogram calibrators need equally shaped activations.
    encodings = encoder.encode(list(texts))
    width = encoder.bucket(max(len(e.ids) for e in encodings))  # pack() never pads below a batch's bucket

    def pack(chunk: Sequence[Any]) -> dict[str, Any]:
        arrays = encoder.pack(chunk)
        return {k: np.pad(v, [(0, 0), (0, width - v.shape[1])]) for k, v in arrays.items()}

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches: Iterator[dict[str, Any]] = iter(
                [pack(encodings[i : i + batch_size]) for i in range(0, len(encodings), batch_size)]
            )

        def get_next(self) -> dict[str, Any] | None:
            return next(self._batches, None)

    return Reader()


def _weight_matmuls(path: Path) -> tuple[list[str], list[str]]:
    """MatMul nodes to quantise, and the weight MatMuls deliberately left in float.

    Only products with a constant weight are quantised: activation-by-activation products
    (attention scores, attention-weighted values) stay in float. Down-projections (weights
    wider in than out: the feed-forward output, classifier heads) stay in float too: their
    inputs (GELU outputs) and weights carry the outliers that 8 bits cannot hold — on
    all-MiniLM-L6-v2 quantising them alone drops the mean cosine to 0.93.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path), load_external_data=False)
    weights = {init.name: init for init in model.graph.initializer}
    quantize, kept = [], []
    for node in model.graph.node:
        if node.op_type != "MatMul" or len(node.input) < 2 or node.input[1] not in weights:
            continue
        shape = numpy_helper.to_array(weights[node.input[1]]).shape
        (kept if len(shape) == 2 and shape[0] > shape[1] else quantize).append(node.name)
    return quantize, kept


@contextlib.contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    """Run in ``path``: ONNX Runtime's quantisation tools write temporary files to the current directory."""
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def _quantize(
    source: Path,
    target: Path,
    *,
    mode: str,
    encoder: Any,
    texts: Sequence[str],
    symmetric: bool,
    report: OptimizeReport,
) -> None:
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # Drop the exporter's intermediate shape annotations: ONNX shape inference re-derives
    # them, and some (e.g. around a Gemm classifier head) contradict what it infers.
    cleaned = target.with_name("cleaned.onnx")
    model = onnx.load(str(source))
    del model.graph.value_info[:]
    onnx.save_model(model, str(cleaned))
    source = cleaned
    prepared = target.with_name("prepared.onnx")
    try:
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=False)
    except Exception:  # symbolic inference gives up on some dynamo graphs; ONNX's own inference suffices
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    weight_matmuls, kept = _weight_matmuls(prepared)
    if not weight_matmuls:
        raise ExportError("the model has no weight MatMul to quantise to int8")
    if mode == "dynamic":
        # Dynamic quantisation needs no calibration and no pre-processed shapes.
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=weight_matmuls,
            per_channel=True,
        )
        report.steps.append(
            f"int8 dynamic quantisation of {len(weight_matmuls)} weight MatMuls (per-channel); "
            f"{len(kept)} down-projections kept in float"
        )
    else:
        if not texts:
            raise ExportError("int8 static quantisation needs calibration texts; the calibration set is empty")
        quantize_static(
            str(prepared),
            str(target),
            _calibration_reader(encoder, texts),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=weight_matmuls,
            per_channel=True,
            calibrate_method=CalibrationMethod.MinMax,  # streaming; histogram methods hold every activation
            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            extra_options={
                "ActivationSymmetric": symmetric,
                "WeightSymmetric": True,
                # MatMul weights are [in, out]: quantise per output channel (the default axis is 0).
                "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1},
            },
        )
        report.steps.append(
            f"int8 static QDQ quantisation of {len(weight_matmuls)} weight MatMuls (per-channel weights, "
            f"{'symmetric int8' if symmetric else 'uint8'} activations, min-max calibration on "
            f"{len(texts)} texts); {len(kept)} down-projections kept in float"
        )
    prepared.unlink(missing_ok=True)
    cleaned.unlink(missing_ok=True)
    model = onnx.load(str(target), load_external_data=False)
    report.quantized_nodes = sum(
        n.op_type in ("QuantizeLinear", "MatMulInteger", "DynamicQuantizeLinear") for n in model.graph.node
    )


def optimize_model(
    source: Path,
    target: Path,
    checkpoint: Checkpoint,
    *,
    precision: str,
    fuse: bool,
    quantization: str = "static",
    encoder: Any = None,
    calibration: Sequence[str] = (),
    symmetric_activations: bool = False,
) -> OptimizeReport:
    """Write the optimised/converted model for ``precision`` and ``fuse`` to ``target``."""
    report = OptimizeReport()
    work = target.resolve().parent / "_optimize"
    work.mkdir(parents=True, exist_ok=True)
    try:
        current = source
        if fuse:
            fused = work / "fused.onnx"
            _fuse(current, fused, checkpoint, attention=precision != "int8", report=report)
            current = fused
        if precision == "fp16":
            half = work / "fp16.onnx"
            _to_fp16(current, half, report)
            current = half
        elif precision == "int8":
            quantized = work / "int8.onnx"
            with _working_directory(work):
                _quantize(
                    current.resolve(),
                    quantized.resolve(),
                    mode=quantization,
                    encoder=encoder,
                    texts=calibration,
                    symmetric=symmetric_activations,
                    report=report,
                )
            current = quantized
        if current != target:
            shutil.copyfile(current, target)
    except ExportError:
        raise
    except Exception as exc:  # the optimiser and quantiser raise many types
        raise ExportError(
            f"optimising the model ({precision}, fuse={fuse}) failed: {str(exc).splitlines()[0]}"
        ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report
