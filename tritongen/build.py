"""Build a Triton ensemble repository from a checkpoint: the pipeline's one entry point.

inspect -> export ONNX -> parity gate -> render and validate configs -> publish atomically.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib.util
import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown

from tritongen import triton_models
from tritongen.accuracy import AccuracyReport, GateReference, read_texts, require_accuracy
from tritongen.canary import CANARY_FILE
from tritongen.canary import record as record_canary
from tritongen.checkpoint import Checkpoint, inspect_checkpoint
from tritongen.errors import CheckpointError, RepositoryError, StageError, TritongenError, UnsupportedModelError
from tritongen.export import export_onnx
from tritongen.int8_search import SCHEMES, SearchReport, search_int8
from tritongen.model_facts import ModelFacts, read_model_facts
from tritongen.optimize import OptimizeReport, optimize_model
from tritongen.parity import PARITY_TEXTS, ParityReport, check_parity, require_parity
from tritongen.render import render_all
from tritongen.repository import staging
from tritongen.spec import BuildSpec
from tritongen.tasks import Task, TaskPlan, detect_task, get_task
from tritongen.tensorrt import EnginePlan, builder_flags, cc_model_filenames, plan_profiles
from tritongen.triton_models.tokenizer import TextEncoder

__all__ = ["BuildResult", "build_repository", "config_contexts", "step_names"]

_PY_MODELS = Path(triton_models.__file__).resolve().parent


SEARCH_PLOT = "int8_search.png"  # next to model_card.md


@dataclass(frozen=True)
class Variant:
    """What optimisation produced: the steps taken, the gate's figures, and the INT8 search (int8 only)."""

    optimized: OptimizeReport
    accuracy: AccuracyReport
    search: SearchReport | None = None


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


def step_names(name: str) -> dict[str, str]:
    """The four model names of an ensemble called ``name``."""
    return {
        "ensemble": name,
        "tokenizer": f"{name}_tokenizer",
        "model": f"{name}_model",
        "postprocess": f"{name}_postprocess",
    }


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


def _load_tokenizer(checkpoint: Checkpoint) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path))
    except Exception as exc:  # tokenizer loading raises many types for bad files
        raise CheckpointError(
            f"cannot load the tokenizer of {{path}}: {str(exc).splitlines()[0]}", path=checkpoint.path
        ) from None
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise UnsupportedModelError("checkpoint {path} has no fast (Rust) tokenizer", path=checkpoint.path)
    return tokenizer


