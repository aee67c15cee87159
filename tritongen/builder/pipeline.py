"""Build a Triton ensemble repository from a checkpoint: the pipeline's one entry point.

A build is a :class:`BuildPlan` (decided once, by :func:`inspect`) and a list of named stages, each
taking the plan and what earlier stages produced:

inspect -> export ONNX -> parity gate -> optimise and gate -> check in the container's runtime ->
fold the postprocess into the graph -> lay out the model step (measured, where the spec leaves it open) ->
render and validate configs -> record the canary -> write (into a staging area) -> publish atomically. Nothing
reaches the repository before :func:`publish`.

Where a native Triton backend serves the runtime (``TRITONGEN_BACKENDS``, :mod:`tritongen.serve.backends`), the
layout timings and the canary record come from it, the model step served alone by a local tritonserver
(:class:`~tritongen.serve.step_server.StepServer`): the release the target container links, and its reading of
the config. Elsewhere they run in process with the session settings the config gives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.builder.card import SEARCH_PLOT, backend_record, model_card
from tritongen.builder.ensemble import step_configs
from tritongen.builder.spec import check_spec
from tritongen.buildspec import BuildSpec, usable_cores
from tritongen.configs.render import render_all
from tritongen.contract import WINDOW_EXAMPLE
from tritongen.cpu import VNNI_FLAGS, cpu_flags
from tritongen.errors import RepositoryError, SpecError, UnsupportedModelError, stage
from tritongen.gates.accuracy import AccuracyReport
from tritongen.gates.compat import ContainerReport, ContainerSession, container_python
from tritongen.gates.parity import PARITY_TEXTS, ParityReport, require_parity
from tritongen.model.checkpoint import Checkpoint, inspect_checkpoint
from tritongen.model.export import export_onnx
from tritongen.model.fold import FoldProof, FoldReport, fold_served
from tritongen.precision.int8_search import SearchReport
from tritongen.repository.canary import CANARY_FILE, Recorder
from tritongen.repository.canary import record as record_canary
from tritongen.repository.canary import tolerance as canary_tolerance
from tritongen.repository.contents import served_steps, served_windows
from tritongen.repository.staging import Staging, staging
from tritongen.runtimes import Export, Runtime, Variant, get_runtime
from tritongen.runtimes.base import UNBATCHED
from tritongen.serve.backends import installed_release, served_backends
from tritongen.serve.step_server import StepCall, StepServer, on_cpu
from tritongen.sizing import DOCUMENT_REQUESTS, DOCUMENTS_PER_REQUEST, Layout, SizingReport
from tritongen.sources import module_file
from tritongen.steps.helpers import write_helpers
from tritongen.tasks import BuildPlan, Task, detect_task, get_task, reference_postprocess
from tritongen.tasks._base import NO_TOKENIZER_LIMIT

__all__ = [
    "BuildResult", "Findings", "build_repository", "canary", "container_check", "documents_hint", "export",
    "exported", "fold", "inspect", "optimise", "parity", "publish", "render", "served_step", "size", "write",
]  # fmt: skip

SIZING_TEXTS = 32  # validation texts the layout stage times, spread over the file
ContainerChecks = dict[str, "ContainerReport | dict[str, str]"]  # release -> its report, or why it was skipped


@dataclass(frozen=True)
class Findings:
    """What the checking and measuring stages found, for the model card and ``build.json``."""

    parity: ParityReport
    variant: Variant | None = None
    container: ContainerChecks | None = None
    folding: FoldReport | None = None
    sizing: SizingReport | None = None


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


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # e.g. the "sequence longer than maximum" notice the parity texts trigger


def build_repository(spec: BuildSpec, *, console: Console | None = None) -> BuildResult:
    """Build ``spec`` into a new version of its ensemble; publish only if every check passes."""
    console = console or Console(stderr=True)
    _quiet_transformers()
    plan = inspect(spec, console)
    runtime = get_runtime(spec.runtime)  # checked in stage 1; the stages below are handed it, not a name
    with staging(spec.repository, list(plan.names.values())) as work:
        with exported(plan, work, console) as onnx:
            report = parity(plan, onnx, console)
            variant = optimise(plan, runtime, onnx, console)
            checks = container_check(plan, runtime, onnx, variant, console)
            folding = fold(plan, runtime, onnx, console)
            with served_step(plan, runtime) as steps:
                plan, sizing = size(plan, runtime, onnx, console, folded=folding.folded, steps=steps)
                configs = render(plan, folded=folding.folded)
                canary(plan, runtime, onnx, work, console, configs["model"][1], steps)
        write(plan, runtime, work, configs, Findings(report, variant, checks, folding, sizing))
        version = publish(plan, work, console)
    accuracy = None if variant is None else variant.accuracy
    search = None if variant is None else variant.search
    return BuildResult(
        spec.name, plan.bound.task, version, Path(spec.repository), report, plan.max_length, accuracy, search
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
    check_spec(spec)  # the runtime's checks, once, before anything is read
    with console.status("Inspecting checkpoint…"):
        checkpoint = inspect_checkpoint(spec.model, trust_remote_code=spec.trust_remote_code)
        task = _choose_task(spec, checkpoint)
        task.modality.check_spec(spec, serves_onnx=get_runtime(spec.runtime).serves_onnx)
        hf_tokenizer = task.modality.load(checkpoint)  # the tokenizer, or the image processor
    with console.status("Loading PyTorch weights…"), stage("loading the PyTorch model"):
        module = task.load_module(checkpoint)
    with console.status("Reading the model's inputs and length limit…"), stage("reading the model's inputs"):
        facts = task.modality.facts(module, hf_tokenizer, _row_cap(spec, checkpoint, hf_tokenizer, task))
    tokenizer_facts, pad_id = task.modality.step_facts(hf_tokenizer)
    bound = task.bind(  # refuses bad task settings before exporting
        spec, checkpoint, inputs=list(facts.inputs), position_limit=facts.position_limit,
        tokenizer_max=task.modality.max_length(hf_tokenizer), tokenizer_facts=tokenizer_facts,
    )  # fmt: skip
    plan = BuildPlan(
        spec=spec,
        checkpoint=checkpoint,
        bound=bound,
        facts=facts,
        pad_id=pad_id,
        tokenizer_facts=tokenizer_facts,
        hf_tokenizer=hf_tokenizer,
        module=module,
    )
    _same_windows(plan)
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
    names, modality = plan.names, plan.bound.modality
    encoder = modality.encoder(plan, work.version_dir(names["tokenizer"]))
    onnx = Export(
        encoder, work.root.parent / f"{work.root.name}.fp32.onnx", work.version_dir(names["model"]) / "model.onnx"
    )
    try:
        with console.status("Exporting to ONNX (dynamic batch and sequence axes)…"), stage("ONNX export"):
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
    with console.status("Checking parity against PyTorch…"), stage("parity check"):
        report = plan.bound.modality.parity(plan, onnx.encoder, onnx.fp32_path)
    console.print(Markdown(report.to_markdown()))
    require_parity(report)
    return report


def optimise(plan: BuildPlan, runtime: Runtime, onnx: Export, console: Console) -> Variant | None:
    """Stage 4: the runtime makes the served model from the FP32 export and gates it; None when served as is.

    ONNX Runtime's INT8 searches for the fastest quantisation that passes the gate (``tritongen.precision``).
    """
    return runtime.optimise(plan, onnx, console)


def container_check(
    plan: BuildPlan, runtime: Runtime, onnx: Export, variant: Variant | None, console: Console
) -> ContainerChecks:
    """Stage 5: the served model in the runtimes of every container the spec targets (``tritongen.gates.compat``).

    Lossless models (FP32, fusions) must give our runtime's outputs within the parity tolerance there; FP16
    and INT8 must pass the accuracy gate measured there; OpenVINO IR is gated at each CPU precision. A model
    that fails in any of them is refused in one line. Skipped (and recorded as skipped) where the runtime's
    model cannot run here (a TensorRT plan), when the spec turns it off, or for a container without a venv.
    """
    checks: ContainerChecks = {}
    for release in plan.spec.containers:
        python = container_python(release)
        why = (
            runtime.container_check_skipped
            or ("turned off in the spec" if not plan.spec.container_check else "")
            or (f"no venv for the {release} container (`make compat-venv` creates it)" if python is None else "")
        )
        if why or python is None:
            console.print(f"[yellow]Container runtime check skipped[/]: {why}")
            checks[release] = {"skipped": why}
        else:
            checks[release] = runtime.container_check(plan, onnx, variant, console, release, python)
    return checks


@contextlib.contextmanager
def served_step(plan: BuildPlan, runtime: Runtime) -> Iterator[StepServer | None]:
    """A server for the model step alone where a native backend serves the build's runtime; else None."""
    backends = served_backends(plan.spec.containers[0])
    if backends.of(runtime.backend) is None:
        yield None
        return
    with StepServer(backends) as steps:
        yield steps


