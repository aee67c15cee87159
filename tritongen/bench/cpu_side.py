"""``make bench BENCH_ARGS=--free-model-step``: what an ensemble's CPU side carries, apart from any model.

On a GPU node the model step runs on the accelerator; Triton's frontend, the ensemble scheduler and the Python
tokenizer and postprocess steps run on the node's CPU and must keep it fed. This bench serves the build with
its model step swapped for one that computes nothing (:mod:`tritongen.bench.free_step`), drives it with the
real perf_analyzer over gRPC and HTTP with 1 and 32 texts per request, and reads the CPU time the server's
processes spent (:mod:`tritongen.bench.cpu_use`). Each figure is set beside the in-process ceiling of the same
``tokenizer.json``, measured in the same run (:mod:`tritongen.bench.tokenize_rate`).

The free model step is served by Triton's native onnxruntime backend where ``TRITONGEN_BACKENDS`` has it, as the
container serves it: its CPU is tritonserver's own (the frontend's). Without it, by the Python stand-in: one more
stub process and one more hop, whose CPU time is measured apart and left out of the "native model step" figure.
The report names which served it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tritongen.bench.cpu_use import FRONTEND, cpu_snapshot
from tritongen.bench.free_step import free_repository
from tritongen.bench.perf import PerfPoint, Sweep, run_perf_analyzer, write_input_data
from tritongen.bench.tune import TuneGrid, TunePlan
from tritongen.bench.tune import apply as tune_apply
from tritongen.configs.parser import read_config
from tritongen.errors import BenchError
from tritongen.parameters import TokenizerFileParameters, TokenizerParameters
from tritongen.repository.contents import step_names
from tritongen.serve.server import Endpoints, TritonServer
from tritongen.serve.stats import model_stats, stats_delta

__all__ = ["CPU_SIDE_BATCHES", "Ceiling", "CpuSidePoint", "CpuSideReport", "measure_cpu_side"]

CPU_SIDE_BATCHES = (1, 32)  # texts per request: one text, and a client's batch
PROTOCOLS = ("grpc", "http")
DEFAULT_CONCURRENCY = (16, 64)
STEP_ROLES = ("tokenizer", "model", "postprocess")


@dataclass(frozen=True)
class Ceiling:
    """The in-process rates of the build's ``tokenizer.json`` (texts/s), on every core and on one thread."""

    all_cores: Mapping[str, float]
    one_thread: Mapping[str, float]
    cores: int

    @property
    def limit(self) -> float:
        """``encode_batch`` in batches of 64 on every core: the physical limit of the work on this machine."""
        return self.all_cores["encode_batch_64"]


@dataclass(frozen=True)
class CpuSidePoint:
    """One perf_analyzer run at the free-model server, with the CPU each server process spent on it."""

    target: str  # "ensemble" or the step driven alone
    protocol: str
    batch: int  # texts per request
    point: PerfPoint  # throughput in texts/s (perf_analyzer counts batch elements)
    requests: int  # requests the target completed during the run (its statistics)
    texts: int
    cpu: Mapping[str, float]  # CPU seconds by role: frontend, tokenizer, model, postprocess

    @property
    def server_seconds(self) -> float:
        """CPU seconds of every server process."""
        return sum(self.cpu.values())

    def ms_per_request(self, role: str | None = None) -> float:
        """Server CPU milliseconds per request (of one role, or all)."""
        spent = self.server_seconds if role is None else self.cpu.get(role, 0.0)
        return 1000 * spent / self.requests if self.requests else 0.0

    def per_core(self, *, without: Sequence[str] = ()) -> float:
        """Texts per second one fully used core carries: texts over the server's CPU seconds (less ``without``)."""
        seconds = self.server_seconds - sum(self.cpu.get(role, 0.0) for role in without)
        return self.texts / seconds if seconds > 0 else 0.0


