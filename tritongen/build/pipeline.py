"""Build a Triton ensemble repository from a checkpoint: the pipeline's one entry point.

A build is a :class:`BuildPlan` (decided once, by :func:`inspect`) and a list of named stages, each
taking the plan and what earlier stages produced:

inspect -> export ONNX -> parity gate -> optimise and gate -> check in the container's runtime ->
record the canary -> render and validate configs -> write (into a staging area) -> publish atomically.
Nothing reaches the repository before :func:`publish`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib.util
import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from tritonclient.grpc import model_config_pb2 as mc

from tritongen import steps
from tritongen.configs.render import render_all
from tritongen.configs.steps import bucket_lengths, served_steps, step_configs, step_names
from tritongen.containers import Container, container
from tritongen.errors import (
    AccuracyError,
    ParityError,
    RepositoryError,
    SpecError,
    StageError,
    TritongenError,
    UnsupportedModelError,
)
from tritongen.gates.accuracy import AccuracyReport, GateReference, read_texts, require_accuracy, worst_of
from tritongen.gates.compat import (
    ContainerCheck,
    ContainerReport,
    ContainerSession,
    check_in_container,
    container_gate,
    container_python,
)
from tritongen.gates.parity import PARITY_TEXTS, ParityReport, ReferenceModel, require_parity
from tritongen.gates.texts import length_texts
from tritongen.model.checkpoint import Checkpoint, inspect_checkpoint
from tritongen.model.export import export_onnx
from tritongen.model.facts import ModelFacts
from tritongen.model.fold import FOLD_TOLERANCE, FoldReport, fold_graph, prove, reference_postprocess
from tritongen.precision.int8_search import (
    SCHEMES,
    SearchFeedback,
    SearchReport,
    SearchSettings,
    ServedGate,
    search_int8,
)
from tritongen.precision.optimize import OptimizeReport, int8_weights_saturate, optimize_model
from tritongen.repository.canary import CANARY_FILE
from tritongen.repository.canary import record as record_canary
from tritongen.repository.staging import Staging, staging
from tritongen.runtimes.openvino import (
    IR_FILE,
    OpenVinoSession,
    convert_to_ir,
    cpu_precisions,
    openvino_version,
    quantize_ir,
)
from tritongen.runtimes.tensorrt import EnginePlan, builder_flags, cc_model_filenames, plan_profiles
from tritongen.spec import BuildSpec
from tritongen.tasks import Task, TaskPlan, detect_task, get_task
from tritongen.tasks._base import NO_TOKENIZER_LIMIT

__all__ = [
    "BuildPlan",
    "BuildResult",
    "Export",
    "Variant",
    "build_repository",
    "export",
    "exported",
    "inspect",
    "optimise",
    "parity",
    "publish",
    "render",
    "step_names",
    "write",
]

_PY_MODELS = Path(steps.__file__).resolve().parent


SEARCH_PLOT = "int8_search.png"  # next to model_card.md


@dataclass(frozen=True)
class Variant:
    """What optimisation produced: the steps taken, the gate's figures, and the INT8 search (int8 only)."""

    optimized: OptimizeReport
    accuracy: AccuracyReport
    search: SearchReport | None = None
    reference: GateReference | None = field(default=None, repr=False, compare=False)  # for the container check


@dataclass(frozen=True)
class BuildResult:
    """What a build published."""

    name: str
    task: str
    version: int
    repository: Path
    parity: ParityReport
    max_length: int
    accuracy: AccuracyReport | None = None
    int8_search: SearchReport | None = None


def _choose_task(spec: BuildSpec, checkpoint: Checkpoint) -> Task:
    if spec.task is None:
        return detect_task(checkpoint)
    task = get_task(spec.task)
    if not task.has_head(checkpoint):
        raise UnsupportedModelError(
            f"task `{task.name}` needs a *{task.head} checkpoint; "
            f"{{path}} has {checkpoint.architectures or 'no architectures'}",
            path=checkpoint.path,
        )
    return task