def _served_by(runtime: Runtime, steps: StepServer | None) -> str:
    """What runs the model step for the layout timings and the canary, in words."""
    if steps is not None:
        return steps.backends.describe(runtime.backend)
    release = installed_release(runtime.package)
    return f"in process, {runtime.title} {release} (as the {runtime.backend} stand-in runs it)"


def canary(
    plan: BuildPlan,
    runtime: Runtime,
    onnx: Export,
    work: Staging,
    console: Console,
    config: mc.ModelConfig,
    steps: StepServer | None,
) -> None:
    """Stage 9: record the served model step's outputs on the parity texts (``canary.json``, for roll-outs).

    The step runs as the node runs it (``config``, the rendered model step): through the native backend where
    ``steps`` serves it, else in process with the session settings the config gives. A roll-out sends the same
    texts through the new version's steps in the server and must get these outputs, within the precision's
    tolerance, before traffic moves (``tritongen.serve.rollout``). Per-request tasks (NER, QA windows) and
    TensorRT plans (built on the GPU node) record none; their roll-out canaries only need an answer.
    """
    bound = plan.bound
    if not bound.batched_io or not runtime.serves_onnx or not bound.modality.records_canary:
        return
    with console.status("Recording the canary outputs…"), stage("canary record"):
        if steps is not None:
            run = steps.call(steps.load(onnx.target.parent, on_cpu(config)))
        else:
            run = runtime.served_session(onnx.target, plan.spec)
        assert run is not None
        segments = (PARITY_TEXTS, plan.pairs(PARITY_TEXTS))
        record_canary(
            work.version_dir(plan.names["ensemble"]) / CANARY_FILE,
            Recorder(run, _served_by(runtime, steps), plan.spec.max_batch_size),
            onnx.encoder,
            output=bound.onnx_output.name,
            # segments is (texts, pairs): a one-text task requires one input, so its second (None) goes unused.
            inputs={t.name: list(texts) for t, texts in zip(bound.request_inputs, segments, strict=False)},
            tolerance_of=functools.partial(canary_tolerance, plan.spec.precision, plan.spec.parity_tolerance),
        )


