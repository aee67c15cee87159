"""A short, bounded run of the bench harness: real perf_analyzer, real server, real baselines."""

from __future__ import annotations

import contextlib
import csv
import os
import signal

import pytest

from tritongen.bench import run as bench_run
from tritongen.bench.perf import Sweep, parse_csv
from tritongen.bench.run import BenchOptions, run_bench
from tritongen.errors import BenchError

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


def test_bench_smoke_runs_perf_analyzer_and_writes_report(tmp_path, tiny_factory, builds, monkeypatch, capsys):
    # The same build as tests/bench/test_tune.py's; the bench starts its own server.
    traced, tracing = [], bench_run.tracing

    @contextlib.contextmanager
    def crashing_once(server):
        """The first traced run's server gets the SIGSEGV Triton 2.51's trace race sometimes deals it."""
        with tracing(server):
            traced.append(server.process.pid)
            if len(traced) == 1:
                os.kill(server.process.pid, signal.SIGSEGV)
            yield

    monkeypatch.setattr(bench_run, "tracing", crashing_once)
    repo = builds.repository(builds(tiny_factory("bert"), "clf", buckets=(16, 32)), into=tmp_path / "repo")
    options = BenchOptions(
        name="clf",
        repository=repo,
        output=tmp_path / "pa",
        # A fixed number of requests, no stability criterion: the smoke run proves the harness, not a quiet machine.
        sweep=Sweep(concurrency=(1, 4), fixed_requests=24),
        texts=32,
        tail=True,  # every request of a 3-second run at concurrency 4 traced
        peer_seconds=3.0,
    )
    report, paths = run_bench(options)
    configs = {(p.config, p.concurrency) for p in report.points}
    assert configs == {(c, n) for c in ("ensemble", "nobatch", "pipeline") for n in (1, 4)}
    assert all(p.throughput > 0 and p.p99_ms >= p.p50_ms > 0 for p in report.points)
    assert report.ceiling and all(p.throughput > 0 for p in report.ceiling)
    assert set(report.ratios()) == {
        "throughput vs (a) pipeline",
        "p99 latency vs (a) pipeline",
        "throughput vs (b) no batching",
        "throughput vs (c) in-process ceiling",
    }
    steps = report.breakdown[("ensemble", 4)]
    assert set(steps) == {"clf_tokenizer", "clf_model", "clf_postprocess"}
    assert steps["clf_model"].success_count > 0
    (budget,) = [b for b in report.budgets(1) if b.config == "ensemble"]
    assert [model for model, _, _ in budget.steps] == ["clf_tokenizer", "clf_model", "clf_postprocess"]  # in order
    # server_ms and client_ms count different requests (the statistics API sees perf_analyzer's warm-up too), so
    # neither bounds the other on a busy machine: each is only known to be positive.
    assert budget.server_ms > 0 and budget.client_ms > 0 and all(compute > 0 for _, _, compute in budget.steps)
    assert sum(ms for _, ms in budget.rows()) == pytest.approx(budget.client_ms)
    assert "## Latency budget of Triton ensemble (dynamic batching) at concurrency 1" in paths["summary"].read_text()
    with open(paths["csv"]) as handle:
        assert len(list(csv.DictReader(handle))) == 6
    assert paths["plot"].stat().st_size > 10_000
    summary = paths["summary"].read_text()
    assert "## Ratios at concurrency 4" in summary and "clf_model" in summary
    tail = report.tail  # from Triton's own per-request traces
    assert tail is not None and tail.requests >= 100 and tail.tail >= 1
    assert [row[0] for row in tail.rows()] == [
        "http",
        *(f"clf_{s} {part}" for s in ("tokenizer", "model", "postprocess") for part in ("queue", "compute")),
        "between steps",
    ]
    assert tail.median["clf_model compute"] > 0 and tail.batch[0] >= 1
    # The crash was seen and the server restarted; the race itself may crash a later try too (then restarted again),
    # so the reported run is the first that did not crash, on a server of its own.
    assert len(traced) >= 2 and len(set(traced)) == len(traced)
    assert "tritonserver crashed (signal 11) while it traced every request" in capsys.readouterr().err
    assert "### Where the slowest requests wait" in summary
    data = tmp_path / "pa" / "clf"
    assert (data / "input_data.json").is_file() and (data / "sweep.json").is_file()
    # perf_analyzer's own CSV is kept next to the report and parses the same way
    assert parse_csv(data / "results" / "ensemble_c1.csv", "ensemble").concurrency == 1


def test_bench_raises_when_ensemble_missing(tmp_path):
    with pytest.raises(BenchError, match="no ensemble `ghost`"):
        run_bench(BenchOptions(name="ghost", repository=tmp_path))
