"""``tritongen manifests NAME``: plain Kubernetes YAML for one deployment, plus a KServe alternative.

The pod runs the image ``tritongen package`` builds, reading the model repository from S3
(where ``tritongen publish`` put it) with credentials from a Secret. The readiness probe runs an
inference through the ensemble (``tritongen/deploy/probe.py``, copied into the image); start-up and
liveness use Triton's own ``/v2/health/ready`` and ``/v2/health/live`` on the HTTP port; the HorizontalPodAutoscaler
scales on queue time per request, which the shipped Prometheus-adapter rule computes from
Triton's counters. Every value that also appears in the command line comes from :class:`TritonArgs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tritongen.containers import DEFAULT_CONTAINER
from tritongen.deploy.dashboard import busiest_step_queue_us, step_matcher
from tritongen.deploy.folder import write_folder
from tritongen.deploy.gateway import GATEWAY_PORT
from tritongen.deploy.gateway import sidecar as gateway_sidecar
from tritongen.deploy.package import default_image, model_folders, probe_command
from tritongen.deploy.triton_args import LIVE_PATH, METRICS_PATH, READY_PATH, TritonArgs
from tritongen.errors import DeployError

__all__ = ["HPA_METRIC", "ManifestOptions", "manifests", "startup_seconds", "write_manifests"]

HPA_METRIC = "triton_queue_us_per_request"
PRESTOP_SLEEP_S = 5  # endpoints stop routing to the pod before Triton starts draining
GRACE_MARGIN_S = 10  # beyond preStop and Triton's --exit-timeout-secs, for the process to exit
STARTUP_PERIOD_S = 10
KSERVE_FOLDER = "kserve"


@dataclass(frozen=True)
class ManifestOptions:
    """What the manifests need beyond the server arguments."""

    name: str
    repository_url: str  # s3://bucket/prefix holding the model folders
    image: str = ""
    namespace: str = "default"
    gpus: int = 0  # per replica: 0 for a build on KIND_CPU instances (`tritongen manifests` reads the build)
    cpus: int = 2  # per replica: requested, and the CPU runtimes' thread count
    container: str = DEFAULT_CONTAINER  # the Triton release of the image (KServe's runtimeVersion)
    image_pull_policy: str = "IfNotPresent"
    min_replicas: int = 1
    max_replicas: int = 4
    queue_target_ms: float = 50.0
    startup_seconds: int = 300  # download from S3, load and warm up the models
    secret: str = ""  # default: <name>-s3-credentials
    gateway: bool = False  # the OpenAI/TEI gateway as a sidecar (tritongen.deploy.gateway)

    def __post_init__(self) -> None:
        if not self.repository_url.startswith("s3://"):
            raise DeployError(f"the model repository `{self.repository_url}` is not an s3:// URL")
        if self.gpus < 0 or self.cpus < 1:
            raise DeployError(f"{self.gpus} GPUs and {self.cpus} CPUs per replica: give GPUs >= 0 and CPUs >= 1")
        if self.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise DeployError(f"image pull policy `{self.image_pull_policy}`: use Always, IfNotPresent or Never")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise DeployError(f"replicas {self.min_replicas}..{self.max_replicas} are not an increasing positive range")

    @property
    def app(self) -> str:
        """The Kubernetes name of everything (DNS-1123: lower case, dashes)."""
        return f"triton-{self.name}".replace("_", "-").lower()

    @property
    def secret_name(self) -> str:
        """The Secret holding AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."""
        return self.secret or f"{self.app}-s3-credentials"

    @property
    def gateway_secret_name(self) -> str:
        """The Secret holding the gateway's API key (key ``api-key``; empty for none)."""
        return f"{self.app}-gateway"


def startup_seconds(repository: Path, name: str, *, base_s: int = 120, per_gib_s: int = 120) -> int:
    """Startup budget from the size of the built model folders: a base plus download and load time per GiB."""
    size = sum(f.stat().st_size for folder in model_folders(repository, name) for f in folder.rglob("*") if f.is_file())
    return base_s + per_gib_s * math.ceil(size / 2**30)


def _app_label(options: ManifestOptions) -> dict[str, str]:
    """The label every object of the app carries (:func:`_meta`), and so the one its selectors match."""
    return {"app.kubernetes.io/name": options.app}


