"""``make bench``: the served ensemble against its baselines, measured side by side in one run.

Configurations, all driven by the same perf_analyzer over HTTP with the same texts:
the ensemble as built; (a) a transformers pipeline behind FastAPI; (b) the same ensemble
rebuilt without dynamic batching (max_batch_size 0). (c) is in-process ONNX Runtime on
the same model file. (d), for embedding models, is infinity-emb on the same checkpoint, up at
the same time as Triton and driven with the ensemble by one HTTP/JSON load generator in
interleaved rounds (:mod:`tritongen.bench.infinity`). (e), for embedding models, is the OpenAI/TEI gateway in
front of the same server, driven the same way against Triton's own HTTP API (:mod:`tritongen.bench.gateway`).
(f) is the sentence-transformers script (:mod:`tritongen.bench.st_peer`); (g), ``interleaved``, sets each
``--compare`` embedding ensemble beside the ensemble in the same interleaved rounds, on the same server.
Results go to ``perf_analyzer_configs/<NAME>/results/``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tritongen.bench.ceiling import ceiling_session, measure_ceiling
from tritongen.bench.gateway import GatewayComparison, GatewaySetup, compare_with_gateway, gateway_server
from tritongen.bench.http_load import HttpTarget, Interleaving, drive, kserve_target, openai_target
from tritongen.bench.infinity import (
    INFINITY_VENV,
    compare_with_infinity,
    infinity_executable,
    infinity_server,
)
from tritongen.bench.peer import PeerComparison, compare_with_peer
from tritongen.bench.perf import PerfPoint, Sweep, run_perf_analyzer, write_input_data
from tritongen.bench.process import http_process
from tritongen.bench.report import BenchReport, write_report
from tritongen.bench.st_peer import ST_VENV, Fp32Check, compare_with_script, st_executable, st_server
from tritongen.bench.tail import TailReport, read_traces, tail_report, trace_arguments, tracing
from tritongen.bench.tune import TuneGrid, TunePlan, TunePoint, tune
from tritongen.builder.pipeline import build_repository
from tritongen.builder.spec import load_spec, recorded_spec
from tritongen.buildspec import DynamicBatchingSettings
from tritongen.contract import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS
from tritongen.data.datasets import text_set
from tritongen.errors import BenchError, ServerCrashedError
from tritongen.repository.contents import step_names
from tritongen.repository.staging import existing_versions
from tritongen.runtimes import get_runtime
from tritongen.serve.otlp import TRACE_RACE_FIXED_IN
from tritongen.serve.server import Endpoints, TritonServer, server_environment
from tritongen.serve.stats import StepStats, model_stats, stats_delta
from tritongen.tasks import TASKS

__all__ = ["BenchOptions", "run_bench"]

BASELINES = ("pipeline", "nobatch", "ceiling", "infinity", "gateway", "script", "interleaved")
# (e), the gateway, only when asked: it measures the gateway, not the ensemble.
DEFAULT_BASELINES = ("pipeline", "nobatch", "ceiling", "infinity", "script")
# Runs of --tail before a tritonserver that crashes each time it traces is the bench's failure.
TRACE_ATTEMPTS = 5


@dataclass(frozen=True)
class BenchOptions:
    """What to benchmark and how."""

    name: str
    repository: Path = Path("model_repository")
    output: Path = Path("perf_analyzer_configs")
    sweep: Sweep = field(default_factory=Sweep)
    texts: int | str = 512  # a count of the mixed texts, or a named set (tritongen.data.datasets.text_set)
    batch: int = 1  # texts per request in the interleaved HTTP comparisons (d), (e), (f)
    through_gateway: bool = False  # (d) and (f) drive the ensemble through the gateway's /v1/embeddings
    gateway_args: tuple[str, ...] = ()  # more of the gateway's options wherever the bench starts it
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    compare: tuple[str, ...] = ()  # more ensembles of the same repository, measured in the same server run
    peer_rounds: int = 3  # (d): interleaved rounds per concurrency
    peer_seconds: float = 15.0  # (d): measured seconds per side, round and concurrency
    tune: TuneGrid = field(default_factory=TuneGrid)  # instance and thread counts to sweep (tritongen.bench.tune)
    tail: bool = False  # trace every request of one run at the top concurrency: where the slowest 1% wait

    @property
    def interleaving(self) -> Interleaving:
        """How (d) and (e) interleave their rounds with the ensemble's."""
        return Interleaving(self.sweep.concurrency, self.peer_rounds, self.peer_seconds, self.batch)


