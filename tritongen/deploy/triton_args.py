"""The tritonserver arguments of a deployment, in one typed place.

The Dockerfile, the compose file, the Kubernetes manifests and the KServe InferenceService all
render their command line from one :class:`TritonArgs`, and the probes, Service ports and
scrape targets read its ports and paths, so they cannot disagree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

__all__ = ["LIVE_PATH", "METRICS_PATH", "READY_PATH", "ModelControlMode", "TritonArgs"]

# Triton's own health endpoints on the HTTP port (the container runs plain tritonserver, not `tritongen serve`).
LIVE_PATH = "/v2/health/live"
READY_PATH = "/v2/health/ready"
METRICS_PATH = "/metrics"


class ModelControlMode(str, enum.Enum):
    """``--model-control-mode`` values."""

    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


@dataclass(frozen=True)
class TritonArgs:
    """What the deployed tritonserver is started with.

    ``exit_timeout_secs`` is how long Triton drains in-flight requests after SIGTERM; the pod's
    ``terminationGracePeriodSeconds`` is derived from it. ``summary_latencies`` turns on the latency
    summaries (``nv_inference_request_summary_us`` quantiles) that the dashboard's percentiles read.
    """

    model_repository: str = "/models"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    load_models: tuple[str, ...] = ()
    strict_readiness: bool = True
    allow_gpu_metrics: bool = True
    summary_latencies: bool = True
    exit_timeout_secs: int = 30
    extra: tuple[str, ...] = field(default=())

    def with_repository(self, url: str) -> TritonArgs:
        """The same arguments reading another model repository (a folder or an s3:// URL)."""
        return replace(self, model_repository=url)

    @property
    def metrics_config(self) -> tuple[str, ...]:
        """``--metrics-config`` values."""
        return (f"summary_latencies={'true' if self.summary_latencies else 'false'}",)

    def argv(self) -> list[str]:
        """The arguments after ``tritonserver``."""
        return [
            f"--model-repository={self.model_repository}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            *self.serving_args(),
        ]

    def serving_args(self) -> list[str]:
        """The arguments besides the repository and ports (what a KServe Triton runtime is given: it sets those)."""
        return [
            "--allow-metrics=true",
            f"--allow-gpu-metrics={'true' if self.allow_gpu_metrics else 'false'}",
            *(f"--metrics-config={item}" for item in self.metrics_config),
            f"--model-control-mode={self.model_control_mode.value}",
            *(f"--load-model={name}" for name in self.load_models),
            f"--strict-readiness={'true' if self.strict_readiness else 'false'}",
            f"--exit-timeout-secs={self.exit_timeout_secs}",
            *self.extra,
        ]

    def command(self) -> list[str]:
        """The whole command line."""
        return ["tritonserver", *self.argv()]

    @property
    def ports(self) -> dict[str, int]:
        """Named container ports (names as the Service and ServiceMonitor use them)."""
        return {"http": self.http_port, "grpc": self.grpc_port, "metrics": self.metrics_port}

    def local_args(self) -> list[str]:
        """The arguments ``TritonServer`` does not set itself, for running the same setup here."""
        return [*(f"--metrics-config={item}" for item in self.metrics_config), *self.extra]
