"""OpenVINO's build stages: the export as IR (INT8 by NNCF), gated at every precision OpenVINO may run it at.

The same gate runs again in each target container's OpenVINO (stage 5).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown

from tritongen.containers import container
from tritongen.errors import AccuracyError, stage
from tritongen.gates.accuracy import AccuracyReport, GateReference, worst_of
from tritongen.gates.compat import ContainerReport
from tritongen.precision.optimize import OptimizeReport
from tritongen.runtimes.base import Export, Runtime, Variant
from tritongen.runtimes.gating import gate_reference, gate_texts, served_gate
from tritongen.runtimes.openvino.int8 import Int8Candidate, search_int8_ir
from tritongen.runtimes.openvino.ir import (
    IR_FILE,
    OpenVinoSession,
    convert_to_ir,
    cpu_precisions,
    openvino_version,
)
from tritongen.tasks import BuildPlan

__all__ = ["container_check", "optimise"]

_Gate = Callable[[Path], list[AccuracyReport]]


def optimise(runtime: Runtime, plan: BuildPlan, onnx: Export, console: Console) -> Variant:
    """Stage 4 for ``runtime: openvino``: the FP32 export as IR, gated at every precision OpenVINO may run it at.

    The served model is ``model.xml``/``model.bin`` (no ``model.onnx``). OpenVINO computes in BF16 on CPUs that
    have it and the native backend cannot force FP32, so FP32 and (where this CPU has it) BF16 must both pass.
    """
    spec = plan.spec
    xml = onnx.target.with_name(IR_FILE)
    version = openvino_version()
    validation, calibration, calibration_source = gate_texts(spec)
    int8 = spec.precision == "int8"
    fp32_xml = onnx.fp32_path.with_suffix(".xml") if int8 else xml  # outside the staged tree
    with console.status(f"Converting to OpenVINO {version} IR…"), stage("OpenVINO conversion"):
        convert_to_ir(onnx.fp32_path, fp32_xml)
    steps = [f"converted to OpenVINO {version} IR (`{IR_FILE}`, FP32 weights); the precision is OpenVINO's choice"]
    reference, gate_line = gate_reference(plan, onnx, console, validation)
    precisions = cpu_precisions()

    def gate(path: Path, prefix: str) -> list[AccuracyReport]:
        reports = []
        for precision in precisions:
            name = f"OpenVINO {prefix}{precision.upper()}"
            with console.status(f"Accuracy gate: {name}…"), stage("accuracy gate"):
                session = OpenVinoSession(path, {"INFERENCE_PRECISION_HINT": precision, "NUM_STREAMS": 1})
                reports.append(reference.measure(session, name))
        return reports

    if int8:
        served = _served_gate(runtime, plan, reference)
        int8_steps, reports, there = _int8(
            plan, onnx, console, models=(fp32_xml, xml), calibration=(calibration, calibration_source), gate=gate,
            served=served,
        )  # fmt: skip
        steps += int8_steps
    else:
        reports, there = gate(xml, ""), []
    steps.append(gate_line)
    for report in reports:
        console.print(Markdown(report.to_markdown(accepted=spec.accept_accuracy_loss)))
        steps.append(f"gated at {report.variant}: {'passed' if report.passed else 'FAILED'}, {report.summary()}")
    if "bf16" not in precisions:
        steps.append("BF16 not gated: this CPU has no BF16; a node whose CPU has it computes in BF16 ungated")
    for report in reports:  # each by its own name: the native backend cannot opt out of BF16
        if not report.passed and not spec.accept_accuracy_loss:
            raise AccuracyError(
                f"accuracy gate failed: {report.summary()}; nothing was published"
                + ("; INT8 lost too much, with every candidate: build with --precision fp32, or accept it with "
                   "--accept-accuracy-loss" if int8 else "; OpenVINO computes in BF16 on CPUs that have it (the "
                   "native backend cannot turn that off): build with --runtime onnx" if "BF16" in report.variant
                   else "")
            )  # fmt: skip
    accuracy = dataclasses.replace(worst_of(reports), variant=f"OpenVINO {'/'.join(p.upper() for p in precisions)}")
    return Variant(OptimizeReport(steps=steps), accuracy, None, reference, gated_there=tuple(there))


def _served_gate(runtime: Runtime, plan: BuildPlan, reference: GateReference) -> _Gate | None:
    """The gate in the first target container's OpenVINO at each precision, for the INT8 candidates; None: skipped."""
    gates = {p: gate for p in cpu_precisions() if (gate := served_gate(runtime, plan, reference, p)) is not None}
    if not gates:  # skipped at every precision alike
        return None
    return lambda path: [gate.measure(path, f"INT8+{p.upper()}", False) for p, gate in gates.items()]


