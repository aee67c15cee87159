"""The accuracy gate as every runtime's build stages set it up: its texts, its FP32 reference, and where it runs.

The gate compares the served model with FP32 PyTorch on the validation texts and on texts derived from them at
every length (``tritongen.gates.texts``); an INT8 search also gates its candidates in the target container's
runtime (:func:`served_gate`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from tritongen.buildspec import BuildSpec
from tritongen.containers import container
from tritongen.errors import stage
from tritongen.gates.accuracy import GateReference, read_texts
from tritongen.gates.compat import container_gate, container_python
from tritongen.gates.parity import ReferenceModel
from tritongen.gates.texts import length_texts
from tritongen.precision.int8_search import ServedGate
from tritongen.runtimes.base import Export, Runtime
from tritongen.tasks import BuildPlan

__all__ = ["gate_reference", "gate_texts", "served_gate"]


def gate_texts(spec: BuildSpec) -> tuple[list[str], list[str], str]:
    """The gate's validation texts and, for INT8, the calibration texts and where they come from."""
    validation = read_texts(spec.validation, "validation")
    if spec.precision != "int8":
        return validation, [], ""
    if spec.calibration is None and spec.validation is not None and len(validation) >= 64:
        # Calibrate on the user's kind of text, but never on a text the gate then measures.
        calibration, validation = validation[::4], [text for i, text in enumerate(validation) if i % 4]
        return validation, calibration, (
            f"every 4th text of `{spec.validation}` (the gate measures the other {len(validation)})"
        )  # fmt: skip
    calibration = read_texts(spec.calibration, "calibration")
    return validation, calibration, f"`{spec.calibration}`" if spec.calibration else "the built-in calibration sample"


def gate_reference(
    plan: BuildPlan, onnx: Export, console: Console, validation: Sequence[str]
) -> tuple[GateReference, str]:
    """FP32 PyTorch on the validation texts and on texts derived from them at every length; a line for the card.

    The derived texts (``tritongen.gates.texts``) run from one word to past the row, so the gate's minimum holds
    for the lengths requests come in, not only for the sample's sentences.
    """
    with console.status("Accuracy gate: FP32 PyTorch on the validation texts…") as status, stage("accuracy gate"):
        lengths = length_texts(validation, lambda text: not onnx.encoder.encode([text])[0].overflowing)
        texts = [*validation, *lengths.texts]
        status.update(f"Accuracy gate: FP32 PyTorch on {len(texts)} validation texts…")
        model = ReferenceModel(plan.module, plan.hf_tokenizer, onnx.encoder, plan.max_length)
        reference = GateReference(model, gate=plan.bound.gate, texts=texts, pairs=plan.pairs(texts))
    return reference, f"accuracy gate texts: {len(validation)} validation texts and {lengths.describe(plan.max_length)}"


def served_gate(
    runtime: Runtime, plan: BuildPlan, reference: GateReference, precision: str = "f32"
) -> ServedGate | None:
    """The gate in the target container's runtime, for the INT8 candidates; None where it is skipped.

    ``precision``: what the runtime computes at there (OpenVINO's ``f32`` or ``bf16``).
    """
    python = container_python(plan.spec.containers[0])
    if runtime.container_check_skipped or not plan.spec.container_check or python is None:
        return None
    where = f"{runtime.title} {runtime.container_release(container(plan.spec.containers[0]))}"
    gate = container_gate(reference, lambda model: runtime.container_session(model, python, precision))
    return ServedGate(gate, where)
