"""The bench's tuning sweep: settings applied to a real server through the load API, then measured."""

from __future__ import annotations

import csv
import fcntl
import os
import subprocess
import threading
import time

import pytest
import tritonclient.http as httpclient

from tritongen.bench.perf import Sweep, perf_analyzer_binary, write_input_data
from tritongen.bench.run import BenchOptions, run_bench
from tritongen.bench.tune import Setting, TuneGrid, TunePlan, thread_parameter, tune
from tritongen.configs.model_config import ModelConfig
from tritongen.configs.parser import read_config
from tritongen.errors import BenchError
from tritongen.serve.server import running_server, server_environment

SMOKE = Sweep(concurrency=(2,), fixed_requests=16)  # proves the harness, not the machine: no stability criterion


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_factory, builds):
    # The same build as tests/bench/test_bench.py's; the sweep reloads configs, so it runs its own server.
    built = builds(tiny_factory("bert"), "clf", buckets=(16, 32))
    return builds.repository(built, into=tmp_path_factory.mktemp("tune") / "repo")


def test_grid_starts_with_the_built_setting_and_skips_repeats(repo):
    plan = TunePlan(repo, "clf", TuneGrid(tokenizer=(1, 2), threads=(0, 1)))
    assert plan.built == Setting(tokenizer=1, model=1, threads=1)  # the test builds' one thread
    assert plan.settings == [Setting(1, 1, 1), Setting(1, 1, 0), Setting(2, 1, 0), Setting(2, 1, 1)]
    assert plan.changes(Setting(1, 1, 1), plan.built) == {}
    changes = plan.changes(Setting(2, 1, 1), plan.built)
    assert set(changes) == {"tokenizer"} and changes["tokenizer"].instances == 2


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (TuneGrid(model=(0,)), "instance counts must be at least 1"),
        (TuneGrid(threads=(-1,)), "thread counts must be 0"),
    ],
)
def test_bad_grids_are_refused_up_front(repo, grid, message):
    with pytest.raises(BenchError, match=message):
        TunePlan(repo, "clf", grid)


def test_threads_are_refused_for_backends_without_a_thread_setting():
    def config(**runtime: str) -> ModelConfig:
        return ModelConfig(name="m", max_batch_size=8, inputs=(), outputs=(), **runtime)

    assert thread_parameter(config(backend="onnxruntime")) == "intra_op_thread_count"
    assert thread_parameter(config(backend="openvino")) == "INFERENCE_NUM_THREADS"
    with pytest.raises(BenchError, match="thread tuning applies to onnxruntime and openvino"):
        thread_parameter(config(platform="tensorrt_plan"))


@pytest.mark.e2e
@pytest.mark.bench
def test_settings_reach_the_server_and_leave_the_disk_alone(repo, tmp_path):
    plan = TunePlan(repo, "clf", TuneGrid(tokenizer=(2,), model=(1, 2), threads=(1,)))
    assert plan.settings == [Setting(1, 1, 1), Setting(2, 1, 1), Setting(2, 2, 1)]
    on_disk = {m: (repo / m / "config.pbtxt").read_text() for m in ("clf_tokenizer", "clf_model")}
    data = tmp_path / "input.json"
    write_input_data(data, ["a short text", "another one, a little longer than that"] * 4)
    with running_server(repo) as server:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
        try:
            points = tune(client, plan, url=server.http_url, sweep=SMOKE, input_data=data, workdir=tmp_path)
            model = client.get_model_config("clf_model")
            tokenizer = client.get_model_config("clf_tokenizer")
        finally:
            client.close()
    assert [p.setting for p in points] == plan.settings
    assert all(p.point.throughput > 0 and p.point.config == p.setting.slug for p in points)
    # The server runs the last setting; the repository still holds the built one.
    assert model["instance_group"][0]["count"] == 2 and tokenizer["instance_group"][0]["count"] == 2
    assert model["parameters"]["intra_op_thread_count"]["string_value"] == "1"
    assert {m: (repo / m / "config.pbtxt").read_text() for m in on_disk} == on_disk
    assert read_config(repo / "clf_model" / "config.pbtxt").instances == 1


