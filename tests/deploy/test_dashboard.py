"""The dashboard against a real server: Debian's Prometheus scrapes a loaded Triton and every panel returns data.

The server serves the model repository of a `tritongen package` folder, so the packaged copy is checked too.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.deployment import prometheus, promql
from tritongen.deploy import ManifestOptions, TritonArgs, dashboard, dashboard_queries, write_package
from tritongen.deploy.dashboard import GPU_METRICS, panels, queue_us_per_request
from tritongen.deploy.manifests import adapter_rule
from tritongen.deploy.package import prometheus_config
from tritongen.serve.client import infer
from tritongen.serve.server import running_server

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus is not installed (apt-get install prometheus)"
)

NAME = "cls"  # the default tiny classifier build, shared with the other modules
# GPU metric names as Triton documents them (docs/user_guide/metrics.md, "GPU Metrics")
DOCUMENTED_GPU_METRICS = {"nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                          "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"}  # fmt: skip


def _prometheus(tmp: Path, target: str):
    return prometheus(tmp, prometheus_config([target], interval_s=1))


def _finite(result: list[dict]) -> list[dict]:
    return [r for r in result if math.isfinite(float(r["value"][1]))]


@pytest.fixture(scope="module")
def repo(builds, tiny_factory) -> Path:
    return builds(tiny_factory("bert", "classification"), NAME).repository  # three steps: the postprocess too


def _load(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        infer(["a short text", "a somewhat longer text about the weather in Berlin"], name=NAME, url=url)


@pytest.mark.e2e
@needs_prometheus
def test_every_dashboard_query_returns_data_when_prometheus_scrapes_a_loaded_server(repo, tmp_path):
    board = dashboard(NAME)
    gpu_titles = {p.title for p in panels(NAME) if p.gpu}
    queries = [(title, expr) for title, expr in dashboard_queries(board) if title not in gpu_titles]
    rule = adapter_rule(ManifestOptions(name=NAME, repository_url="s3://bucket/repo"))
    # The adapter fills in the pod's label matchers and grouping; here the scrape job stands in for them.
    hpa_query = rule["metricsQuery"].replace("<<.LabelMatchers>>", 'job="triton"').replace("<<.GroupBy>>", "job")
    queries.append(("HPA adapter rule", hpa_query))
    stop = threading.Event()
    # Serve what the deploy folder ships, with the deployment's metrics options.
    packaged = write_package(NAME, repo, tmp_path / "deploy") / "model_repository"
    with running_server(packaged, extra_args=TritonArgs().local_args()) as server:
        metrics = f"127.0.0.1:{server.endpoints.metrics_port}"
        with _prometheus(tmp_path, metrics) as prom, cf.ThreadPoolExecutor(4) as pool:
            loaders = [pool.submit(_load, server.grpc_url, stop) for _ in range(4)]
            missing = dict(queries)
            deadline = time.monotonic() + 120
            try:
                while missing and time.monotonic() < deadline:
                    time.sleep(2)
                    missing = {t: e for t, e in missing.items() if not _finite(promql(prom, e))}
                per_model = {r["metric"]["model"] for r in promql(prom, queries[0][1])}
                unknown = promql(prom, "nv_no_such_metric")  # the check can fail: absent names return nothing
            finally:
                stop.set()
                for loader in loaders:
                    loader.result()
    assert not missing, f"no data from Prometheus for: {missing}"
    assert unknown == []
    assert per_model == {NAME, f"{NAME}_tokenizer", f"{NAME}_model", f"{NAME}_postprocess"}


def _signal(prom: str, query: str) -> float | None:
    result = _finite(promql(prom, query))
    return float(result[0]["value"][1]) if result else None


@pytest.mark.e2e
@needs_prometheus
def test_the_hpa_signal_rises_past_its_target_while_the_model_step_queues_and_falls_after(minilm_variant, tmp_path):
    """The adapter rule's query, evaluated by Prometheus, against MiniLM's CPU build under 24 clients and after.

    MiniLM's FP32 model step on this CPU takes milliseconds per request, so 24 clients fill its queue: the
    busiest step's queue per request passes the HPA's 50 ms target, while the ensemble's own ratio (what the
    HPA read before) stays below a microsecond. Once the load stops it falls back to 0 (not NaN). The rule's
    one-minute rate window is shortened to 5 s so that it falls within seconds; nothing else of the query
    changes. Each wait is bounded only to stop a hang; whatever the machine's speed, 24 clients queue behind one
    model step.
    """
    built = minilm_variant("emb")
    rule = adapter_rule(ManifestOptions(name="emb", repository_url="s3://bucket/repo"))
    target_us = 1000 * ManifestOptions(name="emb", repository_url="s3://bucket/repo").queue_target_ms
    hpa_query = (
        rule["metricsQuery"].replace("<<.LabelMatchers>>", 'job="triton"').replace("<<.GroupBy>>", "job")
        .replace("[1m]", "[5s]")
    )  # fmt: skip
    ensemble_ratio = queue_us_per_request('job="triton",model="emb"').replace("[1m]", "[5s]")
    stop, seen, ensemble_seen = threading.Event(), [], []
    with running_server(built.repository, extra_args=TritonArgs().local_args()) as server:
        texts = ["a short text", "a somewhat longer text about the weather in Berlin and the trains " * 6]

        def load() -> None:
            while not stop.is_set():
                infer(texts, name="emb", url=server.grpc_url)

        with _prometheus(tmp_path, f"127.0.0.1:{server.endpoints.metrics_port}") as prom:
            with cf.ThreadPoolExecutor(24) as pool:
                loaders = [pool.submit(load) for _ in range(24)]
                try:
                    deadline = time.monotonic() + 180
                    while time.monotonic() < deadline and not (seen and max(seen) > target_us):
                        time.sleep(2)
                        seen.append(_signal(prom, hpa_query) or 0.0)
                        ensemble_seen.append(_signal(prom, ensemble_ratio) or 0.0)
                finally:
                    stop.set()
                    for loader in loaders:
                        loader.result()
            deadline, after = time.monotonic() + 120, None
            while time.monotonic() < deadline and (after is None or after >= target_us):
                time.sleep(2)
                after = _signal(prom, hpa_query)
    assert max(seen) > target_us, f"the signal never passed {target_us} µs: {seen}"
    assert max(ensemble_seen) < target_us / 100  # the ensemble's own queue ratio hardly moves: it cannot see it
    assert after is not None and after < target_us, f"the signal stayed at {after} µs after the load"


def test_gpu_panels_name_the_documented_gpu_metrics_when_rendered():
    gpu_exprs = [expr for p in panels(NAME) if p.gpu for expr, _ in p.targets]
    named = {metric for metric in DOCUMENTED_GPU_METRICS if any(metric in expr for expr in gpu_exprs)}
    assert {"nv_gpu_utilization", "nv_gpu_memory_used_bytes"} <= named
    assert set(GPU_METRICS) <= DOCUMENTED_GPU_METRICS