def _int8(
    plan: BuildPlan,
    onnx: Export,
    console: Console,
    *,
    models: tuple[Path, Path],
    calibration: tuple[list[str], str],
    gate: Callable[[Path, str], list[AccuracyReport]],
    served: _Gate | None,
) -> tuple[list[str], list[AccuracyReport], list[AccuracyReport]]:
    """The first INT8 candidate that passes ``gate`` here and ``served`` where it will run.

    Returns its card lines, its reports here and its reports there. ``models``: the FP32 IR and where the INT8 IR
    goes; ``calibration``: the texts and where they come from.
    """
    (fp32_xml, xml), (texts, source) = models, calibration
    pairs = plan.pairs(texts)
    feeds = [onnx.encoder([t], None if pairs is None else [pairs[i]]) for i, t in enumerate(texts)]
    with console.status("INT8…") as status, stage("OpenVINO INT8"):

        def gate_candidate(path: Path, candidate: Int8Candidate) -> list[AccuracyReport]:
            status.update(f"INT8, {candidate.label}: gated…")
            return gate(path, "INT8+")

        def gate_there(path: Path) -> list[AccuracyReport]:
            status.update("INT8: gated again in the target container's OpenVINO…")
            assert served is not None
            return served(path)

        trials, chosen, version = search_int8_ir(
            fp32_xml, xml, feeds, gate_candidate, gate_there if served is not None else None,
            announce=lambda line: console.print(line, markup=False, soft_wrap=True),
            status=lambda candidate: status.update(f"INT8, {candidate.label}: NNCF calibration on {len(feeds)} texts…"),
        )  # fmt: skip
    verdict = (
        f"the first of its candidates in expected speed order that passed the gate at every precision: "
        f"{chosen.candidate.label}" if chosen.passed else
        f"no candidate passed the gate at every precision; the most accurate: {chosen.candidate.label}"
    )  # fmt: skip
    steps = [
        f"int8 by NNCF {version} post-training quantisation (transformer preset: weights per channel, activations "
        f"calibrated on {len(feeds)} texts from {source}; softmax and norms in float), {verdict}"
        + (", here and in the target container's OpenVINO" if served is not None else ""),
        *(trial.line() for trial in trials if trial is not chosen),
    ]
    return steps, list(chosen.reports), list(chosen.there)


def container_check(
    runtime: Runtime, plan: BuildPlan, onnx: Export, variant: Variant, console: Console, release: str, python: Path
) -> ContainerReport | dict[str, str]:
    """Stage 5 for OpenVINO IR: the gate again in the container's OpenVINO, at each precision."""
    target = container(release)
    spec = plan.spec
    if variant.reference is None:
        return {"skipped": "no gate reference"}
    reports, there = [], f"{runtime.title} {runtime.container_release(target)}"
    measured = variant.gated_there if release == spec.containers[0] else ()  # the INT8 search gated this file there
    for index, precision in enumerate(cpu_precisions()):
        if measured:
            accuracy = measured[index]
        else:
            with (
                console.status(f"Gating the IR at {precision.upper()} in {there}…"),
                stage("container check"),
                runtime.container_session(onnx.target.with_name(IR_FILE), python, precision) as session,
            ):
                accuracy = variant.reference.measure(session, f"{precision.upper()} in {session.label}")
        where = accuracy.variant.split(" in ")[-1]  # the runtime the gate ran in
        report = ContainerReport(where, "gate", target.release, accuracy.passed, accuracy=accuracy, label=where)
        console.print(report.summary())
        if not report.passed and not spec.accept_accuracy_loss:
            raise AccuracyError(f"{report.summary()}; nothing was published (or build with --no-container-check)")
        reports.append(accuracy)
    precisions = "/".join(p.upper() for p in cpu_precisions())
    worst = dataclasses.replace(worst_of(reports), variant=f"{precisions} in {where}")
    return ContainerReport(where, "gate", target.release, worst.passed, accuracy=worst, label=where)
