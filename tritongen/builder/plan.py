"""What every build stage shares: the plan decided once, what the export produced, and how stages report.

:class:`BuildPlan` is what :func:`tritongen.builder.pipeline.inspect` decides and every later stage reads; the
runtimes' stages (``tritongen.runtimes``) read it too, so it lives here, below both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tritongen.buildspec import BuildSpec
from tritongen.configs.steps import bucket_lengths
from tritongen.containers import container
from tritongen.errors import SpecError, StageError, TritongenError
from tritongen.gates.accuracy import AccuracyReport, GateReference, read_texts
from tritongen.gates.compat import ContainerReport, container_gate, container_python
from tritongen.gates.parity import ReferenceModel
from tritongen.gates.texts import length_texts
from tritongen.model.checkpoint import Checkpoint
from tritongen.model.facts import ModelFacts
from tritongen.precision.int8_search import SearchReport, ServedGate
from tritongen.precision.optimize import OptimizeReport
from tritongen.repository.layout import step_names
from tritongen.runtimes import BuildStages, Runtime, get_runtime
from tritongen.tasks import Task, TaskPlan

__all__ = [
    "BuildPlan", "ContainerChecks", "Export", "Variant", "gate_reference", "gate_texts", "print_line",
    "served_gate", "stage", "variant_name",
]  # fmt: skip


@dataclass(frozen=True)
class Variant:
    """What optimisation produced: the steps taken, the gate's figures, and the INT8 search (int8 only)."""

    optimized: OptimizeReport
    accuracy: AccuracyReport
    search: SearchReport | None = None
    reference: GateReference | None = field(default=None, repr=False, compare=False)  # for the container check


@dataclass(frozen=True)
class BuildPlan:
    """What a build will make, decided once by :func:`inspect` and read by every later stage.

    The checkpoint, the task bound to it, the loaded tokenizer and PyTorch module, what the model itself
    says (inputs, length limit), the row length and the length buckets derived from them. Nothing here
    changes after inspection; what later stages produce is passed along beside the plan.
    """

    spec: BuildSpec
    checkpoint: Checkpoint
    task: Task
    bound: TaskPlan  # the task bound to this checkpoint and spec (:meth:`Task.bind`)
    facts: ModelFacts
    pad_id: int
    tokenizer_facts: Mapping[str, str]
    hf_tokenizer: Any = field(repr=False, compare=False)
    module: Any = field(repr=False, compare=False)

    @property
    def runtime(self) -> Runtime:
        """The model step's runtime (the registry's entry for ``spec.runtime``)."""
        return get_runtime(self.spec.runtime)

    @property
    def stages(self) -> BuildStages:
        """The runtime's build stages (stage 4, stage 5, its files)."""
        stages = self.runtime.stages
        if stages is None:
            raise SpecError(f"runtime `{self.runtime.name}` has no build stages registered")
        return stages

    @property
    def max_length(self) -> int:
        """Tokens per model row."""
        return self.bound.row_length

    @property
    def names(self) -> dict[str, str]:
        """The ensemble's model names (and folders), by step."""
        return step_names(self.spec.name)

    @property
    def inputs(self) -> list[str]:
        """The model's token inputs, in its forward signature's order."""
        return list(self.facts.inputs)

    @property
    def buckets(self) -> list[int]:
        """The padded row lengths: the spec's buckets below :attr:`max_length`, then :attr:`max_length`."""
        return bucket_lengths(self.spec.buckets, self.max_length)

    def pairs(self, texts: Sequence[str]) -> list[str] | None:
        """Second segments for pair tasks (:meth:`Task.parity_pairs`): by default each text with the next one."""
        if not self.bound.pair_input:
            return None
        return self.task.parity_pairs(self.bound.settings, texts)


@dataclass(frozen=True)
class Export:
    """What :func:`export` produced: the served encoder and the FP32 ONNX file (outside the staged tree)."""

    encoder: Any  # the first step's own code: TextEncoder, ImageEncoder
    fp32_path: Path
    target: Path  # where the served model goes: <model>/<version>/model.onnx in the staging area


ContainerChecks = dict[str, "ContainerReport | dict[str, str]"]  # release -> its report, or why it was skipped


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run one build stage: an error no check anticipated becomes a one-line :class:`StageError` naming it.

    Errors raised on purpose (:class:`TritongenError`) pass unchanged; so do Ctrl-C and exits. Rust
    panics (tokenizers, safetensors) derive from BaseException, so everything else is caught.
    """
    try:
        yield
    except (TritongenError, KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        raise StageError(name, exc) from exc


def print_line(console: Console, line: str) -> None:
    """A line as it is, above any spinner: no markup, and unwrapped so that it stays one line in a log."""
    console.print(line, markup=False, soft_wrap=True)


def variant_name(spec: BuildSpec, variant: Variant | None = None) -> str:
    """The served variant in words, as its runtime names it: precision, and the INT8 search's choice."""
    search = None if variant is None else variant.search
    chosen = None if search is None or search.chosen is None else search.chosen.candidate.label
    return get_runtime(spec.runtime).variant_name(spec, chosen)


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


def served_gate(plan: BuildPlan, reference: GateReference) -> ServedGate | None:
    """The gate in the target container's runtime, for the INT8 search's candidates; None where it is skipped."""
    python = container_python(plan.spec.containers[0])
    if plan.runtime.container_check_skipped or not plan.spec.container_check or python is None:
        return None
    runtime = f"ONNX Runtime {container(plan.spec.containers[0]).onnxruntime}"
    return ServedGate(container_gate(reference, python), runtime)