def _meta(options: ManifestOptions, name: str | None = None, **extra: Any) -> dict[str, Any]:
    labels = {**_app_label(options), "app.kubernetes.io/part-of": "tritongen"}
    return {"name": name or options.app, "namespace": options.namespace, "labels": labels, **extra}


def _resource(
    api_version: str, kind: str, options: ManifestOptions, name: str | None = None, **body: Any
) -> dict[str, Any]:
    """A Kubernetes object: its API version, ``kind``, the app's metadata (named ``name``, else the app), ``body``."""
    return {"apiVersion": api_version, "kind": kind, "metadata": _meta(options, name), **body}


def _container(options: ManifestOptions, args: TritonArgs) -> dict[str, Any]:
    def probe(path: str, period: int, failures: int) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures}

    env = [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": options.secret_name, "key": key, "optional": optional}}}
        for key, optional in (
            ("AWS_ACCESS_KEY_ID", False),
            ("AWS_SECRET_ACCESS_KEY", False),
            ("AWS_DEFAULT_REGION", True),
            ("AWS_SESSION_TOKEN", True),
        )
    ]
    if not options.gpus:  # the CPU runtimes size their thread pools to the cores the pod was given
        env += [{"name": key, "value": str(options.cpus)} for key in ("OMP_NUM_THREADS", "OPENVINO_NUM_THREADS")]
    return {
        "name": "triton",
        "image": options.image or default_image(options.name),
        "imagePullPolicy": options.image_pull_policy,
        "command": ["tritonserver"],
        "args": args.argv(),
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in args.ports.items()],
        "env": env,
        "resources": resources(options),
        "startupProbe": probe(READY_PATH, STARTUP_PERIOD_S, math.ceil(options.startup_seconds / STARTUP_PERIOD_S)),
        # Deep: an inference through the ensemble (a dead Python stub leaves /v2/health/ready at 200).
        "readinessProbe": {
            "exec": {"command": probe_command(options.name, args)},
            "periodSeconds": 10,
            "timeoutSeconds": 15,
            "failureThreshold": 3,
        },
        "livenessProbe": probe(LIVE_PATH, 10, 3),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_S)]}}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def resources(options: ManifestOptions) -> dict[str, Any]:
    """Requests and limits: CPU and memory; ``nvidia.com/gpu`` on GPU builds (a limit, as the device plugin needs)."""
    gpus = {"nvidia.com/gpu": options.gpus} if options.gpus else {}
    return {"requests": {"cpu": str(options.cpus), "memory": "4Gi", **gpus}, "limits": {"memory": "8Gi", **gpus}}


def _placement(options: ManifestOptions) -> dict[str, Any]:
    """A GPU build goes to GPU nodes (their taint tolerated; GPU feature discovery's label); a CPU build anywhere."""
    if not options.gpus:
        return {}
    return {
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


def grace_seconds(args: TritonArgs) -> int:
    """``terminationGracePeriodSeconds``: preStop, then Triton's drain (``--exit-timeout-secs``), plus a margin."""
    return PRESTOP_SLEEP_S + args.exit_timeout_secs + GRACE_MARGIN_S


def _deployment(options: ManifestOptions, args: TritonArgs) -> dict[str, Any]:
    spec = {
        "replicas": options.min_replicas,
        "selector": {"matchLabels": _app_label(options)},
        "template": {
            "metadata": {"labels": _meta(options)["labels"]},
            "spec": {
                "terminationGracePeriodSeconds": grace_seconds(args),
                "containers": [_container(options, args)],
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
                **_placement(options),
            },
        },
    }
    return _resource("apps/v1", "Deployment", options, spec=spec)


def _service(options: ManifestOptions, args: TritonArgs) -> dict[str, Any]:
    spec = {
        "selector": _app_label(options),
        "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in args.ports.items()],
    }
    return _resource("v1", "Service", options, spec=spec)


def _service_monitor(options: ManifestOptions) -> dict[str, Any]:
    spec = {
        "selector": {"matchLabels": _app_label(options)},
        "endpoints": [{"port": "metrics", "path": METRICS_PATH, "interval": "15s"}],
    }
    return _resource("monitoring.coreos.com/v1", "ServiceMonitor", options, spec=spec)


def adapter_rule(options: ManifestOptions) -> dict[str, Any]:
    """The Prometheus-adapter rule exposing the queue time per request (µs) of the ensemble's busiest step.

    Per pod: the step whose queue grows first is what saturates (``dashboard.busiest_step_queue_us`` says why
    not the ensemble's own ratio).
    """
    selector = f"<<.LabelMatchers>>,{step_matcher(options.name)}"
    return {
        "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "^nv_inference_queue_duration_us$", "as": HPA_METRIC},
        "metricsQuery": busiest_step_queue_us(selector, by="<<.GroupBy>>"),
    }


def _adapter_config(options: ManifestOptions) -> dict[str, Any]:
    return _resource(
        "v1",
        "ConfigMap",
        options,
        f"{options.app}-adapter-rules",
        data={"config.yaml": yaml.safe_dump({"rules": [adapter_rule(options)]}, sort_keys=False)},
    )


def _hpa(options: ManifestOptions) -> dict[str, Any]:
    spec = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": options.app},
        "minReplicas": options.min_replicas,
        "maxReplicas": options.max_replicas,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": HPA_METRIC},
                    "target": {"type": "AverageValue", "averageValue": str(round(options.queue_target_ms * 1000))},
                },
            }
        ],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
    }
    return _resource("autoscaling/v2", "HorizontalPodAutoscaler", options, spec=spec)


