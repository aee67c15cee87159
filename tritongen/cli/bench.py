"""Measuring a served ensemble: ``bench`` and ``soak``.

``bench`` is a perf_analyzer sweep against baselines, ``soak`` minutes of mixed traffic watched for errors,
latency and memory.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from tritongen.cli.options import add_backends_option, add_repository_option, add_server_options, ints

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bench`` and ``soak``."""
    subparsers.add_parser("bench", help="perf_analyzer sweep of an ensemble against baselines", options=_bench_options)
    subparsers.add_parser(
        "soak",
        help="mixed traffic at a served ensemble for minutes: errors, latency, memory",
        options=_soak_options,
    )


def _bench_options(bench: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME

    bench.add_argument("--name", default=DEFAULT_NAME)
    add_repository_option(bench)
    bench.add_argument("--output", type=Path, default=Path("perf_analyzer_configs"))
    bench.add_argument("--concurrency", help="comma-separated concurrency levels (default 1,2,4,8,16)")
    bench.add_argument("--request-count", type=int, default=256, help="requests per measurement window")
    bench.add_argument(
        "--fixed-requests",
        type=int,
        default=0,
        help="about N requests per point, stability not judged (smoke runs; default: until stable)",
    )
    bench.add_argument(
        "--texts", type=_texts, default=512,
        help="the request texts: a count of distinct tweets and news paragraphs (default 512), or `news`: 512 BBC "
        "articles of 255 words, the documents a corpus indexes",
    )  # fmt: skip
    bench.add_argument(
        "--batch", type=int, default=1,
        help="texts per request in the HTTP comparisons with the peers and the gateway (perf_analyzer's "
        "configurations send one)",
    )  # fmt: skip
    bench.add_argument(
        "--gateway-args", default="",
        help="more of the gateway's options wherever the bench starts it, as --gateway-args=\"--max-triton-calls 0\"",
    )  # fmt: skip
    bench.add_argument(
        "--through-gateway", action="store_true",
        help="drive the ensemble's side of the peer comparisons through the gateway's /v1/embeddings, which "
        "spreads a big request over the model step's instances",
    )  # fmt: skip
    bench.add_argument(
        "--compare",
        help="comma-separated other ensembles to measure in the same run (with the baseline interleaved, embedding "
        "ensembles also in interleaved HTTP/JSON rounds against --name)",
    )
    bench.add_argument(
        "--baselines",
        help="comma-separated subset of pipeline,nobatch,ceiling,infinity,gateway,script,interleaved "
        "(default: all available but gateway and interleaved)",
    )
    bench.add_argument(
        "--free-model-step",
        action="store_true",
        help="measure the CPU side alone: the model step swapped for one that computes nothing, 1 and 32 texts per "
        "request over gRPC and HTTP, server CPU per request, beside the tokenizer's in-process ceiling",
    )
    bench.add_argument(
        "--tail",
        action="store_true",
        help="also trace every request of one run at the top concurrency (Triton's trace API) and show where the "
        "slowest 1%% wait, step by step",
    )
    tuning = bench.add_argument_group(
        "tuning sweep", "measure these settings too, applied to the running server; the report names the best"
    )
    tuning.add_argument("--tokenizer-instances", help="comma-separated tokenizer step instance counts, e.g. 1,2")
    tuning.add_argument("--postprocess-instances", help="comma-separated postprocess step instance counts, e.g. 1,2")
    tuning.add_argument("--model-instances", help="comma-separated model step instance counts, e.g. 1,2")
    tuning.add_argument(
        "--threads", help="comma-separated threads per model instance (0: the runtime's default), e.g. 0,1,2"
    )
    add_backends_option(bench)
    bench.set_defaults(func=_bench)


def _texts(text: str) -> int | str:
    from tritongen.data.datasets import TEXT_SETS

    if text.isdigit() and int(text) > 0:
        return int(text)
    if text in TEXT_SETS:
        return text
    raise argparse.ArgumentTypeError(f"give a count of texts or one of {', '.join(TEXT_SETS)}, not {text!r}")


def _bench(args: argparse.Namespace) -> None:
    from tritongen.bench.perf import Sweep
    from tritongen.bench.run import BenchOptions, run_bench
    from tritongen.bench.tune import TuneGrid

    sweep = Sweep(
        concurrency=ints(args.concurrency) or Sweep().concurrency,
        request_count=args.request_count,
        fixed_requests=args.fixed_requests,
    )
    grid = TuneGrid(
        tokenizer=tuple(ints(args.tokenizer_instances) or ()),
        model=tuple(ints(args.model_instances) or ()),
        threads=tuple(ints(args.threads) or ()),
        postprocess=tuple(ints(args.postprocess_instances) or ()),
    )
    if args.free_model_step:
        _cpu_side(args, sweep, grid)
        return
    baselines = tuple(b for b in args.baselines.split(",") if b) if args.baselines is not None else None
    options = BenchOptions(
        name=args.name,
        repository=args.repository,
        output=args.output,
        sweep=sweep,
        texts=args.texts,
        batch=args.batch,
        through_gateway=args.through_gateway,
        gateway_args=tuple(shlex.split(args.gateway_args)),
        compare=tuple(n for n in (args.compare or "").split(",") if n),
        tail=args.tail,
        tune=grid,
        **({"baselines": baselines} if baselines is not None else {}),
    )
    run_bench(options)


def _cpu_side(args: argparse.Namespace, sweep: Any, grid: Any) -> None:
    from rich.console import Console

    from tritongen.bench.cpu_side import measure_cpu_side
    from tritongen.data.datasets import text_set

    console = Console(stderr=True)
    output = args.output / args.name / "cpu_side"
    report = measure_cpu_side(
        args.repository.resolve(), args.name, sweep=sweep, texts=text_set(args.texts), output=output,
        console=console, tune=grid or None,
    )  # fmt: skip
    console.print(report.to_markdown())
    console.print(f"report: {output / 'summary.md'}")


def _soak_options(soak: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME

    soak.add_argument("--name", default=DEFAULT_NAME)
    soak.add_argument("--minutes", type=float, default=10.0)
    soak.add_argument("--concurrency", type=int, default=32)
    soak.add_argument("--interval", type=float, default=60.0, help="seconds per reported interval")
    soak.add_argument("--output", type=Path, default=Path("soak_results"), help="report folder (NAME inside)")
    add_server_options(soak, "grpc")
    soak.set_defaults(func=_soak)


def _show_interval(interval: Any) -> None:
    errors = sum(interval.errors.values())
    memory = ", ".join(f"{k} {v:.0f}" for k, v in sorted(interval.memory_mib.items()))
    p50 = "-" if interval.p50_ms is None else f"{interval.p50_ms:.0f}"
    p99 = "-" if interval.p99_ms is None else f"{interval.p99_ms:.0f}"
    print(
        f"[{interval.index}] {interval.requests} requests, {errors} errors, p50 {p50} ms, p99 {p99} ms; "
        f"MiB: {memory or 'server not found on this machine'}",
        flush=True,
    )


def _soak(args: argparse.Namespace) -> None:
    from tritongen.bench.soak import SoakSettings, run_soak, write_report
    from tritongen.errors import BenchError

    settings = SoakSettings(minutes=args.minutes, concurrency=args.concurrency, interval_s=args.interval)
    report = run_soak(
        args.name, grpc_port=args.grpc_port, host=args.host, settings=settings, on_interval=_show_interval
    )
    path = write_report(report, args.output / args.name)
    print(report.to_markdown().splitlines()[-2])
    print(report.to_markdown().splitlines()[-1])
    print(f"report: {path}")
    if report.errors or report.leaks:
        raise BenchError(
            f"soak of `{args.name}` saw {sum(report.errors.values())} errors and {len(report.leaks)} leaks; see {path}"
        )