def fold(plan: BuildPlan, runtime: Runtime, onnx: Export, console: Console) -> FoldReport:
    """Stage 6: fold the postprocess step into the served graph where the task can and the fold proves itself.

    The folded graph must give the Python postprocess step's outputs (on the same run's raw output) on the
    parity texts, in our ONNX Runtime and the container's. The served file is replaced only then.
    """
    spec, bound = plan.spec, plan.bound
    served = served_steps(spec.repository, spec.name)  # a name keeps one ensemble shape across its versions
    refused = runtime.fold_refused
    tail = bound.graph_tail if spec.fold and not refused else None
    why = (
        "not asked for (`--fold`, spec `fold: true`)" if not spec.fold
        else refused if refused
        else f"the {bound.task} postprocess is not tensor math (strings or per-request logic)" if tail is None
        else f"the versions of `{spec.name}` already built serve a postprocess step" if "postprocess" in (served or ())
        else ""
    )  # fmt: skip
    if why:
        _same_shape(plan, served, why=why)
        return FoldReport(False, why)
    assert tail is not None
    python = container_python(spec.containers[0]) if spec.container_check else None
    container = None if python is None else functools.partial(ContainerSession, python=python)
    with console.status("Folding the postprocess step into the graph…"), stage("postprocess fold"):
        report = fold_served(onnx.target, tail, _fold_proof(plan, onnx), container=container)
    if not report.folded:
        _same_shape(plan, served, why=report.why)
        console.print(f"[yellow]Postprocess fold refused[/]: {report.why}")
        return report
    console.print(f"[green]Postprocess folded into the graph[/]: {report.why}")
    return report


