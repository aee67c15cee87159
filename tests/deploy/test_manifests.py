"""tritongen manifests: every manifest validates (kubernetes-validate, offline) and agrees with TritonArgs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError, validate

from tritongen.cli import main
from tritongen.containers import DEFAULT_CONTAINER
from tritongen.deploy import ManifestOptions, TritonArgs, manifests, startup_seconds, write_manifests
from tritongen.deploy.dashboard import MODEL_METRICS
from tritongen.deploy.gateway import GATEWAY_PORT
from tritongen.deploy.manifests import HPA_METRIC, grace_seconds
from tritongen.deploy.package import probe_command
from tritongen.deploy.triton_args import LIVE_PATH, METRICS_PATH, READY_PATH
from tritongen.errors import DeployError

K8S_VERSION = "1.30"
URL = "s3://models-bucket/prod/repository"
CRDS = {"ServiceMonitor", "InferenceService"}  # no schema bundled: checked by structure below


@pytest.fixture
def options() -> ManifestOptions:
    return ManifestOptions(name="demo_embed", repository_url=URL, image="registry.example/demo:1", startup_seconds=240)


@pytest.fixture
def docs(options) -> dict[str, dict]:
    return {doc["kind"]: doc for documents in manifests(options).values() for doc in documents}


def _container(docs: dict[str, dict]) -> dict:
    return docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def test_manifests_validate_against_kubernetes_schemas_when_rendered(options):
    checked = set()
    for documents in manifests(options).values():
        for doc in documents:
            if doc["kind"] in CRDS:
                with pytest.raises(SchemaNotFoundError):
                    validate(doc, K8S_VERSION, strict=True)
                continue
            validate(doc, K8S_VERSION, strict=True)
            checked.add(doc["kind"])
    assert checked == {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap",
                       "ServiceAccount"}  # fmt: skip


def test_validator_rejects_a_misspelt_field_when_strict(docs):
    broken = yaml.safe_load(yaml.safe_dump(docs["Deployment"]))
    broken["spec"]["template"]["spec"]["containers"][0]["readynessProbe"] = {}
    with pytest.raises(ValidationError):
        validate(broken, K8S_VERSION, strict=True)


def test_deployment_probes_infer_for_readiness_and_use_triton_health_otherwise_when_rendered(docs):
    args = TritonArgs()
    container = _container(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == args.ports
    assert container["livenessProbe"]["httpGet"] == {"path": LIVE_PATH, "port": "http"}
    # readiness is deep: the image's probe infers through the ensemble on the HTTP port
    assert container["readinessProbe"]["exec"]["command"] == probe_command("demo_embed", args)
    assert f"http://127.0.0.1:{args.http_port}" in container["readinessProbe"]["exec"]["command"]
    startup = container["startupProbe"]
    assert startup["httpGet"] == {"path": READY_PATH, "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 240
    assert (LIVE_PATH, READY_PATH) == ("/v2/health/live", "/v2/health/ready")


def test_deployment_reads_s3_repository_with_secret_credentials_when_rendered(options, docs):
    container = _container(docs)
    assert container["command"] == ["tritonserver"]
    assert container["args"] == TritonArgs(model_repository=URL).argv()
    assert f"--model-repository={URL}" in container["args"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert env["AWS_ACCESS_KEY_ID"] == {"name": options.secret_name, "key": "AWS_ACCESS_KEY_ID", "optional": False}
    assert env["AWS_SECRET_ACCESS_KEY"]["name"] == options.secret_name
    assert container["image"] == "registry.example/demo:1"
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_grace_period_covers_triton_exit_timeout_when_it_changes(options):
    args = TritonArgs(exit_timeout_secs=90)
    deployment = manifests(options, args)["deployment.yaml"][0]
    pod = deployment["spec"]["template"]["spec"]
    assert "--exit-timeout-secs=90" in pod["containers"][0]["args"]
    assert pod["terminationGracePeriodSeconds"] == grace_seconds(args) > 90


def test_service_and_servicemonitor_expose_the_metrics_port_when_rendered(docs):
    service = docs["Service"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == TritonArgs().ports
    monitor = docs["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": METRICS_PATH, "interval": "15s"}]
    assert service["spec"]["selector"].items() <= docs["Deployment"]["spec"]["template"]["metadata"]["labels"].items()


def test_hpa_metric_is_the_adapter_rule_over_triton_counters_when_rendered(options, docs):
    hpa = docs["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]
    metric = hpa["spec"]["metrics"][0]["pods"]
    assert metric["metric"]["name"] == HPA_METRIC
    assert metric["target"] == {"type": "AverageValue", "averageValue": "50000"}  # 50 ms in µs
    rules = yaml.safe_load(docs["ConfigMap"]["data"]["config.yaml"])["rules"]
    assert [r["name"]["as"] for r in rules] == [HPA_METRIC]
    query = rules[0]["metricsQuery"]
    for metric_name in ("nv_inference_queue_duration_us", "nv_inference_request_success"):
        assert metric_name in MODEL_METRICS and metric_name in query
    # the ensemble's steps, not the ensemble: it does not queue, they do
    assert '<<.LabelMatchers>>,model=~"demo_embed_tokenizer|demo_embed_model|demo_embed_postprocess"' in query
    assert query.startswith("max by (<<.GroupBy>>) (") and "clamp_min(" in query
    assert rules[0]["seriesQuery"].startswith("nv_inference_queue_duration_us{")


def test_pdb_selects_the_deployment_pods_when_rendered(docs):
    pdb = docs["PodDisruptionBudget"]
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


def test_kserve_inferenceservice_uses_triton_runtime_with_storage_uri_when_rendered(options, docs):
    isvc = docs["InferenceService"]
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    predictor = isvc["spec"]["predictor"]
    triton = predictor["triton"]
    assert triton["storageUri"] == URL
    assert triton["runtimeVersion"] == f"{DEFAULT_CONTAINER}-py3"
    assert triton["args"] == TritonArgs().serving_args()
    assert not any(a.startswith(("--model-repository", "--http-port", "--grpc-port")) for a in triton["args"])
    assert "nvidia.com/gpu" not in triton["resources"]["limits"]  # a CPU build's default
    assert predictor["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert docs["ServiceAccount"]["secrets"] == [{"name": options.secret_name}]


def test_manifests_refuse_a_local_repository_url_when_given():
    with pytest.raises(DeployError, match="not an s3:// URL"):
        ManifestOptions(name="demo", repository_url="/models")


def test_startup_seconds_grow_with_the_model_size_when_measured(tmp_path):
    for step in ("m", "m_tokenizer", "m_model", "m_postprocess"):
        (tmp_path / step).mkdir()
        (tmp_path / step / "config.pbtxt").write_text("")
    wired = " ".join(f'step {{ model_name: "m_{s}" model_version: -1 }}' for s in ("tokenizer", "model", "postprocess"))
    (tmp_path / "m" / "config.pbtxt").write_text(f'name: "m" platform: "ensemble" ensemble_scheduling {{ {wired} }}')
    assert startup_seconds(tmp_path, "m") == 120 + 120  # a few bytes of configs: one GiB begun
    with open(tmp_path / "m_model" / "model.onnx", "wb") as handle:
        handle.truncate(2**30 + 1)  # sparse: 1 GiB and a byte
    assert startup_seconds(tmp_path, "m") == 120 + 2 * 120


def test_manifests_cli_writes_every_file_and_refuses_overwrite_when_not_forced(tmp_path, capsys):
    out = tmp_path / "k8s"
    argv = ["manifests", "demo", "--to", URL, "--startup-seconds", "300", "--gpus", "0", "--output", str(out)]
    assert main(argv) == 0
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.yaml"))
    assert written == ["deployment.yaml", "hpa.yaml", "kserve/inferenceservice.yaml", "pdb.yaml",
                       "prometheus-adapter-rules.yaml", "service.yaml", "servicemonitor.yaml"]  # fmt: skip
    for path in out.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] not in CRDS:
                validate(doc, K8S_VERSION, strict=True)
    assert main(argv) == 2 and "already exists" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0
    assert (
        main(
            [
                "manifests",
                "demo",
                "--to",
                "/local",
                "--startup-seconds",
                "1",
                "--gpus",
                "0",
                "--output",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )


def test_write_manifests_defaults_to_deploy_name_k8s_when_no_output(options, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert write_manifests(options) == Path("deploy") / "demo_embed-k8s"


def _validated(options: ManifestOptions) -> dict[str, dict]:
    docs = {doc["kind"]: doc for documents in manifests(options).values() for doc in documents}
    for kind, doc in docs.items():
        if kind not in CRDS:
            validate(doc, K8S_VERSION, strict=True)
    return docs


def test_a_cpu_build_requests_cpus_and_threads_and_no_gpu(options):
    docs = _validated(options)
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "2" and "nvidia.com/gpu" not in {
        **resources["requests"],
        **resources["limits"],
    }
    assert "tolerations" not in pod and "nodeSelector" not in pod
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["OMP_NUM_THREADS"] == "2"


def test_a_gpu_build_requests_a_gpu_on_gpu_nodes(options):
    docs = _validated(dataclasses.replace(options, gpus=1))
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "OMP_NUM_THREADS" not in {e["name"] for e in pod["containers"][0]["env"]}
    assert docs["InferenceService"]["spec"]["predictor"]["triton"]["resources"]["limits"]["nvidia.com/gpu"] == 1


def _built(root: Path, kind: str) -> Path:
    """A stand-in build of `demo` whose model step runs on ``kind`` instances."""
    for step in ("demo", "demo_tokenizer", "demo_model", "demo_postprocess"):
        (root / step / "1").mkdir(parents=True)
        (root / step / "config.pbtxt").write_text(f'name: "{step}"\n')
    (root / "demo_model" / "config.pbtxt").write_text(f'name: "demo_model"\ninstance_group [{{ kind: {kind} }}]\n')
    wired = " ".join(
        f'step {{ model_name: "demo_{s}" model_version: -1 }}' for s in ("tokenizer", "model", "postprocess")
    )
    (root / "demo" / "config.pbtxt").write_text(f'name: "demo" platform: "ensemble" ensemble_scheduling {{ {wired} }}')
    return root


@pytest.mark.parametrize(("kind", "gpus"), [("KIND_CPU", None), ("KIND_GPU", 1)])
def test_manifests_cli_reads_the_device_from_the_build(tmp_path, capsys, kind, gpus):
    repo, out = _built(tmp_path / "repo", kind), tmp_path / "k8s"
    argv = ["manifests", "--name", "demo", "--to", URL, "--repository", str(repo), "--output", str(out)]
    assert main([*argv, "--image", "registry.example.com/tritongen-demo:1", "--image-pull-policy", "Always"]) == 0
    deployment = yaml.safe_load((out / "deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"].get("nvidia.com/gpu") == gpus
    assert (container["image"], container["imagePullPolicy"]) == ("registry.example.com/tritongen-demo:1", "Always")
    assert ("1 GPU(s)" if gpus else "no GPU") in capsys.readouterr().out


def test_manifests_add_the_gateway_sidecar_with_its_secret_only_when_asked(options):
    assert [c["name"] for c in _container_list(manifests(options))] == ["triton"]
    with_gateway = dataclasses.replace(options, gateway=True)
    rendered = manifests(with_gateway)
    for documents in rendered.values():
        for doc in documents:
            if doc["kind"] not in CRDS:
                validate(doc, K8S_VERSION, strict=True)
    triton, gateway = _container_list(rendered)
    assert gateway["image"] == "registry.example/demo-gateway:1"  # beside --image, as package --gateway tags it
    ports = TritonArgs()  # Triton in the same pod: its gRPC port for the catalogue, HTTP for inference
    assert gateway["args"] == [
        "--triton-url",
        f"127.0.0.1:{ports.grpc_port}",
        "--triton-http-url",
        f"127.0.0.1:{ports.http_port}",
    ]
    key = {"name": "TRITONGEN_GATEWAY_KEY", "valueFrom": {"secretKeyRef": {"name": "triton-demo-embed-gateway",
                                                                           "key": "api-key"}}}  # fmt: skip
    assert gateway["env"] == [key] and with_gateway.gateway_secret_name == "triton-demo-embed-gateway"
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/health", "port": "gateway"}
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "gateway"}
    assert gateway["lifecycle"] == triton["lifecycle"]  # endpoints stop routing to both before either stops
    service = rendered["service.yaml"][0]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {**TritonArgs().ports, "gateway": GATEWAY_PORT}


def _container_list(rendered: dict[str, list[dict]]) -> list[dict]:
    return rendered["deployment.yaml"][0]["spec"]["template"]["spec"]["containers"]


def test_manifests_cli_adds_the_gateway_and_names_its_secret_when_asked(tmp_path, capsys):
    out = tmp_path / "k8s"
    assert (
        main(
            [
                "manifests",
                "demo",
                "--to",
                URL,
                "--startup-seconds",
                "300",
                "--gpus",
                "0",
                "--output",
                str(out),
                "--gateway",
            ]
        )
        == 0
    )
    assert "the Secret triton-demo-gateway, key api-key" in capsys.readouterr().out
    deployment = yaml.safe_load((out / "deployment.yaml").read_text())
    assert [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]] == ["triton", "gateway"]
