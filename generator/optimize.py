"""Offline graph optimisation and precision conversion of the exported ONNX model.

- fusion: ONNX Runtime's transformer optimiser (attention, LayerNorm, GELU fusions), saved;
- fp16: float16 weights and compute, float32 inputs and outputs kept;
- int8 static: QDQ quantisation calibrated on texts (ONNX Runtime runs it on CPU; with
  symmetric int8 activations TensorRT takes it as explicit INT8);
- int8 dynamic: weights quantised ahead of time, activations at run time.

Every result still has to pass the accuracy gate (``generator.accuracy``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    model = ort_optimize(str(source), model_type="bert", num_heads=heads, hidden_size=hidden,
                         optimization_options=options, opt_level=0)
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

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches: Iterator[dict[str, Any]] = iter(
                [encoder(list(texts[i : i + batch_size])) for i in range(0, len(texts), batch_size)]
            )

        def get_next(self) -> dict[str, Any] | None:
            return next(self._batches, None)

    return Reader()


def _quantize(
    source: Path, target: Path, *, mode: str, encoder: Any, texts: Sequence[str], symmetric: bool, report: OptimizeReport
) -> None:
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = target.with_name("prepared.onnx")
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=False)
    if mode == "dynamic":
        quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
        report.steps.append("int8 dynamic quantisation of MatMul weights")
    else:
        if not texts:
            raise ExportError("int8 static quantisation needs calibration texts; the calibration set is empty")
        quantize_static(
            str(prepared),
            str(target),
            _calibration_reader(encoder, texts),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True},
        )
        report.steps.append(
            f"int8 static QDQ quantisation of MatMul (per-channel weights, "
            f"{'symmetric int8' if symmetric else 'uint8'} activations, {len(texts)} calibration texts)"
        )
    prepared.unlink(missing_ok=True)
    model = onnx.load(str(target), load_external_data=False)
    report.quantized_nodes = sum(n.op_type in ("QuantizeLinear", "MatMulInteger", "DynamicQuantizeLinear")
                                 for n in model.graph.node)


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
    work = target.parent / "_optimize"
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
            _quantize(current, quantized, mode=quantization, encoder=encoder, texts=calibration,
                      symmetric=symmetric_activations, report=report)
            current = quantized
        if current != target:
            shutil.copyfile(current, target)
    except ExportError:
        raise
    except Exception as exc:  # the optimiser and quantiser raise many types
        raise ExportError(f"optimising the model ({precision}, fuse={fuse}) failed: {str(exc).splitlines()[0]}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report