def config_contexts(
    spec: BuildSpec,
    checkpoint: Checkpoint,
    task: Task,
    inputs: list[str],
    max_length: int,
    pad_id: int = 0,
    tokenizer_facts: dict[str, str] | None = None,
    *,
    plan: TaskPlan | None = None,
) -> dict[str, dict[str, Any]]:
    """Template variables of the four configs, keyed by step (tokenizer, model, postprocess, ensemble).

    ``plan`` is ``task`` bound to the checkpoint (:meth:`Task.bind`); without one it is bound here from
    ``inputs``, ``max_length`` and ``tokenizer_facts`` (``cls_id``, ``unk_token``, ``special_tokens``).
    """
    if plan is None:
        plan = task.bind(spec, checkpoint, inputs=inputs, row_length=max_length, tokenizer_facts=tokenizer_facts)
    names = step_names(spec.name)
    token_tensors = [t for t in plan.tokenizer_outputs if t.name in plan.inputs]
    onnx_out = [plan.onnx_output]
    text_in = list(plan.ensemble_inputs)
    tokenizer_out = list(plan.tokenizer_outputs)
    post_in = list(plan.postprocess_inputs)
    post_out = list(plan.postprocess_outputs)
    buckets = sorted({b for b in spec.buckets if b < max_length} | {max_length})
    # The Python steps are cheap: they batch whatever is queued and never wait for more. A task whose
    # requests become a different number of model rows (QA windows) runs them per request instead.
    python_batching = dataclasses.replace(
        spec.dynamic_batching, max_queue_delay_microseconds=0, preferred_batch_size=()
    )
    if not plan.batched_io:
        python_batching = dataclasses.replace(python_batching, enabled=False)
    common = {
        "ensemble_name": names["ensemble"],
        "max_batch_size": spec.max_batch_size if plan.batched_io else 0,
        "batching": python_batching,
    }
    trt_profiles = {
        key: ",".join(f"{n}:{batch}x{length}" for n in inputs)
        for key, batch, length in (
            ("min", 1, 1),
            ("opt", max(1, spec.max_batch_size // 2), buckets[len(buckets) // 2]),
            ("max", max(1, spec.max_batch_size), max_length),
        )
    }
    ort = spec.onnxruntime
    return {
        "tokenizer": {
            **common,
            "name": names["tokenizer"],
            "inputs": text_in,
            "outputs": tokenizer_out,
            "instances": spec.tokenizer_instances,
            "parameters": {
                "tokenizer_file": "tokenizer.json",
                "max_length": str(max_length),
                "buckets": ",".join(str(b) for b in buckets),
                "pad_id": str(pad_id),
                "pad_type_id": "0",
                **plan.tokenizer_parameters,
            },
        },
        "model": {
            **common,
            "max_batch_size": spec.max_batch_size,
            "name": names["model"],
            "batching": spec.dynamic_batching,
            "inputs": token_tensors,
            "outputs": onnx_out,
            "instances": spec.model_instances,
            "version_policy": spec.version_policy,
            "onnxruntime": ort,
            "tensorrt": spec.tensorrt,
            "trt_profiles": trt_profiles,
            "warmup": buckets if spec.warmup else [],
            "runtime": spec.runtime,
            "cc_model_filenames": cc_model_filenames(),
            "engine_profiles": [str(i) for i in range(len(buckets))] if spec.runtime == "tensorrt" else [],
            "parameters": {
                **{
                    key: str(value)
                    for key, value in (
                        ("intra_op_thread_count", ort.intra_op_threads),
                        ("inter_op_thread_count", ort.inter_op_threads),
                    )
                    if value
                },
                "session.intra_op.allow_spinning": "1" if ort.allow_spinning else "0",
            },
        },
        "postprocess": {
            **common,
            "name": names["postprocess"],
            "inputs": post_in,
            "outputs": post_out,
            "instances": spec.postprocess_instances,
            "parameters": dict(plan.postprocess_parameters),
        },
        "ensemble": {
            **common,
            "name": names["ensemble"],
            "inputs": text_in,
            "outputs": list(plan.ensemble_outputs),
            "response_cache": spec.response_cache,
            "steps": [
                {
                    "model_name": names["tokenizer"],
                    "input_map": {t.name: t.name for t in text_in},
                    "output_map": {t.name: t.name for t in tokenizer_out},
                },
                {
                    "model_name": names["model"],
                    "input_map": {n: n for n in inputs},
                    "output_map": {plan.onnx_output.name: plan.onnx_output.name},
                },
                {
                    "model_name": names["postprocess"],
                    "input_map": {t.name: t.name for t in post_in},
                    "output_map": {t.name: t.name for t in post_out},
                },
            ],
        },
    }


def _model_card(
    spec: BuildSpec,
    checkpoint: Checkpoint,
    plan: TaskPlan,
    version: int,
    facts: ModelFacts,
    report: ParityReport,
    variant: Variant | None,
) -> str:
    import onnxruntime
    import torch
    import transformers

    def shape(dims: tuple[int, ...]) -> list[int]:
        return list(dims) if plan.batched_io else [-1, *dims]  # whole requests: the batch axis is in dims

    max_length = plan.row_length
    outputs = ", ".join(f"`{t.name}` ({t.data_type}, {shape(t.dims)})" for t in plan.ensemble_outputs)
    architectures = ", ".join(checkpoint.architectures) or "bare encoder"
    tools = f"torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime {onnxruntime.__version__}"
    lines = [
        f"# {spec.name} — version {version}",
        "",
        f"- source checkpoint: `{checkpoint.path}` ({checkpoint.model_type}, {architectures})",
        f"- task: {plan.task}",
        f"- built: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- model inputs: {', '.join(facts.inputs)} (from the model's forward signature and config)",
        f"- model limit: {facts.position_limit} tokens ({facts.limit_source})",
        (
            f"- truncation: texts longer than {max_length} tokens are cut there, as the transformers pipeline and "
            "sentence-transformers do; the `TRUNCATED` output says which"
            if plan.truncates
            else f"- windows of {max_length} tokens: nothing is truncated"
        ),
        f"- length buckets: {spec.buckets}",
        "- contract: inputs "
        + ", ".join(f"`{t.name}`" for t in plan.ensemble_inputs)
        + f" (TYPE_STRING, {shape((1,))}); outputs "
        + outputs,
        f"- tools: {tools}",
    ]
    lines += plan.card_lines
    lines.append(f"- served model: {_variant_name(spec, variant)} ({spec.runtime} runtime)")
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


def _pairs_for(plan: TaskPlan, texts: Sequence[str]) -> list[str] | None:
    """Second segments for pair tasks: each text paired with the next one (varied lengths and scripts)."""
    if not plan.pair_input:
        return None
    return [texts[(i + 1) % len(texts)] for i in range(len(texts))]


def _variant_name(spec: BuildSpec, variant: Variant | None = None) -> str:
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


def _probe_token(hf_tokenizer: Any) -> int:
    """An ordinary (non-special, non-padding) token id to probe the model's length with."""
    ids = hf_tokenizer("a", add_special_tokens=False)["input_ids"]
    return int(ids[0]) if ids else int(hf_tokenizer.unk_token_id or 0)


def build_repository(spec: BuildSpec, *, console: Console | None = None) -> BuildResult:
    """Build ``spec`` into a new version of its ensemble; publish only if every check passes."""
    console = console or Console(stderr=True)
    _quiet_transformers()
    names = step_names(spec.name)
    with console.status("Inspecting checkpoint…"):
        checkpoint = inspect_checkpoint(spec.model)
        task = _choose_task(spec, checkpoint)
        hf_tokenizer = _load_tokenizer(checkpoint)
    with console.status("Loading PyTorch weights…"), _stage("loading the PyTorch model"):
        module = task.load_module(checkpoint)
    with console.status("Reading the model's inputs and length limit…"), _stage("reading the model's inputs"):
        facts = read_model_facts(module, _probe_token(hf_tokenizer))
    inputs = list(facts.inputs)
    tokenizer_facts = {
        "cls_id": "" if hf_tokenizer.cls_token_id is None else str(hf_tokenizer.cls_token_id),
        "unk_token": hf_tokenizer.unk_token or "",
        "special_tokens": str(hf_tokenizer.backend_tokenizer.num_special_tokens_to_add(False)),
    }
    plan = task.bind(  # refuses bad task settings before exporting
        spec, checkpoint, inputs=inputs, position_limit=facts.position_limit,
        tokenizer_max=getattr(hf_tokenizer, "model_max_length", 0), tokenizer_facts=tokenizer_facts,
    )  # fmt: skip
    max_length = plan.row_length
    console.print(
        f"[bold]{checkpoint.path}[/]: {checkpoint.model_type}, task {task.name}, max length {max_length} "
        f"(model: {facts.position_limit}, {facts.limit_source}), inputs {', '.join(inputs)}"
    )
    with staging(spec.repository, list(names.values())) as stage:
        tok_dir = stage.version_dir(names["tokenizer"])
        hf_tokenizer.backend_tokenizer.save(str(tok_dir / "tokenizer.json"))
        pad_id = hf_tokenizer.pad_token_id if hf_tokenizer.pad_token_id is not None else 0
        encoder = TextEncoder(
            str(tok_dir / "tokenizer.json"), max_length, spec.buckets, pad_id=pad_id, input_names=inputs
        )
        onnx_path = stage.version_dir(names["model"]) / "model.onnx"
        fp32_path = stage.root.parent / f"{stage.root.name}.fp32.onnx"
        try:
            with console.status("Exporting to ONNX (dynamic batch and sequence axes)…"), _stage("ONNX export"):
                export_onnx(
                    module,
                    encoder(["a short sample", "a longer sample text, used to trace the model"]),
                    plan.onnx_output.name,
                    fp32_path,
                )
            with console.status("Checking parity against PyTorch…"), _stage("parity check"):
                report = check_parity(
                    module, hf_tokenizer, encoder, fp32_path, max_length=max_length, tolerance=spec.parity_tolerance,
                    pairs=_pairs_for(plan, PARITY_TEXTS),
                    argmax_axis=plan.gate.parity_argmax_axis,
                )  # fmt: skip
            console.print(Markdown(report.to_markdown()))
            require_parity(report)
            variant = _optimise(spec, checkpoint, plan, module, hf_tokenizer, encoder, fp32_path, onnx_path, console)
        finally:
            fp32_path.unlink(missing_ok=True)
        if spec.runtime == "tensorrt":
            engine = EnginePlan(
                inputs=inputs,
                profiles=plan_profiles(
                    sorted({b for b in spec.buckets if b < max_length} | {max_length}), spec.max_batch_size
                ),
                flags=builder_flags(spec.precision),
                workspace_bytes=spec.tensorrt.max_workspace_size_bytes,
                cc_model_filenames=cc_model_filenames(),
            )
            (onnx_path.parent / "engine.json").write_text(engine.to_json())
        with console.status("Rendering and validating configs…"):
            contexts = config_contexts(spec, checkpoint, task, inputs, max_length, pad_id, tokenizer_facts, plan=plan)
            configs = render_all(contexts)
            for step, (text, _) in configs.items():
                stage.write_config(names[step], text)
        for step, module_name in plan.step_modules.items():
            target = stage.version_dir(names[step])
            shutil.copyfile(_module_file(module_name), target / "model.py")
            for helper in plan.helper_modules[step]:
                shutil.copyfile(_PY_MODELS / f"{helper}.py", target / f"{helper}.py")
        post_dir = stage.version_dir(names["postprocess"])
        for filename in plan.postprocess_files:
            shutil.copyfile(tok_dir / filename, post_dir / filename)
        (post_dir / "labels.json").write_text(json.dumps(list(checkpoint.id2label.values()), ensure_ascii=False))
        card_dir = stage.version_dir(names["ensemble"])
        if variant is not None and variant.search is not None and variant.search.trials:
            variant.search.plot(card_dir / SEARCH_PLOT)
        (card_dir / "model_card.md").write_text(
            _model_card(spec, checkpoint, plan, stage.version, facts, report, variant), encoding="utf-8"
        )
        (card_dir / "parity.json").write_text(
            json.dumps(
                {
                    "passed": report.passed,
                    "max_abs_diff": report.max_abs_diff,
                    "tolerance": report.tolerance,
                    "rows": [row.__dict__ for row in report.rows],
                },
                ensure_ascii=False,
                indent=1,
            ),
            encoding="utf-8",
        )
        if plan.batched_io and spec.runtime == "onnx":  # what a roll-out checks before this version takes traffic
            with console.status("Recording the canary outputs…"), _stage("canary record"):
                segments = (PARITY_TEXTS, _pairs_for(plan, PARITY_TEXTS))
                record_canary(
                    card_dir / CANARY_FILE, onnx_path, encoder, output=plan.onnx_output.name,
                    inputs={t.name: list(texts) for t, texts in zip(plan.ensemble_inputs, segments)},
                    tolerance=spec.parity_tolerance,
                )  # fmt: skip
        (card_dir / "build.json").write_text(
            json.dumps(
                {
                    "spec": spec.to_dict(),
                    "checkpoint": str(checkpoint.path),
                    "task": task.name,
                    "max_length": max_length,
                    "inputs": inputs,
                    "position_limit": facts.position_limit,
                    "variant": _variant_name(spec, variant),
                    "accuracy": None if variant is None else variant.accuracy.__dict__,
                    "int8_search": None if variant is None or variant.search is None else variant.search.to_dict(),
                },
                indent=1,
            ),
            encoding="utf-8",
        )
        stage.publish()
        version = stage.version
    console.print(f"[green]Published[/] `{spec.name}` version {version} to {spec.repository}")
    accuracy = None if variant is None else variant.accuracy
    search = None if variant is None else variant.search
    return BuildResult(spec.name, task.name, version, Path(spec.repository), report, max_length, accuracy, search)


def _optimise(
    spec: BuildSpec,
    checkpoint: Checkpoint,
    plan: TaskPlan,
    module: Any,
    hf_tokenizer: Any,
    encoder: TextEncoder,
    fp32_path: Path,
    target: Path,
    console: Console,
) -> Variant | None:
    """Optimise/convert the FP32 export into ``target`` and gate it; None when FP32 is served as is.

    INT8 searches for the fastest quantisation that passes the gate (``tritongen.int8_search``).
    """
    if spec.precision == "fp32" and not spec.optimize:
        shutil.copyfile(fp32_path, target)
        return None
    validation = read_texts(spec.validation, "validation")
    calibration, calibration_source = [], ""
    if spec.precision == "int8" and spec.calibration is None and spec.validation is not None and len(validation) >= 64:
        # Calibrate on the user's kind of text, but never on a text the gate then measures.
        calibration, validation = validation[::4], [text for i, text in enumerate(validation) if i % 4]
        calibration_source = f"every 4th text of `{spec.validation}` (the gate measures the other {len(validation)})"
    elif spec.precision == "int8":
        calibration = read_texts(spec.calibration, "calibration")
        calibration_source = f"`{spec.calibration}`" if spec.calibration else "the built-in calibration sample"
    with (
        console.status(f"Optimising ({spec.precision}, fusions {'on' if spec.optimize else 'off'})…"),
        _stage("optimisation"),
    ):
        optimized = optimize_model(fp32_path, target, checkpoint, precision=spec.precision, fuse=spec.optimize)
    with console.status(f"Accuracy gate: FP32 PyTorch on {len(validation)} validation texts…"), _stage("accuracy gate"):
        reference = GateReference(
            module, hf_tokenizer, encoder, gate=plan.gate, texts=validation, max_length=plan.row_length,
            pairs=_pairs_for(plan, validation),
        )  # fmt: skip
    search = None
    if spec.precision == "int8":
        with console.status("INT8 search…") as status, _stage("INT8 search"):
            search = search_int8(
                target, target, baseline=fp32_path, reference=reference, encoder=encoder, calibration=calibration,
                schemes=_int8_schemes(spec), symmetric=spec.runtime == "tensorrt",
                speed_texts=validation[:: max(1, len(validation) // 24)], accept_loss=spec.accept_accuracy_loss,
                curve=spec.int8_curve, progress=status.update,
            )  # fmt: skip
        search.notes.insert(0, f"Calibration texts: {calibration_source}.")
        console.print(Markdown(search.to_markdown()))
        if search.chosen is None or not (search.chosen.passed or spec.accept_accuracy_loss):
            raise search.failure()
        accuracy = search.chosen.accuracy
        kept = search.layer_names(search.chosen.candidate.float_nodes)
        optimized.steps.append(
            f"int8 {search.chosen.candidate.label}: {search.chosen.candidate.why} "
            f"({len(search.layers) - len(kept)} of {len(search.layers)} weight MatMuls in int8, per-channel weights; "
            f"chosen by the INT8 search below, {len(search.trials)} candidates measured)"
        )
    else:
        with console.status(f"Accuracy gate on {len(validation)} validation texts…"), _stage("accuracy gate"):
            accuracy = reference.measure(target, _variant_name(spec))
    console.print(Markdown(accuracy.to_markdown(accepted=spec.accept_accuracy_loss)))
    require_accuracy(accuracy, accept_loss=spec.accept_accuracy_loss)
    return Variant(optimized, accuracy, search)


def _module_file(name: str) -> Path:
    """The source file of a step module (``tritongen.tasks.qa.tokenizer``), served as a ``model.py``."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RepositoryError(f"step module `{name}` cannot be found")
    return Path(spec.origin)


def _int8_schemes(spec: BuildSpec) -> tuple[str, ...]:
    """The int8 schemes to search: the one pinned, else all; TensorRT takes only static (explicit QDQ)."""
    if spec.runtime == "tensorrt":
        return ("static",)
    return SCHEMES if spec.quantization == "auto" else (spec.quantization,)
