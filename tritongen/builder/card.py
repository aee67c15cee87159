"""The model card: what a version was built from, what it serves, and the figures of every gate it passed.

Written beside ``build.json`` in the ensemble's version folder; a person reads it, the tools read ``build.json``.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from tritongen.buildspec import usable_cores
from tritongen.gates.parity import ParityReport
from tritongen.model.checkpoint import Checkpoint
from tritongen.model.fold import FoldReport
from tritongen.runtimes import Variant, get_runtime
from tritongen.runtimes.base import UNBATCHED
from tritongen.sizing import SizingReport
from tritongen.sizing.cpu_side import REFERENCE_CPU_SIDE
from tritongen.tasks import BuildPlan

__all__ = ["SEARCH_PLOT", "backend_record", "model_card"]

SEARCH_PLOT = "int8_search.png"  # next to model_card.md


def model_card(
    plan: BuildPlan,
    version: int,
    report: ParityReport,
    variant: Variant | None,
    folding: FoldReport | None = None,
    sizing: SizingReport | None = None,
) -> str:
    """``model_card.md``: what was built from what, the served contract, and every gate's figures."""
    import onnxruntime
    import torch
    import transformers

    spec, checkpoint, bound, facts = plan.spec, plan.checkpoint, plan.bound, plan.facts

    def shape(dims: tuple[int, ...]) -> list[int]:
        return list(dims) if bound.batched_io else [-1, *dims]  # whole requests: the batch axis is in dims

    outputs = ", ".join(f"`{t.name}` ({t.data_type}, {shape(t.dims)})" for t in bound.ensemble_outputs)
    architectures = ", ".join(checkpoint.architectures) or "bare encoder"
    tools = f"torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime {onnxruntime.__version__}"
    lines = [
        f"# {spec.name} — version {version}",
        "",
        f"- source checkpoint: `{checkpoint.path}` ({checkpoint.model_type}, {architectures})",
        f"- task: {bound.task}",
        f"- built: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- model inputs: {', '.join(facts.inputs)} (from the model's forward signature and config)",
        *plan.bound.modality.card_lines(plan),
        "- contract: inputs "
        + ", ".join(f"`{t.name}`" for t in bound.request_inputs)
        + f" (TYPE_STRING, {shape((1,))})"
        + "".join(
            f", optional `{t.name}` ({t.data_type}, {shape(t.dims)})"
            for t in bound.ensemble_inputs
            if t not in bound.request_inputs
        )
        + "; outputs "
        + outputs,
        f"- tools: {tools}",
        _remote_code_line(checkpoint),
    ]
    lines += bound.card_lines
    lines.append(f"- served model: {get_runtime(spec.runtime).variant_name(spec, variant)} ({spec.runtime} runtime)")
    lines.append(_backend_line(spec))
    lines.append(_sizing_line(spec, sizing))
    if folding is not None:
        lines.append(folding.card_line())
    if spec.device == "gpu" and spec.cpu_cores:
        lines.append(_cpu_side_line(spec, folded=folding is not None and folding.folded))
    card = "\n".join(lines) + "\n\n## Parity of the FP32 export\n\n" + report.to_markdown()
    if sizing is not None:
        card += "\n## Model step layout\n\n" + "\n".join(sizing.card_lines()) + "\n"
    if variant is not None:
        optimized = variant.optimized
        card += "\n## Optimisation\n\n" + "".join(f"- {step}\n" for step in optimized.steps)
        if optimized.fused_operators:
            card += f"- fused operators: {optimized.fused_operators}\n"
        card += "\n" + variant.accuracy.to_markdown(accepted=spec.accept_accuracy_loss)
        if variant.search is not None:
            card += "\n" + variant.search.to_markdown(SEARCH_PLOT)
    return card


def backend_record(spec: Any) -> dict[str, str]:
    """What runs the model step on the node (the target container's backend) and what ran it here."""
    from tritongen.containers import container
    from tritongen.serve.backends import served_backends

    runtime, target = get_runtime(spec.runtime), container(spec.containers[0])
    release = runtime.container_release(target)
    node = f"the {runtime.backend} backend of Triton {target.release}" + (
        f", {runtime.title} {release}" if release else ""
    )
    here = served_backends(target.release).describe(runtime.backend) if runtime.local_backend else "not served here"
    return {"node": node, "here": here}


def _backend_line(spec: Any) -> str:
    """The card's line on the backend that serves the model step on the node, and the one that served it here."""
    record = backend_record(spec)
    return f"- model step backend: {record['node']} on the node; served here by {record['here']}"


def _sizing_line(spec: Any, sizing: SizingReport | None = None) -> str:
    """The card's line on the model step's instances and threads, the CPU node, and how they were chosen."""
    group = spec.model_instances
    runtime = get_runtime(spec.runtime)
    threads = runtime.threads(spec)
    line = f"- model step: {group.count} instance(s) on {'GPU' if group.kind == 'KIND_GPU' else 'CPU'}"
    line += f", {threads} thread(s) each" if threads else ", the runtime's default threads"
    if spec.cpu_cores:
        line += f"; sized for a {spec.cpu_cores}-core node (`cpu_cores`, `--cpu-cores` for another)"
    if group.kind == "KIND_GPU":
        return line
    if not runtime.triton_batches(spec):
        line += f"; {UNBATCHED}"
    if sizing is not None:
        return line + f"; measured and chosen at build time ({sizing.prefer}, [below](#model-step-layout))"
    if not runtime.measures_layout:
        return line + f"; not measured ({runtime.title}'s layout is not measured at build time)"
    if not spec.model_layout.left_open:
        return line + "; as the spec sets it, not measured"
    if spec.cpu_cores and spec.cpu_cores > usable_cores():
        return line + "; the fixed default, not measured (the node has more cores than the build machine)"
    return line + "; the fixed default, not measured (`model_layout: {measure: false}`)"


def _cpu_side_line(spec: Any, *, folded: bool) -> str:
    """The card's line on a GPU build's CPU side: the Python steps' instances, the node, and what they carry."""
    tokenizers = spec.tokenizer_instances.count
    one_text, batch = REFERENCE_CPU_SIDE.capacity(spec.cpu_cores, tokenizers)
    post = "folded into the graph" if folded else f"{spec.postprocess_instances.count} instance(s)"
    return (
        f"- CPU side (everything but the model step, on a {spec.cpu_cores}-core node): tokenizer {tokenizers} "
        f"instance(s), postprocess {post}; it carries about {one_text:,.0f} one-text requests/s and {batch:,.0f} "
        f"texts/s in requests of 32, by the reference per-core figures ({REFERENCE_CPU_SIDE.source}); measure "
        "the node's own with `make bench BENCH_ARGS=--free-model-step` on it"
    )


def _remote_code_line(checkpoint: Checkpoint) -> str:
    """The card's line on code shipped with the checkpoint: none, or which classes ran because it was trusted."""
    if not checkpoint.auto_map:
        return "- remote code: none (transformers' own classes)"
    classes = ", ".join(f"{name} -> `{target}`" for name, target in sorted(checkpoint.auto_map.items()))
    return f"- remote code: TRUSTED (trust_remote_code); config.json's auto_map: {classes}"