def _pdb(options: ManifestOptions) -> dict[str, Any]:
    return _resource(
        "policy/v1",
        "PodDisruptionBudget",
        options,
        spec={"maxUnavailable": 1, "selector": {"matchLabels": _app_label(options)}},
    )


def _kserve(options: ManifestOptions, args: TritonArgs) -> list[dict[str, Any]]:
    """A KServe InferenceService on the Triton runtime (it downloads storageUri and sets ports and repository)."""
    account = f"{options.app}-kserve"
    service_account = _resource(
        "v1",
        "ServiceAccount",
        options,
        account,
        secrets=[{"name": options.secret_name}],
    )
    isvc = _resource(
        "serving.kserve.io/v1beta1",
        "InferenceService",
        options,
        spec={
            "predictor": {
                "minReplicas": options.min_replicas,
                "maxReplicas": options.max_replicas,
                "serviceAccountName": account,
                "triton": {
                    "storageUri": options.repository_url,
                    "runtimeVersion": f"{options.container}-py3",
                    "image": options.image or default_image(options.name),
                    "args": args.serving_args(),
                    "resources": resources(options),
                },
                **_placement(options),
            }
        },
    )
    return [service_account, isvc]


def _add_gateway(
    deployment: dict[str, Any], service: dict[str, Any], options: ManifestOptions, args: TritonArgs
) -> None:
    """The gateway beside Triton in each pod (it reaches Triton on localhost), and its port on the Service."""
    image = options.image or default_image(options.name)
    container = gateway_sidecar(image, options.gateway_secret_name, args, PRESTOP_SLEEP_S)
    deployment["spec"]["template"]["spec"]["containers"].append(container)
    service["spec"]["ports"].append(
        {"name": "gateway", "port": GATEWAY_PORT, "targetPort": "gateway", "protocol": "TCP"}
    )


def manifests(options: ManifestOptions, args: TritonArgs | None = None) -> dict[str, list[dict[str, Any]]]:
    """File name to the documents in it; the model repository is ``options.repository_url``."""
    args = (args or TritonArgs()).with_repository(options.repository_url)
    deployment, service = _deployment(options, args), _service(options, args)
    if options.gateway:
        _add_gateway(deployment, service, options, args)
    return {
        "deployment.yaml": [deployment],
        "service.yaml": [service],
        "servicemonitor.yaml": [_service_monitor(options)],
        "prometheus-adapter-rules.yaml": [_adapter_config(options)],
        "hpa.yaml": [_hpa(options)],
        "pdb.yaml": [_pdb(options)],
        f"{KSERVE_FOLDER}/inferenceservice.yaml": _kserve(options, args),
    }


def write_manifests(
    options: ManifestOptions, output: Path | None = None, *, args: TritonArgs | None = None, force: bool = False
) -> Path:
    """Write the manifests (default ``deploy/<name>-k8s``); return the folder."""
    files = {
        path: yaml.safe_dump_all(documents, sort_keys=False) for path, documents in manifests(options, args).items()
    }
    return write_folder(Path(output or Path("deploy") / f"{options.name}-k8s"), files, force=force)
