"""ONNX Runtime's build stages: optimise and gate the ONNX model, and check it in each container's ONNX Runtime.

Also the TensorRT plan's stage 4: the plan is built on the GPU node from the ONNX model served here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown

from tritongen.containers import container
from tritongen.cpu import int8_weights_saturate
from tritongen.errors import AccuracyError, ParityError, stage
from tritongen.gates.accuracy import require_accuracy
from tritongen.gates.compat import ContainerCheck, ContainerReport, check_in_container
from tritongen.precision.fusion import check_feeds
from tritongen.precision.int8_search import SearchFeedback, SearchSettings, search_int8
from tritongen.precision.optimize import optimize_model
from tritongen.runtimes.base import Export, Runtime, Variant
from tritongen.runtimes.gating import gate_reference, gate_texts, served_gate
from tritongen.tasks import BuildPlan

__all__ = ["container_check", "optimise"]


def optimise(runtime: Runtime, plan: BuildPlan, onnx: Export, console: Console) -> Variant | None:
    """Stage 4 for an ONNX model step: optimise/convert the FP32 export and gate it; None when FP32 is served as is.

    INT8 searches for the fastest quantisation that passes the gate (``tritongen.precision.int8_search``).
    """
    spec, target = plan.spec, onnx.target
    if spec.precision == "fp32" and not spec.optimize:
        shutil.copyfile(onnx.fp32_path, target)
        return None
    validation, calibration, calibration_source = gate_texts(spec)
    with (
        console.status(f"Optimising ({spec.precision}, fusions {'on' if spec.optimize else 'off'})…"),
        stage("optimisation"),
    ):
        fp32_cpu = spec.optimize and spec.precision == "fp32" and spec.device != "gpu"  # attention fused too
        feeds = check_feeds(onnx.encoder, validation) if fp32_cpu else []
        optimized = optimize_model(
            onnx.fp32_path, target, plan.checkpoint, precision=spec.precision, fuse=spec.optimize, attention_feeds=feeds
        )
    reference, gate_line = gate_reference(plan, onnx, console, validation)
    optimized.steps.append(gate_line)
    search = None
    if spec.precision == "int8":
        settings = SearchSettings(
            reference, onnx.encoder, calibration, schemes=runtime.int8_schemes(spec.quantization),
            symmetric=runtime.symmetric_int8, baseline=onnx.fp32_path,
            speed_texts=validation[:: max(1, len(validation) // 24)], accept_loss=spec.accept_accuracy_loss,
            curve=spec.int8_curve, served=served_gate(runtime, plan, reference), fuse_attention=spec.device != "gpu",
        )  # fmt: skip
        with console.status("INT8 search…") as status, stage("INT8 search"):
            feedback = SearchFeedback(status.update, lambda line: console.print(line, markup=False, soft_wrap=True))
            search = search_int8(target, target, settings, feedback)
        search.notes.insert(0, f"Calibration texts: {calibration_source}.")
        console.print(Markdown(search.to_markdown()))
        if search.chosen is None or not (search.chosen.passed or spec.accept_accuracy_loss):
            raise search.failure()
        accuracy = search.chosen.gated
        kept = search.layer_names(search.chosen.candidate.float_nodes)
        bits = "7-bit (no VNNI here: 8-bit ones saturate the int8 kernels)" if int8_weights_saturate() else "8-bit"
        optimized.steps.append(
            f"int8 {search.chosen.candidate.label}: {search.chosen.candidate.why} "
            f"({len(search.layers) - len(kept)} of {len(search.layers)} weight MatMuls in int8, per-channel {bits} "
            "weights; "
            f"chosen by the INT8 search below, {len(search.trials)} candidates measured)"
        )
    else:
        with console.status(f"Accuracy gate on {reference.count} validation texts…"), stage("accuracy gate"):
            accuracy = reference.measure(target, runtime.variant_name(spec))
    console.print(Markdown(accuracy.to_markdown(accepted=spec.accept_accuracy_loss)))
    require_accuracy(accuracy, accept_loss=spec.accept_accuracy_loss)
    chosen = None if search is None else search.chosen
    there = (chosen.container,) if chosen is not None and chosen.container is not None else ()
    return Variant(optimized, accuracy, search, reference, gated_there=there)


def container_check(
    runtime: Runtime,
    plan: BuildPlan,
    onnx: Export,
    variant: Variant | None,
    console: Console,
    release: str,
    python: Path,
) -> ContainerReport:
    """Stage 5 for an ONNX model: our runtime's outputs (lossless) or the gate (FP16, INT8) in the container's."""
    target = container(release)
    spec = plan.spec
    feeds = plan.bound.modality.feeds(plan, onnx.encoder)
    lossy = variant is not None and spec.precision != "fp32"
    there = variant.gated_there if variant is not None and release == spec.containers[0] else ()
    gated = there[0] if there else None
    release_there = runtime.container_release(target)
    if gated is not None:  # the INT8 search gated this very file there already: its figures stand
        label = f"{runtime.title} {release_there}"
        report = ContainerReport(release_there, "gate", target.release, gated.passed, accuracy=gated, label=label)
        console.print(report.summary())
        return report
    with (
        console.status(f"Checking the served model in {runtime.title} {release_there} (Triton {target.release})…"),
        stage("container check"),
        runtime.container_session(onnx.target, python) as session,
    ):
        check = ContainerCheck(
            feeds, spec.parity_tolerance, reference=variant.reference if lossy and variant is not None else None,
            variant=runtime.variant_name(spec, variant), batch_dependent=spec.precision == "int8",
            container=target.release,
        )  # fmt: skip
        report = check_in_container(session, check)
    console.print(report.summary())
    if not report.passed and not (lossy and spec.accept_accuracy_loss):
        error = AccuracyError if lossy else ParityError
        raise error(f"{report.summary()}; nothing was published (serve it elsewhere with --no-container-check)")
    return report