def _model_card(
    plan: BuildPlan, version: int, report: ParityReport, variant: Variant | None, folding: FoldReport | None = None
) -> str:
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
        *plan.task.modality.card_lines(plan),
        "- contract: inputs "
        + ", ".join(f"`{t.name}`" for t in _required(bound.ensemble_inputs))
        + f" (TYPE_STRING, {shape((1,))})"
        + "".join(
            f", optional `{t.name}` ({t.data_type}, {shape(t.dims)})" for t in bound.ensemble_inputs if t.optional
        )
        + "; outputs "
        + outputs,
        f"- tools: {tools}",
        _remote_code_line(checkpoint),
    ]
    lines += bound.card_lines
    lines.append(f"- served model: {_variant_name(spec, variant)} ({spec.runtime} runtime)")
    if folding is not None:
        lines.append(folding.card_line())
    card = "\n".join(lines) + "\n\n## Parity of the FP32 export\n\n" + report.to_markdown()
    if variant is not None:
        optimized = variant.optimized
        card += "\n## Optimisation\n\n" + "".join(f"- {step}\n" for step in optimized.steps)
        if optimized.fused_operators:
            card += f"- fused operators: {optimized.fused_operators}\n"
        card += "\n" + variant.accuracy.to_markdown(accepted=spec.accept_accuracy_loss)
        if variant.search is not None:
            card += "\n" + variant.search.to_markdown(SEARCH_PLOT)
    return card


def _remote_code_line(checkpoint: Checkpoint) -> str:
    """The card's line on code shipped with the checkpoint: none, or which classes ran because it was trusted."""
    if not checkpoint.auto_map:
        return "- remote code: none (transformers' own classes)"
    classes = ", ".join(f"{name} -> `{target}`" for name, target in sorted(checkpoint.auto_map.items()))
    return f"- remote code: TRUSTED (trust_remote_code); config.json's auto_map: {classes}"


def _variant_name(spec: BuildSpec, variant: Variant | None = None) -> str:
    if spec.runtime == "openvino":
        weights = "INT8 IR (NNCF)" if spec.precision == "int8" else "FP32 IR"
        return f"{weights}, BF16 where the CPU has it"
    name = spec.precision.upper()
    if variant is not None and variant.search is not None and variant.search.chosen is not None:
        name += f" {variant.search.chosen.candidate.label}"
    elif spec.precision == "int8":
        name += f" {spec.quantization}"
    return name + (" optimised" if spec.optimize else "")


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # e.g. the "sequence longer than maximum" notice the parity texts trigger


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
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


def _required(tensors: Sequence[Any]) -> list[Any]:
    """The inputs every request carries (the texts), without the optional ones."""
    return [t for t in tensors if not t.optional]


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


def build_repository(spec: BuildSpec, *, console: Console | None = None) -> BuildResult:
    """Build ``spec`` into a new version of its ensemble; publish only if every check passes."""
    console = console or Console(stderr=True)
    _quiet_transformers()
    plan = inspect(spec, console)
    with staging(spec.repository, list(plan.names.values())) as work:
        with exported(plan, work, console) as onnx:
            report = parity(plan, onnx, console)
            variant = optimise(plan, onnx, console)
            checks = container_check(plan, onnx, variant, console)
            canary(plan, onnx, work, console)
            folding = fold(plan, onnx, console)
        configs = render(plan, folded=folding.folded)
        write(plan, work, configs, report, variant, checks, folding)
        version = publish(plan, work, console)
    accuracy = None if variant is None else variant.accuracy
    search = None if variant is None else variant.search
    return BuildResult(
        spec.name, plan.task.name, version, Path(spec.repository), report, plan.max_length, accuracy, search
    )


def _row_cap(spec: BuildSpec, checkpoint: Checkpoint, preprocessor: Any, task: Task) -> int | None:
    """The shortest length declared before the model is probed (spec, sentence-transformers, tokenizer), or None.

    No row is longer, so the model's length needs no proof beyond it (``model_facts.position_limit``).
    """
    tokenizer_max = task.modality.max_length(preprocessor)
    declared = [spec.max_length, checkpoint.pooling.max_seq_length]
    declared.append(tokenizer_max if tokenizer_max and tokenizer_max < NO_TOKENIZER_LIMIT else None)
    return min((int(n) for n in declared if n), default=None)