def _build_metadata(repository: Path, name: str) -> dict[str, Any]:
    versions = existing_versions(repository / name)
    if not versions:
        raise BenchError(f"no ensemble `{name}` in {{path}}; build it first", path=repository)
    path = repository / name / str(versions[-1]) / "build.json"
    if not path.is_file():
        raise BenchError(f"{{path}} is missing; rebuild `{name}` with this version of tritongen", path=path)
    return json.loads(path.read_text())


def _measure_triton(
    server: TritonServer, configs: Mapping[str, tuple[str, Path]], sweep: Sweep, workdir: Path, console: Console
) -> tuple[list[PerfPoint], dict[tuple[str, int], dict[str, StepStats]], dict[tuple[str, int], StepStats]]:
    """perf_analyzer on each configuration and concurrency, with the statistics API's counters around each run.

    The counters are kept per step (the breakdown) and of the ensemble itself (its time in the server).
    """
    points, breakdown, ensembles = [], {}, {}
    for config, (model, input_data) in configs.items():
        steps = set(step_names(model).values())
        for concurrency in sweep.concurrency:
            console.print(f"  {config}: concurrency {concurrency}…")
            before = model_stats(server.http_url)
            points.append(run_perf_analyzer(config, model, server.http_url, input_data, concurrency, sweep, workdir))
            after = model_stats(server.http_url)
            breakdown[(config, concurrency)] = {
                s: stats_delta(after[s], before.get(s)) for s in steps if s in after and s != model
            }
            if model in after:
                ensembles[(config, concurrency)] = stats_delta(after[model], before.get(model))
    return points, breakdown, ensembles


@contextlib.contextmanager
def _pipeline_server(meta: Mapping[str, Any], name: str, log: Path) -> Iterator[str]:
    def command(port: int) -> list[str]:
        return [
            sys.executable, "-m", "tritongen.bench.pipeline_server", "--model", meta["checkpoint"],
            "--task", meta["task"], "--name", name, "--max-length", str(meta["max_length"]), "--port", str(port),
        ]  # fmt: skip

    with http_process(command, log, what="the FastAPI baseline", env=server_environment(), timeout=180) as url:
        yield url


@dataclass(frozen=True)
class _BenchRun:
    """What every stage of one bench run reads, bound once: the options, the build's record, the texts, the output."""

    options: BenchOptions
    meta: Mapping[str, Any]
    repository: Path
    out: Path  # perf_analyzer_configs/<NAME>: the input data, and the results below
    texts: list[str]
    console: Console

    @property
    def results(self) -> Path:
        """Where results and logs go."""
        return self.out / "results"

    @property
    def input_data(self) -> Path:
        """perf_analyzer's input data: one text per request."""
        return self.out / "input_data.json"


@dataclass(frozen=True)
class _ServerFigures:
    """What one server run measured: the Triton configurations, and the baselines that run beside them."""

    points: list[PerfPoint]
    breakdown: dict[tuple[str, int], dict[str, StepStats]]
    ensembles: dict[tuple[str, int], StepStats]
    peer: PeerComparison | None
    gateway: GatewayComparison | None
    tuning: list[TunePoint]
    script: PeerComparison | None = None
    tail: TailReport | None = None
    served_by: dict[str, str] = field(default_factory=dict)  # backend -> what served its steps
    interleaved: list[PeerComparison] = field(default_factory=list)  # (g) each --compare ensemble against ours


