"""Deploying a built ensemble: a docker compose folder with monitoring, Kubernetes manifests, a capacity plan.

One module per job: ``triton_args`` (the server's command line, shared by everything below),
``dashboard`` (Grafana panels from Triton's metrics), ``package`` (Dockerfile, compose,
Prometheus and Grafana provisioning), ``manifests`` (Kubernetes and KServe YAML), ``gateway``
(the optional OpenAI/TEI gateway: its image, compose service and sidecar) and ``plan``
(replicas from a bench result). ``folder`` writes generated folders atomically.
"""

from tritongen.deploy.dashboard import dashboard, dashboard_queries
from tritongen.deploy.manifests import ManifestOptions, manifests, startup_seconds, write_manifests
from tritongen.deploy.package import PackageOptions, write_package
from tritongen.deploy.plan import CapacityPlan, bench_results_path, plan_capacity
from tritongen.deploy.triton_args import ModelControlMode, TritonArgs

__all__ = [
    "CapacityPlan",
    "ManifestOptions",
    "ModelControlMode",
    "PackageOptions",
    "TritonArgs",
    "bench_results_path",
    "dashboard",
    "dashboard_queries",
    "manifests",
    "plan_capacity",
    "startup_seconds",
    "write_manifests",
    "write_package",
]
