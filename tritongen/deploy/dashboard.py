"""The Grafana dashboard of one deployment: per ensemble and per step, from Triton's own metrics.

Metric names are Triton 2.51's, as its metrics port serves them (``tests/deploy/test_dashboard.py``
scrapes a real server with Prometheus and runs every expression here). The GPU panels use the
names Triton documents for GPU metrics, which a CPU-only server does not export. A deployment with the
gateway gets its panels too, from the gateway's ``te_*`` metrics (``tests/gateway/test_gateway_telemetry.py`` scrapes a
real gateway and runs them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DATASOURCE_UID",
    "GPU_METRICS",
    "MODEL_METRICS",
    "Panel",
    "busiest_step_queue_us",
    "dashboard",
    "dashboard_queries",
    "gateway_panels",
    "panels",
    "queue_us_per_request",
    "step_matcher",
]

DATASOURCE_UID = "prometheus"
RATE_WINDOW = "1m"
GPU_METRICS = ("nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes")
# Per-model counters and summaries the panels read (summaries need --metrics-config=summary_latencies=true).
MODEL_METRICS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
)


@dataclass(frozen=True)
class Panel:
    """One time-series panel: a title, a unit and ``(expression, legend)`` targets."""

    title: str
    unit: str
    targets: tuple[tuple[str, str], ...]
    gpu: bool = False


def _models(name: str) -> str:
    """The label matcher for the ensemble and its three steps."""
    return f'model=~"{name}|{name}_tokenizer|{name}_model|{name}_postprocess"'


def _rate(metric: str, selector: str, by: str = "model") -> str:
    return f"sum by ({by}) (rate({metric}{{{selector}}}[{RATE_WINDOW}]))"


def queue_us_per_request(selector: str, by: str = "model") -> str:
    """Average queue time per successful request, in microseconds, of each model ``by`` groups."""
    queue, success = (
        _rate(m, selector, by) for m in ("nv_inference_queue_duration_us", "nv_inference_request_success")
    )
    return f"{queue} / {success}"


def step_matcher(name: str) -> str:
    """The label matcher for ensemble ``name``'s steps (not the ensemble itself)."""
    return f'model=~"{name}_tokenizer|{name}_model|{name}_postprocess"'


def busiest_step_queue_us(selector: str, by: str) -> str:
    """The autoscaling signal: the queue time per request (µs) of the step that queues most, per ``by`` group.

    An ensemble does not queue; its steps do. Measured on a saturated MiniLM server (docs/deploying.md), the
    ensemble's own ``nv_inference_queue_duration_us`` stayed 0 while its model step queued 260–290 ms per
    request, so a ratio over the ensemble (or summed over every model and divided by every model's requests, as
    Triton's k8s-onprem example does, server #8979) under-reports saturation. On a GPU node the tokenizer step
    can be the one that queues, hence the busiest step. A step with no requests counts 0, not NaN, so the
    metric stays defined when idle.
    """
    queue = f"sum by ({by}, model) (rate(nv_inference_queue_duration_us{{{selector}}}[{RATE_WINDOW}]))"
    success = f"sum by ({by}, model) (rate(nv_inference_request_success{{{selector}}}[{RATE_WINDOW}]))"
    return f"max by ({by}) ({queue} / clamp_min({success}, 1e-9))"