def _peer_problem(baseline: str, name: str, task: str) -> str:
    """Why the embedding peer ``baseline`` cannot run beside ensemble ``name`` of ``task``; empty where it can."""
    venv, executable = (INFINITY_VENV, infinity_executable) if baseline == "infinity" else (ST_VENV, st_executable)
    return (
        f"`{name}` is a {task} ensemble; the peer serves embeddings" if task != "embedding"
        else f"no {venv} (`make {venv.name.removeprefix('.venv-')}-venv` creates it)" if executable() is None
        else ""
    )  # fmt: skip


def _peer_skipped(run: _BenchRun, baseline: str) -> bool:
    """Whether the embedding peer ``baseline`` is not run: not asked for, or in the default set and cannot run.

    Asked for explicitly, a peer that cannot run was refused before anything ran (:func:`_checked_metadata`).
    """
    options = run.options
    if baseline not in options.baselines:
        return True
    why = _peer_problem(baseline, options.name, run.meta["task"])
    if why:
        run.console.print(f"[yellow]Baseline {baseline} skipped[/]: {why}")
    return bool(why)


def _measure_peer(run: _BenchRun, ours: HttpTarget) -> PeerComparison | None:
    """(d) for embedding ensembles: infinity-emb beside the running Triton server, interleaved rounds.

    Asked for explicitly, a missing infinity venv or a non-embedding task is an error; in the default set it
    is skipped with a note, so ``make bench`` works without the extra.
    """
    options, meta, console = run.options, run.meta, run.console
    if _peer_skipped(run, "infinity"):
        return None
    console.print("[bold]Measuring baseline (d): infinity-emb on the same checkpoint, interleaved with the ensemble…")
    with infinity_server(meta["checkpoint"], options.name, run.results / "infinity_server.log") as url:
        return compare_with_infinity(ours, options.name, url, run.texts, options.interleaving, console.print)


def _measure_script(run: _BenchRun, ours: HttpTarget) -> PeerComparison | None:
    """(f) for embedding ensembles: the sentence-transformers ONNX INT8 + FastAPI script, interleaved rounds."""
    options, meta, console = run.options, run.meta, run.console
    if _peer_skipped(run, "script"):
        return None
    console.print("[bold]Measuring baseline (f): the sentence-transformers script, interleaved with the ensemble…")
    fp32 = _fp32_check(run)
    with st_server(meta["checkpoint"], run.results / "script_server.log") as url:
        return compare_with_script(ours, options.name, url, run.texts, options.interleaving, console.print, fp32)


def _fp32_check(run: _BenchRun) -> Fp32Check:
    """FP32 PyTorch as the build's gate runs it, on the bench and built-in validation texts.

    The checkpoint's own pooling and Dense modules (the embedding task's module), each text alone, cut at the
    build's length.
    """
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from tritongen.gates.accuracy import read_texts
    from tritongen.model.checkpoint import inspect_checkpoint
    from tritongen.tasks import get_task

    checkpoint = inspect_checkpoint(run.meta["checkpoint"])
    module = get_task("embedding").load_module(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path))
    names = [n for n in (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS) if n in run.meta["inputs"]]

    def reference(texts: list[str]) -> np.ndarray:
        rows = []
        with torch.no_grad():
            for text in texts:
                batch = tokenizer(text, truncation=True, max_length=run.meta["max_length"], return_tensors="pt")
                rows.append(module(**{n: batch[n] for n in names}).numpy()[0])
        return np.array(rows, np.float32)

    return Fp32Check(reference, {"bench": run.texts, "validation (built-in)": read_texts(None, "validation")})


def _measure_interleaved(run: _BenchRun, server: TritonServer) -> list[PeerComparison]:
    """(g): each ``--compare`` embedding ensemble against the ensemble, both over Triton's HTTP API, interleaved."""
    options = run.options
    if "interleaved" not in options.baselines:
        return []
    ours = kserve_target(f"`{options.name}`", server.http_url, options.name)
    compared = []
    for other in options.compare:
        run.console.print(f"[bold]Measuring (g): `{other}` interleaved with `{options.name}`…")
        theirs = kserve_target(f"`{other}`", server.http_url, other)
        compared.append(
            compare_with_peer(ours, theirs, run.texts, options.interleaving, run.console.print, "(g) interleaved")
        )
    return compared