@dataclass
class CpuSideReport:
    """Everything one CPU-side run measured, and how it was run."""

    name: str
    points: list[CpuSidePoint]
    ceiling: Ceiling
    instances: Mapping[str, int]  # instances per step as built
    command: str
    model_step: str = ""  # what served the free model step: "onnxruntime r24.10 native, ONNX Runtime 1.28.0"
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, object]]:
        """One flat row per point, for the CSV and the table."""
        rows = []
        for p in self.points:
            row: dict[str, object] = {
                "target": p.target, "protocol": p.protocol, "texts_per_request": p.batch,
                "concurrency": p.point.concurrency, "texts_per_s": round(p.point.throughput, 1),
                "p99_ms": round(p.point.p99_ms, 2), "server_cpu_ms_per_request": round(p.ms_per_request(), 3),
            }  # fmt: skip
            for role in (FRONTEND, *STEP_ROLES):
                row[f"{role}_cpu_ms_per_request"] = round(p.ms_per_request(role), 3)
            row["texts_per_s_per_core"] = round(p.per_core(), 1)
            row["texts_per_s_per_core_native_model"] = round(p.per_core(without=("model",)), 1)
            row["vs_ceiling"] = round(p.point.throughput / self.ceiling.limit, 3) if self.ceiling.limit else 0.0
            rows.append(row)
        return rows

    def best(self, batch: int, protocol: str = "grpc") -> CpuSidePoint | None:
        """The ensemble's fastest run with ``batch`` texts per request over ``protocol``."""
        found = [p for p in self.points if p.target == "ensemble" and p.batch == batch and p.protocol == protocol]
        return max(found, key=lambda p: p.point.throughput, default=None)

    def to_markdown(self) -> str:
        """The summary: the table, the ceiling and the per-core figures a node is sized by."""
        c = self.ceiling
        lines = [
            f"# The CPU side of `{self.name}`: its model step free",
            "",
            f"Command: `{self.command}`. The model step computes nothing (same tensors), served by "
            f"{self.model_step}; everything else is the build as served: instances "
            f"{', '.join(f'{k} {v}' for k, v in self.instances.items())}.",
            "",
            f"In-process ceiling of the same `tokenizer.json` ({c.cores} cores): `encode_batch` in batches of 64 "
            f"**{c.limit:,.0f} texts/s** on every core, {c.one_thread['encode_batch_64']:,.0f} on one thread; the "
            f"tokenizer step's own encode-and-pack on one thread: {c.one_thread['step_body_1']:,.0f} texts/s one "
            f"text at a time, {c.one_thread['step_body_32']:,.0f} 32 at a time.",
            "",
            "| target | protocol | texts/request | concurrency | texts/s | × ceiling | p99 ms | server CPU ms/request "
            "(frontend · tokenizer · model · postprocess) | texts/s per core | per core, native model step |",
            "|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for p, row in zip(self.points, self.rows(), strict=True):
            parts = " · ".join(f"{p.ms_per_request(role):.3f}" for role in (FRONTEND, *STEP_ROLES))
            lines.append(
                f"| {p.target} | {p.protocol} | {p.batch} | {p.point.concurrency} | {p.point.throughput:,.0f} | "
                f"{row['vs_ceiling']:.2f} | {p.point.p99_ms:.1f} | {p.ms_per_request():.3f} ({parts}) | "
                f"{p.per_core():,.0f} | {p.per_core(without=('model',)):,.0f} |"
            )
        lines += [
            "",
            "- *texts/s* is what perf_analyzer measured with the server and the client sharing this machine; "
            "*× ceiling* divides it by `encode_batch` on every core.",
            "- *texts/s per core* is texts over the CPU seconds of the server's processes (the client's not counted): "
            "what one fully used core of a node carries. *Native model step* leaves out a stand-in's stub, where one "
            "served the model step (the container runs it natively, with no Python hop); served natively, the two "
            "are the same figure.",
            *(f"- {note}" for note in self.notes),
        ]
        return "\n".join(lines) + "\n"


def _instances(repository: Path, name: str) -> dict[str, int]:
    counts = {}
    for role, model in step_names(name).items():
        path = repository / model / "config.pbtxt"
        if role != "ensemble" and path.is_file():
            counts[role] = read_config(path).instances
    return counts


def _tokenizer_settings(repository: Path, name: str) -> tuple[Path, int, str]:
    """The tokenizer step's ``tokenizer.json``, ``max_length`` and ``buckets`` (``longest``: no buckets), as served."""
    folder = repository / step_names(name)["tokenizer"]
    config = read_config(folder / "config.pbtxt")
    versions = sorted((int(p.name) for p in folder.iterdir() if p.name.isdigit()), reverse=True)
    if not config.sets(TokenizerParameters) or not versions:
        raise BenchError(f"`{name}` has no text tokenizer step; the CPU-side bench drives text ensembles")
    tokens = config.read(TokenizerParameters)
    tokenizer = folder / str(versions[0]) / config.read(TokenizerFileParameters).tokenizer_file
    max_length, buckets = tokens.max_length, "longest" if tokens.pads_to_longest else ",".join(map(str, tokens.buckets))
    return tokenizer, max_length, buckets


def measure_ceiling(
    tokenizer: Path, texts: Sequence[str], max_length: int, buckets: str, work: Path, seconds: float = 2.0
) -> Ceiling:
    """The tokenizer's in-process rates, each in a process of its own: every core, then one thread."""
    texts_file = work / "ceiling_texts.json"
    texts_file.write_text(json.dumps(list(texts), ensure_ascii=False), encoding="utf-8")
    command = [sys.executable, "-m", "tritongen.bench.tokenize_rate", str(tokenizer), str(texts_file),
               str(max_length), buckets, str(seconds)]  # fmt: skip
    results = []
    for threads in (None, "1"):
        env = {k: v for k, v in os.environ.items() if k != "RAYON_NUM_THREADS"}
        env.update({"RAYON_NUM_THREADS": threads} if threads else {})
        env["TOKENIZERS_PARALLELISM"] = "true"
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise BenchError(f"the in-process tokenizer ceiling failed: {last}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return Ceiling(results[0], results[1], os.cpu_count() or 1)


@dataclass(frozen=True)
class _Run:
    server: TritonServer
    name: str
    sweep: Sweep
    data: Path
    workdir: Path
    roles: Mapping[str, str]  # model name -> role


@dataclass(frozen=True)
class _Target:
    """What one perf_analyzer run drives: ``model`` (shown as ``label``) over ``protocol``, ``batch`` texts each."""

    label: str
    model: str
    protocol: str
    batch: int
    concurrency: int


def _measure(run: _Run, to: _Target, progress: Any, step: str = "") -> CpuSidePoint:
    """One perf_analyzer run of ``to.model``, with the server's CPU and the model's statistics around it."""
    target, model, protocol, batch, concurrency = to.label, to.model, to.protocol, to.batch, to.concurrency
    if step:
        progress(f"  {step} {target} over {protocol}, {batch} text(s)/request, concurrency {concurrency}…")
    sweep = Sweep(
        concurrency=(concurrency,), request_count=run.sweep.request_count, protocol=protocol,
        fixed_requests=run.sweep.fixed_requests, batch_size=batch,
    )  # fmt: skip
    url = run.server.http_url if protocol == "http" else run.server.grpc_url
    label = f"{target.replace(' ', '_')}_{protocol}_b{batch}"
    pid = run.server.process.pid if run.server.process else 0
    before_cpu, before = cpu_snapshot(pid), model_stats(run.server.http_url, model).get(model)
    point = run_perf_analyzer(label, model, url, run.data, concurrency, sweep, run.workdir)
    after_cpu, after = cpu_snapshot(pid), model_stats(run.server.http_url, model).get(model)
    if after is None:
        raise BenchError(f"the server has no statistics for `{model}`")
    counted = stats_delta(after, before)
    spent = after_cpu.since(before_cpu)
    cpu = {FRONTEND: spent.pop(FRONTEND, 0.0)}
    for owner, seconds in spent.items():
        role = run.roles.get(owner, owner)
        cpu[role] = cpu.get(role, 0.0) + seconds
    return CpuSidePoint(target, protocol, batch, point, counted.success_count, counted.inference_count, cpu)


def measure_cpu_side(
    repository: Path,
    name: str,
    *,
    sweep: Sweep,
    texts: Sequence[str],
    output: Path,
    console: Console,
    tune: TuneGrid | None = None,
) -> CpuSideReport:
    """Serve ``name`` with its model step free and measure its CPU side; write the report under ``output``.

    ``tune`` also measures these tokenizer and postprocess instance counts, one text and 32 per request over gRPC
    at the top concurrency, each applied to the running server (``tritongen.bench.tune``).
    """
    tokenizer, max_length, buckets = _tokenizer_settings(repository, name)
    output.mkdir(parents=True, exist_ok=True)
    console.print("[bold]CPU side: the tokenizer's in-process ceiling (every core, then one thread)…")
    smoke = sweep.fixed_requests > 0  # a smoke run proves the harness: a short look at the ceiling will do
    ceiling = measure_ceiling(tokenizer, texts, max_length, buckets, output, 0.2 if smoke else 2.0)
    names = step_names(name)
    concurrency = sweep.concurrency if sweep.concurrency != Sweep().concurrency else DEFAULT_CONCURRENCY
    with tempfile.TemporaryDirectory(prefix="bench-free-") as tmp:
        free = free_repository(repository, name, Path(tmp) / "repo")
        tune_plan = TunePlan(free, name, tune) if tune else None  # refuses a bad grid before the server starts
        data = output / "input_data.json"
        write_input_data(data, texts)
        models = [m for m in names.values() if (free / m).is_dir()]
        server = TritonServer(free, Endpoints.free(), models=models, log_file=output / "tritonserver.log")
        with server:
            run = _Run(server, name, sweep, data, output, {m: r for r, m in names.items() if r != "ensemble"})
            plan = [
                _Target("ensemble", name, p, b, c) for p in PROTOCOLS for b in CPU_SIDE_BATCHES for c in concurrency
            ]
            plan += [
                _Target("tokenizer step", names["tokenizer"], "grpc", b, max(concurrency)) for b in CPU_SIDE_BATCHES
            ]
            points = [_measure(run, to, console.print, f"{i}/{len(plan)}") for i, to in enumerate(plan, 1)]
            if tune_plan is not None:
                points += _measure_settings(run, tune_plan, max(concurrency), console)
    command = f"python -m tritongen bench --name {name} --repository {repository} --free-model-step"
    served_by = server.backends.describe("onnxruntime")
    report = CpuSideReport(name, points, ceiling, _instances(repository, name), command, served_by)
    _write(report, output)
    return report


def _measure_settings(run: _Run, plan: TunePlan, concurrency: int, console: Console) -> list[CpuSidePoint]:
    """Each setting of ``plan`` (the built one first) applied to the server, then one text and 32 over gRPC."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(run.server.http_url, network_timeout=600.0)
    points, current = [], plan.built
    try:
        for index, setting in enumerate(plan.settings, 1):
            console.print(f"  setting {index}/{len(plan.settings)}: {setting.label}…")
            current = tune_apply(client, plan, setting, current)
            for batch in CPU_SIDE_BATCHES:
                points.append(
                    _measure(
                        run, _Target(f"ensemble, {setting.label}", run.name, "grpc", batch, concurrency), console.print
                    )
                )
    finally:
        client.close()
    return points


def _write(report: CpuSideReport, output: Path) -> None:
    rows = report.rows()
    with open(output / "cpu_side.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    ceiling = {"cores": report.ceiling.cores, "all_cores": report.ceiling.all_cores,
               "one_thread": report.ceiling.one_thread}  # fmt: skip
    (output / "ceiling.json").write_text(json.dumps(ceiling, indent=1))
    (output / "summary.md").write_text(report.to_markdown())
