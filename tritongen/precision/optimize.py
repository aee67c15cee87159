"""Offline graph optimisation and precision conversion of the exported ONNX model.

- fusion: ONNX Runtime's transformer optimiser (attention, LayerNorm, GELU fusions), saved; at FP32 then each
  attention block it could not fuse as one ``Attention`` (``tritongen.precision.fusion``);
- fp16: float16 weights and compute, float32 inputs and outputs kept;
- int8 (``quantize_int8``, driven by ``tritongen.precision.int8_search``): static QDQ calibrated on texts (with
  symmetric int8 activations TensorRT takes it as explicit INT8), or dynamic (weights quantised ahead
  of time, activations at run time), over any chosen set of weight MatMuls, per-channel weights. Static
  QDQ rounds only what the int8 MatMuls read: their products, and the residual stream that shares an
  input with them, stay float. Where this CPU's int8 kernels would saturate (x86 without VNNI), the
  weights are quantised to 7 bits (``int8_weights_saturate``).

Every result still has to pass the accuracy gate (``tritongen.gates.accuracy``).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.cpu import int8_weights_saturate
from tritongen.errors import ExportError
from tritongen.model.checkpoint import Checkpoint
from tritongen.precision.fusion import fuse_attention

__all__ = [
    "CALIBRATION_METHODS",
    "HISTOGRAM_TEXTS",
    "Int8Recipe",
    "OptimizeReport",
    "WeightMatMul",
    "carry_dimension_names",
    "optimize_model",
    "prepare_for_quantization",
    "quantize_int8",
    "weight_matmuls",
]


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


CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
# Histogram calibrators (entropy, percentile) hold every activation of every batch: bound their sample.
HISTOGRAM_TEXTS, _HISTOGRAM_WIDTH = 64, 128


def _calibration_reader(encoder: Any, texts: Sequence[str], *, width: int | None = None, batch_size: int = 16) -> Any:
    """An ONNX Runtime calibration reader over batches of encoded texts.

    With ``width`` every batch is padded (or cut) to it, as histogram calibrators need equally shaped
    activations; without, texts are batched by length and each batch padded to its own bucket (min-max
    calibration streams, and a tweet then never pays for a news article's padding).
    """
    from onnxruntime.quantization import CalibrationDataReader

    encodings = sorted(encoder.encode(list(texts)), key=lambda e: len(e.ids))

    def pack(chunk: Sequence[Any]) -> dict[str, Any]:
        arrays = encoder.pack(chunk)
        if width is None:
            return arrays
        return {k: np.pad(v, [(0, 0), (0, max(0, width - v.shape[1]))])[:, :width] for k, v in arrays.items()}

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches: Iterator[dict[str, Any]] = iter(
                [pack(encodings[i : i + batch_size]) for i in range(0, len(encodings), batch_size)]
            )

        def get_next(self) -> dict[str, Any] | None:
            return next(self._batches, None)

    return Reader()


@dataclass(frozen=True)
class WeightMatMul:
    """A MatMul with a constant weight: what int8 quantisation can turn into integer arithmetic.

    ``layer`` is the PyTorch module it was exported from (``bert.encoder.layer.0.attention.self.query``);
    ``down_projection`` marks weights wider in than out (the feed-forward output), whose inputs carry the
    outliers that 8 bits hold worst.
    """

    node: str
    layer: str
    down_projection: bool


def _module_name(node: Any) -> str:
    """The exporter's name scope of ``node`` (the module it came from), else the node's own name."""
    import ast

    scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), "")
    try:
        names = [n for n in ast.literal_eval(scopes) if isinstance(n, str) and n.startswith("model.")]
    except (ValueError, SyntaxError):
        names = []
    return names[-1].removeprefix("model.") if names else node.name


def weight_matmuls(path: Path) -> list[WeightMatMul]:
    """Every MatMul of ``path`` whose second input is a constant weight, in graph order.

    Activation-by-activation products (attention scores, attention-weighted values) are not listed:
    they stay in float.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path), load_external_data=False)
    weights = {init.name: init for init in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type != "MatMul" or len(node.input) < 2 or node.input[1] not in weights:
            continue
        shape = numpy_helper.to_array(weights[node.input[1]]).shape
        found.append(WeightMatMul(node.name, _module_name(node), len(shape) == 2 and shape[0] > shape[1]))
    return found


@contextlib.contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    """Run in ``path``: ONNX Runtime's quantisation tools write temporary files to the current directory."""
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def prepare_for_quantization(source: Path, work: Path) -> Path:
    """``source`` with clean shape annotations and ONNX Runtime's pre-processing, as ``work/prepared.onnx``.

    The exporter's intermediate shape annotations are dropped: ONNX shape inference re-derives them, and
    some (e.g. around a Gemm classifier head) contradict what it infers. Its names for the symbolic
    dimensions are then given back (:func:`carry_dimension_names`).
    """
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    cleaned, prepared = work / "cleaned.onnx", work / "prepared.onnx"
    model = onnx.load(str(source))
    exported = onnx.GraphProto()  # the exporter's annotations alone, not a second copy of the weights
    exported.input.extend(model.graph.input)
    exported.value_info.extend(model.graph.value_info)
    exported.output.extend(model.graph.output)
    del model.graph.value_info[:]
    onnx.save_model(model, str(cleaned))
    with _working_directory(work):
        try:
            quant_pre_process(str(cleaned), str(prepared), skip_symbolic_shape=False)
        except Exception:  # symbolic inference gives up on some dynamo graphs; ONNX's own inference suffices
            quant_pre_process(str(cleaned), str(prepared), skip_symbolic_shape=True)
    cleaned.unlink(missing_ok=True)
    result = onnx.load(str(prepared))
    if carry_dimension_names(exported, result.graph):
        onnx.save_model(result, str(prepared))
    return prepared


def _tensor_types(graph: Any) -> Iterator[Any]:
    yield from graph.input
    yield from graph.value_info
    yield from graph.output


def carry_dimension_names(exported: Any, graph: Any) -> int:
    """Rename ``graph``'s symbolic dimensions to the ``exported`` graph's names for them; returns how many were renamed.

    ONNX's shape inference names each unknown dimension it meets afresh (``unk__35``), so the two inputs of
    a residual ``Add`` no longer read as one shape, and ONNX Runtime then leaves its ``Add`` + ``LayerNorm``
    unfused: in ONNX Runtime 1.28 a plain ``LayerNormalization`` runs about six times slower than the fused
    ``SkipLayerNormalization``. A symbol is renamed only where every tensor the two graphs share reads it as
    the same exporter name; the rest keep theirs.
    """
    theirs = {t.name: t.type.tensor_type.shape.dim for t in _tensor_types(exported)}
    names: dict[str, set[str]] = {}
    for tensor in _tensor_types(graph):
        reference = theirs.get(tensor.name)
        dims = tensor.type.tensor_type.shape.dim
        if reference is None or len(reference) != len(dims):
            continue
        for ours, exporter in zip(dims, reference, strict=True):
            if ours.dim_param and exporter.dim_param:
                names.setdefault(ours.dim_param, set()).add(exporter.dim_param)
    rename = {symbol: found.pop() for symbol, found in names.items() if len(found) == 1}
    renamed = 0
    for tensor in _tensor_types(graph):
        for dim in tensor.type.tensor_type.shape.dim:
            if dim.dim_param in rename and rename[dim.dim_param] != dim.dim_param:
                dim.dim_param = rename[dim.dim_param]
                renamed += 1
    return renamed


# Shape inference cannot type the outputs of ONNX Runtime's fused operators (SkipLayerNormalization...):
# tensors it leaves untyped are float32, which is what the fusions produce.
_UNTYPED_IS_FLOAT = {"DefaultTensorType": 1}  # onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class Int8Recipe:
    """One int8 model to make: the scheme, the weight MatMuls it quantises, and (static) how it is calibrated.

    ``scheme`` ``dynamic``: int8 weights per output channel ahead of time, activations quantised per batch
    at run time (no calibration). ``static``: QDQ with per-channel int8 weights and activations calibrated
    on ``texts`` (encoded by ``encoder``) with ``calibration`` (``minmax`` streams every text; ``entropy``
    and ``percentile`` histograms hold their activations, so they see a bounded sample), uint8 activations
    or, with ``symmetric``, int8 ones as TensorRT takes explicit INT8.
    """

    scheme: str
    nodes: Sequence[str]
    encoder: Any = None
    texts: Sequence[str] = ()
    symmetric: bool = False
    calibration: str = "minmax"


def quantize_int8(prepared: Path, target: Path, recipe: Int8Recipe) -> None:
    """Quantise ``prepared`` (``prepare_for_quantization``) as ``recipe`` says into ``target``.

    Weights are 7-bit where :func:`int8_weights_saturate` says this CPU's kernels would saturate on 8-bit ones.
    """
    if not recipe.nodes:
        raise ExportError("int8 quantisation was given no weight MatMul to quantise")
    if recipe.calibration not in CALIBRATION_METHODS:
        raise ExportError(
            f"calibration `{recipe.calibration}` is unknown; expected one of {', '.join(CALIBRATION_METHODS)}"
        )
    # The calibrators print their progress to stdout: keep the build's console for the build.
    with _working_directory(target.parent), contextlib.redirect_stdout(io.StringIO()):
        if recipe.scheme == "dynamic":
            _quantize_dynamic(prepared, target, recipe.nodes)
            return
        _quantize_static(prepared, target, recipe)
    _float_for_other_readers(target, recipe.nodes)


def _quantize_dynamic(prepared: Path, target: Path, nodes: Sequence[str]) -> None:
    """Int8 weights of ``nodes`` ahead of time; activations quantised per batch at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(prepared),
        str(target),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        nodes_to_quantize=list(nodes),
        per_channel=True,
        reduce_range=int8_weights_saturate(),
        extra_options=_UNTYPED_IS_FLOAT,
    )


def _quantize_static(prepared: Path, target: Path, recipe: Int8Recipe) -> None:
    """QDQ around the int8 MatMuls, activation ranges calibrated on the recipe's texts."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if not recipe.texts:
        raise ExportError("int8 static quantisation needs calibration texts; the calibration set is empty")
    histogram = recipe.calibration != "minmax"
    width = min(_HISTOGRAM_WIDTH, recipe.encoder.max_length) if histogram else None
    reader = _calibration_reader(
        recipe.encoder, recipe.texts[:HISTOGRAM_TEXTS] if histogram else recipe.texts, width=width
    )
    quantize_static(
        str(prepared),
        str(target),
        reader,
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul"],
        nodes_to_quantize=list(recipe.nodes),
        per_channel=True,
        reduce_range=int8_weights_saturate(),
        calibrate_method={
            "minmax": CalibrationMethod.MinMax,
            "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile,
        }[recipe.calibration],
        activation_type=QuantType.QInt8 if recipe.symmetric else QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        extra_options={
            "ActivationSymmetric": recipe.symmetric,
            "WeightSymmetric": True,
            # MatMul weights are [in, out]: quantise per output channel (the default axis is 0).
            "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1},
            # The products stay float: re-quantising them adds error and Q/DQ pairs and saves nothing.
            "OpTypesToExcludeOutputQuantization": ["MatMul"],
            **_UNTYPED_IS_FLOAT,
            **({"CalibPercentile": 99.999} if recipe.calibration == "percentile" else {}),
        },
    )


def _float_for_other_readers(path: Path, nodes: Sequence[str]) -> None:
    """Give every reader of a quantised activation other than the quantised MatMuls the float tensor back.

    ONNX Runtime's QDQ quantiser hands the dequantised copy of an activation to all its readers. In a
    transformer the LayerNorm output that the projections read is also the residual stream, which would
    then be rounded to 8 bits in every layer.
    """
    import onnx

    model = onnx.load(str(path))
    quantized = set(nodes)
    produced = {output: node for node in model.graph.node for output in node.output}
    changed = False
    for node in model.graph.node:
        if node.name in quantized or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for index, name in enumerate(node.input):
            dequantize = produced.get(name)
            if dequantize is None or dequantize.op_type != "DequantizeLinear":
                continue
            quantize = produced.get(dequantize.input[0])
            if quantize is not None and quantize.op_type == "QuantizeLinear":
                node.input[index] = quantize.input[0]
                changed = True
    if changed:
        onnx.save_model(model, str(path))


def optimize_model(
    source: Path,
    target: Path,
    checkpoint: Checkpoint,
    *,
    precision: str,
    fuse: bool,
    attention_feeds: Sequence[Mapping[str, np.ndarray]] = (),
) -> OptimizeReport:
    """Write ``source`` with the fusions (``fuse``) and float conversion of ``precision`` to ``target``.

    For ``int8`` only the fusions happen here (attention left unfused, so its MatMuls stay visible);
    ``tritongen.precision.int8_search`` quantises the result. With ``attention_feeds`` (which the build gives for an
    FP32 model with fusions on a CPU node), each attention block that ONNX Runtime's optimiser left unfused becomes
    one ``Attention`` operator, checked on those inputs (:func:`tritongen.precision.fusion.fuse_attention`).
    """
    report = OptimizeReport()
    work = target.resolve().parent / "_optimize"
    work.mkdir(parents=True, exist_ok=True)
    try:
        current = source
        if fuse:
            fused = work / "fused.onnx"
            _fuse(current, fused, checkpoint, attention=precision != "int8", report=report)
            current = fused
        if attention_feeds:
            attention = work / "attention.onnx"
            note = fuse_attention(current, attention, attention_feeds, ("Attention",)).note()
            report.steps += [note] if note else []
            current = attention
        if precision == "fp16":
            half = work / "fp16.onnx"
            _to_fp16(current, half, report)
            current = half
        if current != target:
            shutil.copyfile(current, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report