def _measure_gateway(run: _BenchRun, server: TritonServer) -> GatewayComparison | None:
    """(e) for embedding ensembles: the gateway's ``/v1/embeddings`` against Triton's HTTP API, interleaved."""
    options = run.options
    if "gateway" not in options.baselines:
        return None
    run.console.print("[bold]Measuring baseline (e): the OpenAI/TEI gateway in front of the ensemble, interleaved…")
    with gateway_server(
        server.grpc_url, server.http_url, run.repository, run.results / "gateway.log", model=options.name,
        args=options.gateway_args,
    ) as (url, pid):  # fmt: skip
        assert server.process is not None
        setup = GatewaySetup(server.http_url, url, (server.process.pid, pid))
        return compare_with_gateway(setup, options.name, run.texts, options.interleaving, progress=run.console.print)


def _measure_tail(run: _BenchRun, server: TritonServer, trace_file: Path) -> TailReport | None:
    """Every request of one HTTP/JSON run at the top concurrency traced; the slowest 1% against the median."""
    options = run.options
    if not options.tail:
        return None
    concurrency = max(options.sweep.concurrency)
    run.console.print(f"[bold]Tracing every request for {options.peer_seconds:.0f} s at concurrency {concurrency}…")
    for attempt in range(1, TRACE_ATTEMPTS + 1):
        trace_file.unlink(missing_ok=True)  # a crashed run's partial file is no part of the next
        target = kserve_target("ensemble", server.http_url, options.name, output=None)  # any task: every output
        try:
            with tracing(server):
                load = drive(target, run.texts, concurrency, options.peer_seconds)
            break
        except ServerCrashedError as crash:
            if attempt == TRACE_ATTEMPTS:
                raise BenchError(
                    f"{crash} on each of {TRACE_ATTEMPTS} tries: a tritonserver before {TRACE_RACE_FIXED_IN} can "
                    "crash while it traces an ensemble; bench without --tail, or against a newer Triton",
                    log_file=crash.log_file,
                ) from None
            run.console.print(
                f"[yellow]{crash} (a race of tritonserver before {TRACE_RACE_FIXED_IN}); restarting it to trace "
                f"again, try {attempt + 1} of {TRACE_ATTEMPTS}"
            )
            server.stop()
            server.start()
    if not load.latencies_ms:
        raise BenchError(f"every traced request to `{options.name}` failed ({load.errors}); see the server's log")
    names = step_names(options.name)
    steps = [names[step] for step in ("tokenizer", "model", "postprocess") if step in names]
    requests = read_traces(trace_file, options.name, steps, names["model"])
    label = f"`{options.name}` at concurrency {concurrency} (p99 {load.percentile(99):.1f} ms at the client)"
    return tail_report(requests, label)


def _measure_tuning(run: _BenchRun, plan: TunePlan | None, server: TritonServer) -> list[TunePoint]:
    """The tuning sweep, last in the server run (it leaves the server at its last setting)."""
    if plan is None:
        return []
    import tritonclient.http as httpclient

    console = run.console
    console.print(f"[bold]Tuning: {len(plan.settings)} instance and thread settings, applied through the load API…")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=600.0)
    try:
        return tune(
            client, plan, url=server.http_url, sweep=run.options.sweep, input_data=run.input_data,
            workdir=run.results, progress=console.print,
        )  # fmt: skip
    finally:
        client.close()