def inspect(spec: BuildSpec, console: Console) -> BuildPlan:
    """Stage 1: read the checkpoint, choose its task, load its tokenizer and model; refuse bad settings early."""
    with console.status("Inspecting checkpoint…"):
        checkpoint = inspect_checkpoint(spec.model, trust_remote_code=spec.trust_remote_code)
        task = _choose_task(spec, checkpoint)
        task.modality.check_spec(spec)
        hf_tokenizer = task.modality.load(checkpoint)  # the tokenizer, or the image processor
    with console.status("Loading PyTorch weights…"), _stage("loading the PyTorch model"):
        module = task.load_module(checkpoint)
    with console.status("Reading the model's inputs and length limit…"), _stage("reading the model's inputs"):
        facts = task.modality.facts(module, hf_tokenizer, _row_cap(spec, checkpoint, hf_tokenizer, task))
    tokenizer_facts, pad_id = task.modality.step_facts(hf_tokenizer)
    bound = task.bind(  # refuses bad task settings before exporting
        spec, checkpoint, inputs=list(facts.inputs), position_limit=facts.position_limit,
        tokenizer_max=task.modality.max_length(hf_tokenizer), tokenizer_facts=tokenizer_facts,
    )  # fmt: skip
    plan = BuildPlan(
        spec=spec,
        checkpoint=checkpoint,
        task=task,
        bound=bound,
        facts=facts,
        pad_id=pad_id,
        tokenizer_facts=tokenizer_facts,
        hf_tokenizer=hf_tokenizer,
        module=module,
    )
    console.print(
        f"[bold]{checkpoint.path}[/]: {checkpoint.model_type}, task {task.name}, max length {plan.max_length} "
        f"(model: {facts.position_limit}, {facts.limit_source}), inputs {', '.join(plan.inputs)}"
    )
    return plan


@contextlib.contextmanager
def exported(plan: BuildPlan, work: Staging, console: Console) -> Iterator[Export]:
    """Stage 2 as a context: :func:`export`, then remove the FP32 file however the stages inside end."""
    onnx = export(plan, work, console)
    try:
        yield onnx
    finally:
        onnx.fp32_path.unlink(missing_ok=True)


def export(plan: BuildPlan, work: Staging, console: Console) -> Export:
    """Stage 2: stage the first step's files (``tokenizer.json``) and export the FP32 ONNX model (dynamic axes)."""
    names, modality = plan.names, plan.task.modality
    encoder = modality.encoder(plan, work.version_dir(names["tokenizer"]))
    onnx = Export(
        encoder, work.root.parent / f"{work.root.name}.fp32.onnx", work.version_dir(names["model"]) / "model.onnx"
    )
    try:
        with console.status("Exporting to ONNX (dynamic batch and sequence axes)…"), _stage("ONNX export"):
            sample = modality.export_sample(encoder)
            export_onnx(
                plan.module, sample, plan.bound.onnx_output.name, onnx.fp32_path, axes=modality.dynamic_axes(plan)
            )
    except BaseException:
        onnx.fp32_path.unlink(missing_ok=True)
        raise
    return onnx


def parity(plan: BuildPlan, onnx: Export, console: Console) -> ParityReport:
    """Stage 3: the FP32 export, served path and all, must match PyTorch; raise :class:`ParityError` if not."""
    with console.status("Checking parity against PyTorch…"), _stage("parity check"):
        report = plan.task.modality.parity(plan, onnx.encoder, onnx.fp32_path)
    console.print(Markdown(report.to_markdown()))
    require_parity(report)
    return report