def _fold_proof(plan: BuildPlan, onnx: Export) -> FoldProof:
    """What the fold must reproduce: the Python postprocess step on the parity texts, together and one by one."""
    texts = list(PARITY_TEXTS)
    pairs = plan.pairs(texts)
    feeds = [onnx.encoder(texts, pairs)] + [
        onnx.encoder([t], None if pairs is None else [pairs[i]]) for i, t in enumerate(texts)
    ]
    step = reference_postprocess(plan.bound, list(plan.checkpoint.id2label.values()))
    return FoldProof(plan.bound.onnx_output.name, step, feeds, len(texts))


def _same_shape(plan: BuildPlan, served: tuple[str, ...] | None, *, why: str) -> None:
    """Refuse an unfolded version where the versions already built under the name are folded.

    Versions of one name share the step folders and are switched step by step (``tritongen rollout``),
    so an unfolded version cannot sit beside folded ones (the other way round is avoided by not folding).
    """
    if served is not None and "postprocess" not in served:
        raise SpecError(
            f"`{plan.spec.name}` is served with its postprocess folded into the graph, but this build cannot fold "
            f"({why}); build it under a new --name"
        )


def _same_windows(plan: BuildPlan) -> None:
    """Refuse a version that splits texts into windows where the versions already built do not, or the other way.

    A request is then a different number of model rows with other tensors between the steps, and the versions of
    one name share step folders and are switched step by step (``tritongen rollout``): an embedding's
    ``long_text`` stays what its name was first built with.
    """
    served = served_windows(plan.spec.repository, plan.spec.name)
    windowed = any(t.name == WINDOW_EXAMPLE for t in plan.bound.tokenizer_outputs)
    if served is not None and served != windowed:
        how = ("split texts into windows", "does not") if served else ("do not split texts into windows", "does")
        raise SpecError(
            f"`{plan.spec.name}` is served by versions that {how[0]} and this build {how[1]} (embedding long_text); "
            "build it under a new --name"
        )