def _checked_metadata(options: BenchOptions, repository: Path) -> dict[str, Any]:
    """The ensemble's ``build.json`` record, once the baselines asked for fit what it is (before anything runs)."""
    unknown = sorted(set(options.baselines) - set(BASELINES))
    if unknown:
        raise BenchError(f"unknown baseline(s) {unknown}; choose from {list(BASELINES)}")
    name = options.name
    meta = _build_metadata(repository, name)
    bench_tasks = sorted(name for name, task in TASKS.items() if task.bench_baselines)
    if meta["task"] not in bench_tasks:
        raise BenchError(
            f"`{name}` is a {meta['task']} ensemble; the bench drives single-text ensembles "
            f"({', '.join(bench_tasks)}) only"
        )
    if "gateway" in options.baselines and meta["task"] != "embedding":
        raise BenchError(f"baseline gateway: `{name}` is a {meta['task']} ensemble; it drives /v1/embeddings")
    for peer in ("infinity", "script"):
        why = _peer_problem(peer, name, meta["task"]) if peer in options.baselines else ""
        if why and options.baselines != DEFAULT_BASELINES:  # the default set skips it with a note instead
            raise BenchError(f"baseline {peer}: {why}")
    if "interleaved" in options.baselines:
        if not options.compare:
            raise BenchError(f"baseline interleaved: name the ensembles to set beside `{name}` with --compare")
        tasks = {name: meta["task"], **{other: _build_metadata(repository, other)["task"] for other in options.compare}}
        for other, task in tasks.items():
            if task != "embedding":
                raise BenchError(f"baseline interleaved: `{other}` is a {task} ensemble; the rounds compare embeddings")
    return meta


def _write_inputs(run: _BenchRun) -> None:
    """The results folder, perf_analyzer's input data (with and without the batch dimension) and the sweep."""
    run.results.mkdir(parents=True, exist_ok=True)
    write_input_data(run.input_data, run.texts)
    write_input_data(run.out / "input_data_nobatch.json", run.texts, with_batch_dim=True)
    sweep = {**asdict(run.options.sweep), "texts": run.options.texts}
    (run.out / "sweep.json").write_text(json.dumps(sweep, indent=1))


def _triton_configs(run: _BenchRun, tmp: Path) -> tuple[dict[str, tuple[str, Path]], list[str]]:
    """The configurations the server measures (name -> (model, input data)), and its extra arguments.

    Baseline (b), the ensemble rebuilt without dynamic batching, is built into ``tmp`` and served beside it.
    """
    options, name = run.options, run.options.name
    configs = {"ensemble": (name, run.input_data)}
    for other in options.compare:
        _build_metadata(run.repository, other)  # fails clearly when it is missing
        configs[other] = (other, run.input_data)
    if "nobatch" not in options.baselines:
        return configs, []
    run.console.print("[bold]Building baseline (b): the same ensemble without dynamic batching…")
    spec = load_spec(None, **recorded_spec(run.meta["spec"])).replace(
        name=f"{name}_nobatch", repository=tmp / "repo", max_batch_size=0,
        dynamic_batching=DynamicBatchingSettings(enabled=False), response_cache=False,
    )  # fmt: skip
    build_repository(spec, console=run.console)
    configs["nobatch"] = (spec.name, run.out / "input_data_nobatch.json")
    return configs, [f"--model-repository={spec.repository}"]


@contextlib.contextmanager
def _ours(run: _BenchRun, server: TritonServer) -> Iterator[HttpTarget]:
    """The ensemble's side of the peer comparisons: Triton's HTTP API, or the gateway in front of it."""
    name = run.options.name
    if not run.options.through_gateway or not {"infinity", "script"} & set(run.options.baselines):
        yield kserve_target(f"`{name}`", server.http_url, name)
        return
    log = run.results / "gateway_for_peers.log"
    args = run.options.gateway_args
    with gateway_server(server.grpc_url, server.http_url, run.repository, log, model=name, args=args) as (url, _):
        yield openai_target(f"`{name}` through the gateway", url, name, "/v1/embeddings")