@pytest.mark.e2e
@pytest.mark.bench
def test_bench_reports_the_sweep_and_the_spec_for_its_best_setting(repo, tmp_path):
    options = BenchOptions(
        name="clf", repository=repo, output=tmp_path / "pa", sweep=SMOKE, texts=16, baselines=(),
        tune=TuneGrid(model=(1, 2)),
    )  # fmt: skip
    report, paths = run_bench(options)
    assert [t.setting for t in report.tuning] == [Setting(1, 1, 1), Setting(1, 2, 1)]
    assert report.tuned_backend == "onnxruntime"
    assert {p.config for p in report.points} == {"ensemble"}  # the sweep stays out of the main table and ratios
    with open(paths["tuning"]) as handle:
        rows = list(csv.DictReader(handle))
    assert [row["model_instances"] for row in rows] == ["1", "2"]
    summary = paths["summary"].read_text()
    assert "## Instances and threads" in summary and "the built setting" in summary
    winner = max(report.tuning, key=lambda t: t.point.throughput).setting
    assert ("model_instances:\n  count: 2" in summary) == (winner.model == 2)


def _held_up_run(command: list[str], header: int, held_s: float) -> subprocess.Popen[bytes]:
    """perf_analyzer whose main thread blocks on stdout just after its workers start, for ``held_s`` seconds.

    Its stdout is a one-page pipe filled to within ``header`` bytes (what it prints before
    ``Request concurrency``), so that line's write blocks until the pipe is drained.
    """
    read, write = os.pipe()
    size = fcntl.fcntl(write, 1031, 4096)  # F_SETPIPE_SZ
    os.write(write, b"x" * (size - header - 4))
    process = subprocess.Popen(command, stdout=write, stderr=subprocess.DEVNULL, env=server_environment())
    os.close(write)
    time.sleep(held_s)  # the workers' requests finish meanwhile
    threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(read, 65536), b"")], daemon=True).start()
    return process


@pytest.mark.e2e
@pytest.mark.bench
def test_smoke_measurement_finishes_when_perf_analyzer_is_held_up_as_its_workers_start(repo, tmp_path):
    """A smoke point finishes although its requests finish before perf_analyzer's main thread starts the window.

    perf_analyzer 2.51's ``--request-count`` mode sends exactly N requests and drops the records of those that
    finish before its main thread swaps in a fresh record list; it then waits forever for the N. On a loaded
    2-core machine the scheduler holds the main thread up that long now and then (the tuning test hung so).
    Blocking the main thread's stdout for 2 s right after its workers start makes the race certain: with
    ``--request-count 16`` this run never ends; the smoke flags keep the load steady and finish.
    """
    data = tmp_path / "input.json"
    write_input_data(data, ["a short text", "another one, a little longer than that"] * 4)
    with running_server(repo, models=["clf"]) as server:
        command = [
            str(perf_analyzer_binary()), "-m", "clf", "-u", server.http_url, "-i", "http", "--input-data", str(data),
            "--concurrency-range", "2", *SMOKE.measurement_flags(), "-f", str(tmp_path / "held.csv"),
        ]  # fmt: skip
        printed = subprocess.run(command, capture_output=True, text=True, env=server_environment(), timeout=600)
        assert printed.returncode == 0, printed.stdout[-500:] + printed.stderr[-500:]
        header = len(printed.stdout[: printed.stdout.index("Request concurrency")].encode())
        process = _held_up_run(command, header, held_s=2.0)
        try:
            assert process.wait(timeout=600) == 0  # the time-out only stops a hang
        finally:
            process.kill()
    assert (tmp_path / "held.csv").is_file()