def size(
    plan: BuildPlan,
    runtime: Runtime,
    onnx: Export,
    console: Console,
    *,
    folded: bool = False,
    steps: StepServer | None = None,
) -> tuple[BuildPlan, SizingReport | None]:
    """Stage 7: the model step's layout on a CPU node, decided once; where it is measured, a few timed and one taken.

    Where the spec leaves the layout open (``model_layout.left_open``), the fixed default
    (:meth:`~tritongen.sizing.CpuLayout.decided`); where this machine can stand in for the node (or
    ``model_layout.measure`` asks), its candidates are timed and the rule's pick taken instead. The plan's spec
    holds the layout decided, which rendering reads; the report is None where nothing was measured (the spec sizes
    the step itself, ``measure`` is off, or the task's inputs are not text).
    The Python steps' instances (the postprocess step's unless ``folded``) keep a core each from threads that spin.
    Each layout is served by the native backend where ``steps`` serves it, with its config as rendered.
    """
    spec = plan.spec
    decided = runtime.decided_layout(spec, usable=usable_cores())
    if not decided.measure or plan.bound.modality.name != "text":
        if not spec.model_layout.left_open:
            return plan, None  # the spec's own layout, as given
        return dataclasses.replace(
            plan, spec=runtime.with_layout(spec, dataclasses.replace(decided, measure=False))
        ), None
    from tritongen.data.datasets import DOCUMENT_WORDS
    from tritongen.gates.accuracy import read_texts
    from tritongen.sizing.measure import documents_of, measure_layouts

    texts = read_texts(spec.validation, "validation")
    per_request = DOCUMENTS_PER_REQUEST if decided.workload == "documents" else 1
    if per_request > 1:  # long texts, as a corpus is indexed
        texts = documents_of(texts, DOCUMENTS_PER_REQUEST * DOCUMENT_REQUESTS, DOCUMENT_WORDS)
    else:
        texts = texts[:: max(1, len(texts) // SIZING_TEXTS)][:SIZING_TEXTS]

    def laid_out(layout: Layout) -> BuildPlan:
        return dataclasses.replace(plan, spec=runtime.with_layout(spec, dataclasses.replace(decided, layout=layout)))

    def in_process(layout: Layout) -> Any:
        return runtime.served_session(onnx.target, laid_out(layout).spec)

    open_session: Callable[[Layout], Any] = in_process
    if steps is not None:
        open_session = _ServedLayouts(
            steps, onnx.target.parent, lambda l_: render(laid_out(l_), folded=folded)["model"][1]
        )
    start = time.perf_counter()
    with console.status("Measuring the model step's layouts…") as status, stage("model step layout"):
        measured = measure_layouts(
            decided.candidates(folded=folded),
            open_session,
            lambda batch: onnx.encoder(list(batch), plan.pairs(list(batch))),
            texts,
            progress=lambda message: status.update(f"Measuring the {message}…"),
            per_request=per_request,
            triton_batches=lambda layout: runtime.triton_batches(laid_out(layout).spec),
        )
    refined, chosen, why = decided.refined(measured)
    report = SizingReport(decided.prefer, decided.cores, measured, chosen, why, len(texts),
                          time.perf_counter() - start, measured_on=_served_by(runtime, steps),
                          workload=decided.workload)  # fmt: skip
    console.print(f"[green]Model step layout[/]: {chosen.layout.label}, because {why} ({report.seconds:.0f} s)")
    sized = runtime.with_layout(spec, refined)
    hint = documents_hint(decided.workload, runtime.name, spec.precision, cpu_flags())
    if hint is not None:
        report.notes.append(hint)
        console.print(f"[yellow]Note[/]: {hint}")
    if not runtime.triton_batches(sized):  # the card's model-step line says it too
        console.print(f"[yellow]Note[/]: {UNBATCHED}")
    return dataclasses.replace(plan, spec=sized), report


def documents_hint(workload: str, runtime: str, precision: str, flags: frozenset[str]) -> str | None:
    """Where a documents build's CPU has int8 dot products, that OpenVINO's INT8 serves documents faster (else None)."""
    if workload != "documents" or (runtime, precision) == ("openvino", "int8") or not flags & set(VNNI_FLAGS):
        return None
    return (
        "this machine's CPU has int8 dot products (VNNI or AMX); on a node whose CPU does too, `--runtime openvino "
        "--precision int8` computes requests of long texts faster than this build (MiniLM, 32 articles per request: "
        "1.4x the sentence-transformers script served on a CPU with BF16, and 1.2x in process at FP32 around the "
        "INT8, as a CPU without BF16 computes it; docs/benchmarks.md)"
    )


class _ServedLayouts:
    """Opens a layout's instances in the step server: the step loaded once per layout, one caller per instance."""

    def __init__(self, steps: StepServer, version_dir: Path, config_of: Callable[[Layout], mc.ModelConfig]) -> None:
        self.steps, self.version_dir, self.config_of = steps, version_dir, config_of
        self.current: tuple[Layout, str] | None = None

    def __call__(self, layout: Layout) -> StepCall:
        if self.current is None or self.current[0] != layout:
            if self.current is not None:
                self.steps.unload(self.current[1])
            self.current = (layout, self.steps.load(self.version_dir, self.config_of(layout)))
        return self.steps.call(self.current[1])


def render(plan: BuildPlan, *, folded: bool = False) -> dict[str, tuple[str, mc.ModelConfig]]:
    """Stage 8: the configs as ``config.pbtxt`` text, parsed with Triton's schema and wiring-checked."""
    return render_all(
        step_configs(plan.spec, plan.bound, pad_id=plan.pad_id, tokenizer_facts=plan.tokenizer_facts, folded=folded)
    )


def write(
    plan: BuildPlan,
    runtime: Runtime,
    work: Staging,
    configs: Mapping[str, tuple[str, mc.ModelConfig]],
    found: Findings,
) -> None:
    """Stage 10: write everything else into the staging area: configs, Python steps, engine plan, card, reports."""
    spec, names = plan.spec, plan.names
    report, variant, container, folding = found.parity, found.variant, found.container, found.folding
    for step, (text, _) in configs.items():
        work.write_config(names[step], text)
    runtime.write_files(plan, work.version_dir(names["model"]))
    folding = folding or FoldReport(False, "not tried")
    _write_python_steps(plan, work, folded=folding.folded)
    card_dir = work.version_dir(names["ensemble"])
    if variant is not None and variant.search is not None and variant.search.trials:
        variant.search.plot(card_dir / SEARCH_PLOT)
    card = model_card(plan, work.version, report, variant, folding, found.sizing)
    (card_dir / "model_card.md").write_text(card, encoding="utf-8")
    parity_json = {
        "passed": report.passed,
        "max_abs_diff": report.max_abs_diff,
        "tolerance": report.tolerance,
        "rows": [row.__dict__ for row in report.rows],
    }
    (card_dir / "parity.json").write_text(json.dumps(parity_json, ensure_ascii=False, indent=1), encoding="utf-8")
    record = _build_record(plan, runtime, variant)
    checks = {
        release: check.to_dict() if isinstance(check, ContainerReport) else check
        for release, check in (container or {}).items()
    }
    record["container"] = spec.containers[0]  # what `package` targets unless told otherwise; its check is first
    record["container_runtimes"] = checks
    record["fold"] = folding.to_dict()
    record["steps"] = [step for step in configs if step != "ensemble"]
    record["model_layout"] = None if found.sizing is None else found.sizing.to_dict()
    (card_dir / "build.json").write_text(json.dumps(record, indent=1), encoding="utf-8")


def _write_python_steps(plan: BuildPlan, work: Staging, *, folded: bool = False) -> None:
    """The tokenizer and postprocess ``model.py`` files, their helpers, and the files the postprocess reads."""
    names, bound = plan.names, plan.bound
    for step, module_name in bound.step_modules.items():
        if folded and step == "postprocess":
            continue
        target = work.version_dir(names[step])
        shutil.copyfile(_step_file(module_name), target / "model.py")
        write_helpers(target, bound.helper_modules[step], _step_file)  # imported as _tritongen_step.<last name>
    if folded:
        return
    tok_dir, post_dir = work.version_dir(names["tokenizer"]), work.version_dir(names["postprocess"])
    for filename in bound.postprocess_files:
        shutil.copyfile(tok_dir / filename, post_dir / filename)
    labels = list(plan.checkpoint.id2label.values())
    (post_dir / "labels.json").write_text(json.dumps(labels, ensure_ascii=False))


def _step_file(name: str) -> Path:
    """The source file of a step module or helper (``tritongen.tasks.question_answering.tokenizer``)."""
    try:
        return module_file(name)
    except LookupError as exc:
        raise RepositoryError(f"step module `{name}` cannot be found ({exc})") from None


def _build_record(plan: BuildPlan, runtime: Runtime, variant: Variant | None) -> dict[str, Any]:
    """``build.json``: the spec and what the build decided and measured."""
    return {
        "spec": plan.spec.to_dict(),
        "checkpoint": str(plan.checkpoint.path),
        "task": plan.bound.task,
        "max_length": plan.max_length,
        "inputs": plan.inputs,
        "position_limit": plan.facts.position_limit,
        "variant": runtime.variant_name(plan.spec, variant),
        "model_step_backend": backend_record(plan.spec),
        "accuracy": None if variant is None else variant.accuracy.__dict__,
        "int8_search": None if variant is None or variant.search is None else variant.search.to_dict(),
    }


def publish(plan: BuildPlan, work: Staging, console: Console) -> int:
    """Stage 11: move the staged version into the repository at once; return its number."""
    work.publish()
    console.print(f"[green]Published[/] `{plan.spec.name}` version {work.version} to {plan.spec.repository}")
    return work.version