def _measure_server(run: _BenchRun, tune_plan: TunePlan | None) -> _ServerFigures:
    """One Triton server: perf_analyzer on every configuration, then (d), (e) and the tuning sweep beside it."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        configs, extra = _triton_configs(run, Path(tmp))
        trace_file = Path(tmp) / "trace.json"
        extra += trace_arguments(trace_file) if run.options.tail else []
        server = TritonServer(
            run.repository, Endpoints.free(), models=[model for model, _ in configs.values()], extra_args=extra
        )
        run.console.print("[bold]Measuring the Triton configurations with perf_analyzer…")
        with server:
            points, breakdown, ensembles = _measure_triton(server, configs, run.options.sweep, run.results, run.console)
            tail = _measure_tail(run, server, trace_file)
            with _ours(run, server) as ours:
                peer = _measure_peer(run, ours)
                script = _measure_script(run, ours)
            interleaved = _measure_interleaved(run, server)
            gateway = _measure_gateway(run, server)
            tuning = _measure_tuning(run, tune_plan, server)
    return _ServerFigures(
        points, breakdown, ensembles, peer, gateway, tuning, script, tail, server.backends.to_dict(), interleaved
    )


def _measure_pipeline(run: _BenchRun) -> list[PerfPoint]:
    """Baseline (a): the transformers pipeline behind FastAPI, driven by the same perf_analyzer."""
    options = run.options
    if "pipeline" not in options.baselines:
        return []
    run.console.print("[bold]Measuring baseline (a): transformers pipeline behind FastAPI…")
    points = []
    with _pipeline_server(run.meta, options.name, run.results / "pipeline_server.log") as url:
        for concurrency in options.sweep.concurrency:
            run.console.print(f"  pipeline: concurrency {concurrency}…")
            points.append(
                run_perf_analyzer(
                    "pipeline", options.name, url, run.input_data, concurrency, options.sweep, run.results
                )
            )
    return points


def _measure_in_process(run: _BenchRun) -> list[Any]:
    """Baseline (c): the served model file in process in the build's runtime, its tokenizer in front."""
    if "ceiling" not in run.options.baselines:
        return []
    runtime = get_runtime(run.meta["spec"]["runtime"])
    model_dir, tokenizer_dir = (run.repository / step_names(run.options.name)[step] for step in ("model", "tokenizer"))
    session = ceiling_session(runtime, model_dir / str(existing_versions(model_dir)[-1]))
    if session is None:
        run.console.print(f"[yellow]Baseline (c) skipped[/]: {runtime.title} does not run its model in process here")
        return []
    run.console.print(f"[bold]Measuring baseline (c): in-process {runtime.title}…")
    return measure_ceiling(
        session,
        tokenizer_dir / str(existing_versions(tokenizer_dir)[-1]) / "tokenizer.json",
        run.meta["inputs"],
        run.meta["max_length"],
        run.texts,
    )


def run_bench(options: BenchOptions, *, console: Console | None = None) -> tuple[BenchReport, dict[str, Path]]:
    """Run the sweep for the ensemble and the chosen baselines; write and return the report."""
    console = console or Console(stderr=True)
    name, repository = options.name, Path(options.repository).resolve()
    meta = _checked_metadata(options, repository)
    tune_plan = TunePlan(repository, name, options.tune) if options.tune else None  # refuses a bad grid up front
    if options.batch < 1:
        raise BenchError(f"--batch must be 1 or more, got {options.batch}")
    run = _BenchRun(options, meta, repository, Path(options.output) / name, text_set(options.texts), console)
    _write_inputs(run)
    command = " ".join(["python -m tritongen bench", f"--name {name}", f"--repository {options.repository}"])
    served = _measure_server(run, tune_plan)
    points = served.points + _measure_pipeline(run)
    report = BenchReport(
        name=name, points=points, breakdown=served.breakdown, ceiling=_measure_in_process(run), command=command,
        ensembles=served.ensembles, peer=served.peer, gateway=served.gateway, tuning=served.tuning,
        script=served.script, tail=served.tail, interleaved=served.interleaved,
        tuned_backend=tune_plan.backend if tune_plan else "", served_by=served.served_by,
    )  # fmt: skip
    paths = write_report(report, run.results)
    console.print(paths["summary"].read_text())
    return report, paths