def optimise(plan: BuildPlan, onnx: Export, console: Console) -> Variant | None:
    """Stage 4: optimise/convert the FP32 export into the served model and gate it; None when FP32 is served as is.

    INT8 searches for the fastest quantisation that passes the gate (``tritongen.precision.int8_search``).
    """
    spec, target = plan.spec, onnx.target
    if spec.runtime == "openvino":
        return _openvino(plan, onnx, console)
    if spec.precision == "fp32" and not spec.optimize:
        shutil.copyfile(onnx.fp32_path, target)
        return None
    validation, calibration, calibration_source = _gate_texts(spec)
    with (
        console.status(f"Optimising ({spec.precision}, fusions {'on' if spec.optimize else 'off'})…"),
        _stage("optimisation"),
    ):
        optimized = optimize_model(
            onnx.fp32_path, target, plan.checkpoint, precision=spec.precision, fuse=spec.optimize
        )
    reference, gate_texts = _gate_reference(plan, onnx, console, validation)
    optimized.steps.append(gate_texts)
    search = None
    if spec.precision == "int8":
        settings = SearchSettings(
            reference, onnx.encoder, calibration, schemes=_int8_schemes(spec), symmetric=spec.runtime == "tensorrt",
            baseline=onnx.fp32_path, speed_texts=validation[:: max(1, len(validation) // 24)],
            accept_loss=spec.accept_accuracy_loss, curve=spec.int8_curve, served=_served_gate(plan, reference),
        )  # fmt: skip
        with console.status("INT8 search…") as status, _stage("INT8 search"):
            feedback = SearchFeedback(status.update, lambda line: _print_line(console, line))
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
        with console.status(f"Accuracy gate on {reference.count} validation texts…"), _stage("accuracy gate"):
            accuracy = reference.measure(target, _variant_name(spec))
    console.print(Markdown(accuracy.to_markdown(accepted=spec.accept_accuracy_loss)))
    require_accuracy(accuracy, accept_loss=spec.accept_accuracy_loss)
    return Variant(optimized, accuracy, search, reference)


def _print_line(console: Console, line: str) -> None:
    """A line as it is, above any spinner: no markup, and unwrapped so that it stays one line in a log."""
    console.print(line, markup=False, soft_wrap=True)


def _gate_texts(spec: BuildSpec) -> tuple[list[str], list[str], str]:
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


def _gate_reference(
    plan: BuildPlan, onnx: Export, console: Console, validation: Sequence[str]
) -> tuple[GateReference, str]:
    """FP32 PyTorch on the validation texts and on texts derived from them at every length; a line for the card.

    The derived texts (``tritongen.gates.texts``) run from one word to past the row, so the gate's minimum holds
    for the lengths requests come in, not only for the sample's sentences.
    """
    with console.status("Accuracy gate: FP32 PyTorch on the validation texts…") as status, _stage("accuracy gate"):
        lengths = length_texts(validation, lambda text: not onnx.encoder.encode([text])[0].overflowing)
        texts = [*validation, *lengths.texts]
        status.update(f"Accuracy gate: FP32 PyTorch on {len(texts)} validation texts…")
        model = ReferenceModel(plan.module, plan.hf_tokenizer, onnx.encoder, plan.max_length)
        reference = GateReference(model, gate=plan.bound.gate, texts=texts, pairs=plan.pairs(texts))
    return reference, f"accuracy gate texts: {len(validation)} validation texts and {lengths.describe(plan.max_length)}"


def _openvino(plan: BuildPlan, onnx: Export, console: Console) -> Variant:
    """Stage 4 for ``runtime: openvino``: the FP32 export as IR, gated at every precision OpenVINO may run it at.

    The served model is ``model.xml``/``model.bin`` (no ``model.onnx``). OpenVINO computes in BF16 on CPUs that
    have it and the native backend cannot force FP32, so FP32 and (where this CPU has it) BF16 must both pass.
    """
    spec = plan.spec
    xml = onnx.target.with_name(IR_FILE)
    version = openvino_version()
    validation, calibration, calibration_source = _gate_texts(spec)
    fp32_xml = onnx.fp32_path.with_suffix(".xml") if spec.precision == "int8" else xml  # outside the staged tree
    with console.status(f"Converting to OpenVINO {version} IR…"), _stage("OpenVINO conversion"):
        convert_to_ir(onnx.fp32_path, fp32_xml)
    steps = [f"converted to OpenVINO {version} IR (`{IR_FILE}`, FP32 weights); the precision is OpenVINO's choice"]
    if spec.precision == "int8":
        pairs = plan.pairs(calibration)
        feeds = [onnx.encoder([t], None if pairs is None else [pairs[i]]) for i, t in enumerate(calibration)]
        with console.status(f"INT8: NNCF calibration on {len(feeds)} texts…"), _stage("OpenVINO INT8"):
            nncf_version = quantize_ir(fp32_xml, xml, feeds)
        steps.append(
            f"int8 by NNCF {nncf_version} post-training quantisation (transformer preset: weights per channel, "
            f"activations calibrated on {len(feeds)} texts from {calibration_source}; softmax and norms in float)"
        )
    reference, gate_texts = _gate_reference(plan, onnx, console, validation)
    steps.append(gate_texts)
    precisions = cpu_precisions()
    reports = []
    int8 = spec.precision == "int8"
    for precision in precisions:
        name = f"OpenVINO {'INT8+' if int8 else ''}{precision.upper()}"
        with console.status(f"Accuracy gate: {name}…"), _stage("accuracy gate"):
            session = OpenVinoSession(xml, {"INFERENCE_PRECISION_HINT": precision, "NUM_STREAMS": 1})
            report = reference.measure(session, name)
        console.print(Markdown(report.to_markdown(accepted=spec.accept_accuracy_loss)))
        steps.append(f"gated at {name}: {'passed' if report.passed else 'FAILED'}, {report.summary()}")
        reports.append(report)
    if "bf16" not in precisions:
        steps.append("BF16 not gated: this CPU has no BF16; a node whose CPU has it computes in BF16 ungated")
    for report in reports:  # each by its own name: the native backend cannot opt out of BF16
        if not report.passed and not spec.accept_accuracy_loss:
            raise AccuracyError(
                f"accuracy gate failed: {report.summary()}; nothing was published"
                + ("; INT8 lost too much: build with --precision fp32, or accept it with --accept-accuracy-loss"
                   if int8 else "; OpenVINO computes in BF16 on CPUs that have it (the native backend cannot turn "
                   "that off): build with --runtime onnx" if "BF16" in report.variant else "")
            )  # fmt: skip
    accuracy = dataclasses.replace(worst_of(reports), variant=f"OpenVINO {'/'.join(p.upper() for p in precisions)}")
    return Variant(OptimizeReport(steps=steps), accuracy, None, reference)


def canary(plan: BuildPlan, onnx: Export, work: Staging, console: Console) -> None:
    """Stage 6: record the served model step's outputs on the parity texts (``canary.json``, for roll-outs).

    A roll-out sends the same texts through the new version's steps in the server and must get these outputs
    before traffic moves (``tritongen.serve.rollout``). Per-request tasks (NER, QA windows) and TensorRT plans
    (built on the GPU node) record none; their roll-out canaries only need an answer.
    """
    bound = plan.bound
    if not bound.batched_io or plan.spec.runtime != "onnx" or not plan.task.modality.records_canary:
        return
    with console.status("Recording the canary outputs…"), _stage("canary record"):
        segments = (PARITY_TEXTS, plan.pairs(PARITY_TEXTS))
        record_canary(
            work.version_dir(plan.names["ensemble"]) / CANARY_FILE, onnx.target, onnx.encoder,
            output=bound.onnx_output.name,
            inputs={t.name: list(texts) for t, texts in zip(_required(bound.ensemble_inputs), segments)},
            tolerance=plan.spec.parity_tolerance,
        )  # fmt: skip


def _served_gate(plan: BuildPlan, reference: GateReference) -> ServedGate | None:
    """The gate in the target container's runtime, for the INT8 search's candidates; None where it is skipped."""
    python = container_python(plan.spec.containers[0])
    if plan.spec.runtime == "tensorrt" or not plan.spec.container_check or python is None:
        return None
    runtime = f"ONNX Runtime {container(plan.spec.containers[0]).onnxruntime}"
    return ServedGate(container_gate(reference, python), runtime)


ContainerChecks = dict[str, "ContainerReport | dict[str, str]"]  # release -> its report, or why it was skipped


def container_check(plan: BuildPlan, onnx: Export, variant: Variant | None, console: Console) -> ContainerChecks:
    """Stage 5: the served model in the runtimes of every container the spec targets (``tritongen.gates.compat``).

    Lossless models (FP32, fusions) must give our runtime's outputs within the parity tolerance there; FP16
    and INT8 must pass the accuracy gate measured there; OpenVINO IR is gated at each CPU precision. A model
    that fails in any of them is refused in one line. Skipped (and recorded as skipped) for TensorRT plans,
    when the spec turns it off, or for a container whose venv was not created.
    """
    checks: ContainerChecks = {}
    for release in plan.spec.containers:
        python = container_python(release)
        why = (
            "the model step is a TensorRT plan" if plan.spec.runtime == "tensorrt"
            else "turned off in the spec" if not plan.spec.container_check
            else f"no venv for the {release} container (`make compat-venv` creates it)" if python is None
            else ""
        )  # fmt: skip
        if why or python is None:
            console.print(f"[yellow]Container runtime check skipped[/]: {why}")
            checks[release] = {"skipped": why}
        elif plan.spec.runtime == "openvino" and variant is not None:
            checks[release] = _openvino_container_check(plan, onnx, variant, console, container(release), python)
        else:
            checks[release] = _onnx_container_check(plan, onnx, variant, console, container(release), python)
    return checks


def _onnx_container_check(
    plan: BuildPlan, onnx: Export, variant: Variant | None, console: Console, target: Container, python: Path
) -> ContainerReport:
    spec = plan.spec
    feeds = plan.task.modality.feeds(plan, onnx.encoder)
    lossy = variant is not None and spec.precision != "fp32"
    with (
        console.status(f"Checking the served model in ONNX Runtime {target.onnxruntime} (Triton {target.release})…"),
        _stage("container check"),
    ):
        check = ContainerCheck(
            feeds, spec.parity_tolerance, reference=variant.reference if lossy and variant is not None else None,
            variant=_variant_name(spec, variant), batch_dependent=spec.precision == "int8", container=target.release,
        )  # fmt: skip
        report = check_in_container(onnx.target, python, check)
    console.print(report.summary())
    if not report.passed and not (lossy and spec.accept_accuracy_loss):
        error = AccuracyError if lossy else ParityError
        raise error(f"{report.summary()}; nothing was published (serve it elsewhere with --no-container-check)")
    return report


def _openvino_container_check(
    plan: BuildPlan, onnx: Export, variant: Variant, console: Console, target: Container, python: Path
) -> ContainerReport | dict[str, str]:
    """Stage 5 for OpenVINO IR: the gate again in the container's OpenVINO, at each precision."""
    spec = plan.spec
    if variant.reference is None:
        return {"skipped": "no gate reference"}
    reports = []
    for precision in cpu_precisions():
        with (
            console.status(f"Gating the IR at {precision.upper()} in OpenVINO {target.openvino}…"),
            _stage("container check"),
            ContainerSession(onnx.target.with_name(IR_FILE), python, precision) as session,
        ):
            accuracy = variant.reference.measure(session, f"{precision.upper()} in {session.version}")
        report = ContainerReport(session.version, "gate", target.release, accuracy.passed, accuracy=accuracy)
        console.print(report.summary())
        if not report.passed and not spec.accept_accuracy_loss:
            raise AccuracyError(f"{report.summary()}; nothing was published (or build with --no-container-check)")
        reports.append(accuracy)
    runtime, precisions = reports[0].variant.split(" in ")[-1], "/".join(p.upper() for p in cpu_precisions())
    worst = dataclasses.replace(worst_of(reports), variant=f"{precisions} in {runtime}")
    return ContainerReport(runtime, "gate", target.release, worst.passed, accuracy=worst)


def _int8_schemes(spec: BuildSpec) -> tuple[str, ...]:
    """The int8 schemes to search: the one pinned, else all; TensorRT takes only static (explicit QDQ)."""
    if spec.runtime == "tensorrt":
        return ("static",)
    return SCHEMES if spec.quantization == "auto" else (spec.quantization,)


def fold(plan: BuildPlan, onnx: Export, console: Console) -> FoldReport:
    """Stage 7: fold the postprocess step into the served graph where the task can and the fold proves itself.

    The folded graph must give the Python postprocess step's outputs (on the same run's raw output) on the
    parity texts, in our ONNX Runtime and the container's. The served file is replaced only then.
    """
    spec, bound = plan.spec, plan.bound
    served = served_steps(spec.repository, spec.name)  # a name keeps one ensemble shape across its versions
    tail = plan.task.graph_tail(plan.checkpoint) if spec.fold and spec.runtime == "onnx" else None
    why = (
        "not asked for (`--fold`, spec `fold: true`)" if not spec.fold
        else "a TensorRT plan is built on the GPU node from the model alone" if spec.runtime == "tensorrt"
        else f"the {spec.runtime} runtime serves the model alone, without ai.onnx.ml operators"
        if spec.runtime != "onnx"
        else f"the {bound.task} postprocess is not tensor math (strings or per-request logic)" if tail is None
        else f"the versions of `{spec.name}` already built serve a postprocess step" if "postprocess" in (served or ())
        else ""
    )  # fmt: skip
    if why:
        _same_shape(plan, served, folded=False, why=why)
        return FoldReport(False, why)
    assert tail is not None
    import onnx as onnx_lib
    import onnxruntime as ort

    texts = list(PARITY_TEXTS)
    pairs = plan.pairs(texts)
    feeds = [onnx.encoder(texts, pairs)] + [
        onnx.encoder([t], None if pairs is None else [pairs[i]]) for i, t in enumerate(texts)
    ]
    source, outputs = bound.onnx_output.name, list(tail.outputs)
    step = reference_postprocess(bound, list(plan.checkpoint.id2label.values()))
    folded_path = onnx.target.with_name("model.folded.onnx")
    runtimes = [ort.__version__]
    with console.status("Folding the postprocess step into the graph…"), _stage("postprocess fold"):
        model = onnx_lib.load(str(onnx.target))
        onnx_lib.save_model(fold_graph(model, source, tail), str(folded_path))
        try:
            session = ort.InferenceSession(str(folded_path), providers=["CPUExecutionProvider"])
            failure, worst = prove(session.run, source, outputs, step, feeds)
            python = container_python(spec.containers[0])
            if failure is None and python is not None and spec.container_check:
                with ContainerSession(folded_path, python) as container:
                    runtimes.append(container.version)
                    failure, diff = prove(container.run, source, outputs, step, feeds)
                    worst = max(worst, diff)
            if failure is not None:
                folded_path.unlink()
                report = FoldReport(False, f"the folded graph did not match the Python step: {failure}", worst)
                _same_shape(plan, served, folded=False, why=report.why)
                console.print(f"[yellow]Postprocess fold refused[/]: {report.why}")
                return report
            folded_path.replace(onnx.target)
        finally:
            folded_path.unlink(missing_ok=True)
    report = FoldReport(
        True,
        f"outputs {', '.join(outputs)} equal the Python step's within {FOLD_TOLERANCE:.0e} "
        f"(worst {worst:.1e}) on {len(texts)} parity texts in ONNX Runtime {' and '.join(runtimes)}",
        worst,
        tuple(runtimes),
    )
    console.print(f"[green]Postprocess folded into the graph[/]: {report.why}")
    return report


def _same_shape(plan: BuildPlan, served: tuple[str, ...] | None, *, folded: bool, why: str) -> None:
    """Refuse a version whose ensemble shape differs from the versions already built under the name.

    Versions of one name share the step folders and are switched step by step (``tritongen rollout``),
    so a folded version cannot sit beside unfolded ones (the other way round is avoided by not folding).
    """
    if served is not None and not folded and "postprocess" not in served:
        raise SpecError(
            f"`{plan.spec.name}` is served with its postprocess folded into the graph, but this build cannot fold "
            f"({why}); build it under a new --name"
        )


def render(plan: BuildPlan, *, folded: bool = False) -> dict[str, tuple[str, mc.ModelConfig]]:
    """Stage 8: the configs as ``config.pbtxt`` text, parsed with Triton's schema and wiring-checked."""
    return render_all(
        step_configs(
            plan.spec,
            plan.checkpoint,
            plan.task,
            plan.inputs,
            plan.max_length,
            plan.pad_id,
            plan.tokenizer_facts,
            plan=plan.bound,
            folded=folded,
        )
    )


def write(
    plan: BuildPlan,
    work: Staging,
    configs: Mapping[str, tuple[str, mc.ModelConfig]],
    report: ParityReport,
    variant: Variant | None,
    container: ContainerChecks | None = None,
    folding: FoldReport | None = None,
) -> None:
    """Stage 9: write everything else into the staging area: configs, Python steps, engine plan, card, reports."""
    spec, names = plan.spec, plan.names
    for step, (text, _) in configs.items():
        work.write_config(names[step], text)
    if spec.runtime == "tensorrt":
        engine = EnginePlan(
            inputs=plan.inputs,
            profiles=plan_profiles(plan.buckets, spec.max_batch_size),
            flags=builder_flags(spec.precision),
            workspace_bytes=spec.tensorrt.max_workspace_size_bytes,
            cc_model_filenames=cc_model_filenames(),
        )
        (work.version_dir(names["model"]) / "engine.json").write_text(engine.to_json())
    folding = folding or FoldReport(False, "not tried")
    _write_python_steps(plan, work, folded=folding.folded)
    card_dir = work.version_dir(names["ensemble"])
    if variant is not None and variant.search is not None and variant.search.trials:
        variant.search.plot(card_dir / SEARCH_PLOT)
    (card_dir / "model_card.md").write_text(_model_card(plan, work.version, report, variant, folding), encoding="utf-8")
    parity_json = {
        "passed": report.passed,
        "max_abs_diff": report.max_abs_diff,
        "tolerance": report.tolerance,
        "rows": [row.__dict__ for row in report.rows],
    }
    (card_dir / "parity.json").write_text(json.dumps(parity_json, ensure_ascii=False, indent=1), encoding="utf-8")
    record = _build_record(plan, variant)
    checks = {
        release: check.to_dict() if isinstance(check, ContainerReport) else check
        for release, check in (container or {}).items()
    }
    record["container"] = spec.containers[0]  # what `package` targets unless told otherwise
    record["container_runtime"] = checks.get(spec.containers[0])
    record["container_runtimes"] = checks
    record["fold"] = folding.to_dict()
    record["steps"] = [step for step in configs if step != "ensemble"]
    (card_dir / "build.json").write_text(json.dumps(record, indent=1), encoding="utf-8")


def _write_python_steps(plan: BuildPlan, work: Staging, *, folded: bool = False) -> None:
    """The tokenizer and postprocess ``model.py`` files, their helpers, and the files the postprocess reads."""
    names, bound = plan.names, plan.bound
    for step, module_name in bound.step_modules.items():
        if folded and step == "postprocess":
            continue
        target = work.version_dir(names[step])
        shutil.copyfile(_module_file(module_name), target / "model.py")
        for helper in bound.helper_modules[step]:
            shutil.copyfile(_PY_MODELS / f"{helper}.py", target / f"{helper}.py")
    if folded:
        return
    tok_dir, post_dir = work.version_dir(names["tokenizer"]), work.version_dir(names["postprocess"])
    for filename in bound.postprocess_files:
        shutil.copyfile(tok_dir / filename, post_dir / filename)
    labels = list(plan.checkpoint.id2label.values())
    (post_dir / "labels.json").write_text(json.dumps(labels, ensure_ascii=False))


def _module_file(name: str) -> Path:
    """The source file of a step module (``tritongen.tasks.qa.tokenizer``), served as a ``model.py``."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RepositoryError(f"step module `{name}` cannot be found")
    return Path(spec.origin)


def _build_record(plan: BuildPlan, variant: Variant | None) -> dict[str, Any]:
    """``build.json``: the spec and what the build decided and measured."""
    return {
        "spec": plan.spec.to_dict(),
        "checkpoint": str(plan.checkpoint.path),
        "task": plan.task.name,
        "max_length": plan.max_length,
        "inputs": plan.inputs,
        "position_limit": plan.facts.position_limit,
        "variant": _variant_name(plan.spec, variant),
        "accuracy": None if variant is None else variant.accuracy.__dict__,
        "int8_search": None if variant is None or variant.search is None else variant.search.to_dict(),
    }


def publish(plan: BuildPlan, work: Staging, console: Console) -> int:
    """Stage 9: move the staged version into the repository at once; return its number."""
    work.publish()
    console.print(f"[green]Published[/] `{plan.spec.name}` version {work.version} to {plan.spec.repository}")
    return work.version