def panels(name: str) -> tuple[Panel, ...]:
    """The dashboard's panels for ensemble ``name``."""
    m = _models(name)
    success = _rate("nv_inference_request_success", m)
    compute = " + ".join(_rate(f"nv_inference_compute_{part}_duration_us", m) for part in ("input", "infer", "output"))
    failures = _rate("nv_inference_request_failure", m, "model, reason")
    pending = f"sum by (model) (nv_inference_pending_request_count{{{m}}})"
    gpu_busy = "avg by (gpu_uuid) (nv_gpu_utilization)"
    quantile = 'max by (model) (nv_inference_{kind}_summary_us{{{m}, quantile="{q}"}}) / 1000'
    return (
        Panel("Request rate", "reqps", ((success, "{{model}}"),)),
        Panel("Failure rate", "reqps", ((failures, "{{model}} {{reason}}"),)),
        Panel(
            "Queue vs compute time per request",
            "ms",
            (
                (f"({queue_us_per_request(m)}) / 1000", "{{model}} queue"),
                (f"({compute}) / ({success}) / 1000", "{{model}} compute"),
            ),
        ),
        Panel(
            "Average batch size (inferences per execution)",
            "none",
            ((f"{_rate('nv_inference_count', m)} / {_rate('nv_inference_exec_count', m)}", "{{model}}"),),
        ),
        Panel(
            "Request latency percentiles",
            "ms",
            tuple((quantile.format(kind="request", m=m, q=q), f"{{{{model}}}} p{label}") for q, label in
                  (("0.5", "50"), ("0.95", "95"), ("0.99", "99"))),
        ),
        Panel("Queue latency p99", "ms", ((quantile.format(kind="queue", m=m, q="0.99"), "{{model}}"),)),
        Panel("Pending requests", "none", ((pending, "{{model}}"),)),
        Panel(
            "Autoscaling signal: queue per request of the busiest step",
            "ms",
            ((f"({busiest_step_queue_us(step_matcher(name), 'job')}) / 1000", "{{job}}"),),
        ),
        Panel("GPU utilisation", "percentunit", ((gpu_busy, "{{gpu_uuid}}"),), gpu=True),
        Panel(
            "GPU memory used",
            "bytes",
            (
                ("sum by (gpu_uuid) (nv_gpu_memory_used_bytes)", "{{gpu_uuid}} used"),
                ("sum by (gpu_uuid) (nv_gpu_memory_total_bytes)", "{{gpu_uuid}} total"),
            ),
            gpu=True,
        ),
    )  # fmt: skip


def gateway_panels(name: str) -> tuple[Panel, ...]:
    """The gateway's panels for ensemble ``name``: its requests by route, failures, latency and batching."""
    m = f'model="{name}"'

    def mean_ms(metric: str) -> str:
        return f"sum(rate({metric}_sum{{{m}}}[{RATE_WINDOW}])) / sum(rate({metric}_count{{{m}}}[{RATE_WINDOW}])) * 1000"

    requests = f"sum by (route) (rate(te_request_count_total{{{m}}}[{RATE_WINDOW}]))"
    failures = f"sum by (err) (rate(te_request_failure_total{{{m}}}[{RATE_WINDOW}]))"
    p99 = (
        f"histogram_quantile(0.99, sum by (le, route) (rate(te_request_duration_bucket{{{m}}}[{RATE_WINDOW}]))) * 1000"
    )
    coalesced = (
        f"sum(rate(tritongen_gateway_coalesced_requests_sum{{{m}}}[{RATE_WINDOW}])) / "
        f"sum(rate(tritongen_gateway_coalesced_requests_count{{{m}}}[{RATE_WINDOW}]))"
    )
    return (
        Panel("Gateway requests by route", "reqps", ((requests, "{{route}}"),)),
        Panel("Gateway failures by kind (TEI's err)", "reqps", ((failures, "{{err}}"),)),
        Panel("Gateway request latency p99 by route", "ms", ((p99, "{{route}}"),)),
        Panel(
            "Gateway: waiting for a Triton call vs Triton's time, per request",
            "ms",
            ((mean_ms("te_request_queue_duration"), "queue"), (mean_ms("te_request_inference_duration"), "Triton")),
        ),
        Panel("Gateway: client requests per Triton call", "none", ((coalesced, "requests per call"),)),
    )


def _panel_json(panel: Panel, index: int) -> dict[str, Any]:
    width, height = 12, 8
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": panel.title,
        "datasource": {"type": "prometheus", "uid": DATASOURCE_UID},
        "gridPos": {"x": (index % 2) * width, "y": (index // 2) * height, "w": width, "h": height},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": {"type": "prometheus", "uid": DATASOURCE_UID},
                "expr": expr,
                "legendFormat": legend,
            }
            for i, (expr, legend) in enumerate(panel.targets)
        ],
    }


def dashboard(name: str, *, gateway: bool = False) -> dict[str, Any]:
    """The Grafana dashboard JSON (schema 39) for ensemble ``name`` (with ``gateway``, the gateway's panels too)."""
    shown = panels(name) + (gateway_panels(name) if gateway else ())
    return {
        "uid": f"tritongen-{name}"[:40],
        "title": f"Triton: {name}",
        "tags": ["tritongen", "triton"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "panels": [_panel_json(panel, i) for i, panel in enumerate(shown)],
    }


def dashboard_queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(panel title, expression)`` for every target of a dashboard JSON."""
    for panel in board["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]
