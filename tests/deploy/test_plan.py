"""tritongen plan: replicas from a bench results.csv (synthetic here), with the assumptions stated."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tritongen.cli import main
from tritongen.deploy import bench_results_path, plan_capacity
from tritongen.errors import DeployError

# concurrency: (throughput, p99 ms) of the ensemble, as make bench's results.csv holds them
ENSEMBLE = {1: (40.0, 30.0), 4: (120.0, 60.0), 16: (200.0, 150.0), 64: (220.0, 600.0)}
FIELDS = ["config", "concurrency", "throughput", "p50_ms", "p95_ms", "p99_ms", "avg_ms", "stable"]


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "results.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for concurrency, (throughput, p99) in ENSEMBLE.items():
            row = dict(concurrency=concurrency, throughput=throughput, p50_ms=p99 / 3, p95_ms=p99 * 0.9, p99_ms=p99)
            writer.writerow({"config": "ensemble", **row, "avg_ms": p99 / 3, "stable": True})
            # a faster baseline must not be taken for the ensemble
            writer.writerow({"config": "nobatch", **row, "throughput": throughput * 10, "avg_ms": 1, "stable": True})
    return path


def test_plan_uses_highest_concurrency_meeting_p99_when_several_do(results):
    plan = plan_capacity(results, qps=1000, p99_ms=200)
    assert plan.chosen.concurrency == 16
    assert plan.per_replica_qps == pytest.approx(140.0)  # 200/s less 30% headroom
    assert plan.replicas == 8  # ceil(1000 / 140)
    assert plan.gpus == 8


def test_plan_picks_a_lower_concurrency_when_p99_is_tighter(results):
    plan = plan_capacity(results, qps=1000, p99_ms=60, headroom=0.5, gpus_per_replica=2)
    assert plan.chosen.concurrency == 4
    assert plan.replicas == 17  # ceil(1000 / 60)
    assert plan.gpus == 34
    text = plan.to_text()
    assert text.startswith("17 replica(s), 34 GPU(s)")
    assert "concurrency 4" in text and "50% headroom" in text and "linearly" in text


def test_plan_needs_one_replica_at_least_when_the_rate_is_tiny(results):
    assert plan_capacity(results, qps=0.5, p99_ms=1000).replicas == 1


def test_plan_explains_when_no_concurrency_meets_the_target(results):
    with pytest.raises(DeployError, match=r"lowest p99 is 30\.0 ms at concurrency 1"):
        plan_capacity(results, qps=10, p99_ms=10)


def test_plan_refuses_a_file_that_is_not_a_bench_result(tmp_path):
    bad = tmp_path / "results.csv"
    bad.write_text("config,concurrency\nensemble,abc\n")
    with pytest.raises(DeployError, match=r"not a bench results\.csv"):
        plan_capacity(bad, qps=10, p99_ms=10)
    with pytest.raises(DeployError, match="no bench result"):
        plan_capacity(tmp_path / "missing.csv", qps=10, p99_ms=10)


def test_plan_cli_reads_the_bench_folder_of_name_when_no_results_given(results, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    target = bench_results_path("demo")
    target.parent.mkdir(parents=True)
    target.write_bytes(results.read_bytes())
    assert main(["plan", "--qps", "1000", "--p99-ms", "200", "--name", "demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("8 replica(s), 8 GPU(s)") and "perf_analyzer_configs/demo/results/results.csv" in out
    assert main(["plan", "--qps", "10", "--p99-ms", "1", "--results", str(results)]) == 2
