"""What operators see of the gateway: its Prometheus metrics through a real scrape, its traces through a real receiver.

One ``tritongen serve`` of the tiny embedder that traces every request (``--otlp-endpoint``) and one gateway in front
of it that does too; a real OTLP/HTTP receiver (``tests/otlp_receiver.py``) decodes what both exporters post, and
Debian's Prometheus scrapes the gateway's ``/metrics`` (skipped where it is not installed).
"""

from __future__ import annotations

import json
import math
import shutil
import time
import urllib.request

import pytest

from tests.deployment import ServeProcess, prometheus, promql
from tests.gateway.test_gateway import _gateway
from tests.otlp_receiver import otlp_receiver
from tritongen.deploy.dashboard import gateway_panels
from tritongen.deploy.package import prometheus_config

pytestmark = pytest.mark.e2e

EMB = "bert_emb"  # the tiny embedder, as tests/gateway/test_gateway.py builds it
TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced(tiny_factory, builds, tmp_path_factory):
    """The receiver, and a gateway (its URL) in front of a serve, both sending their spans to it."""
    root = tmp_path_factory.mktemp("telemetry")
    repo = builds.repository(builds(tiny_factory("bert", "embedding"), EMB), into=root / "model_repository")
    with otlp_receiver() as receiver:
        otlp = ("--otlp-endpoint", receiver.url)
        with ServeProcess(repo, root / "serve.log", grace_period=3, extra_args=otlp) as serve:
            said = serve.output()  # where the spans go, and the local Triton's tracing race
            assert f"Every request is traced to {receiver.url}" in said and "can crash while it traces" in said, said
            triton = ("--triton-url", serve.grpc_url, "--triton-http-url", serve.http_url)
            common = ("--repository", str(repo), "--model", EMB, *triton, *otlp)
            with (
                _gateway(root / "gateway.log", *common) as (url, _),
                _gateway(root / "ensemble.log", *common, "--through-ensemble") as (through, _),
            ):
                yield receiver, {"direct": url, "ensemble": through}


def _post(url: str, path: str, body: object, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(
        f"http://{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return int(response.status)


@pytest.mark.parametrize("path", ["direct", "ensemble"])
def test_one_trace_holds_the_gateways_request_its_triton_call_and_tritons_own_spans(traced, path):
    """The client's ``traceparent`` is the parent of the gateway's request span; its call's span is the parent of
    Triton's, which Triton posts as OTLP JSON where the gateway posts protobuf.

    By default the gateway calls the embedder's model step itself (its Python steps' work done in the gateway);
    ``--through-ensemble``, the ensemble, whose steps Triton traces under it.
    """
    receiver, urls = traced
    trace = f"{TRACE[:-1]}{'1' if path == 'direct' else '2'}"
    assert _post(urls[path], "/embed", {"inputs": ["a traced text"]}, {"traceparent": f"00-{trace}-{PARENT}-01"}) == 200

    steps = {EMB, f"{EMB}_tokenizer", f"{EMB}_model", f"{EMB}_postprocess"} if path == "ensemble" else {f"{EMB}_model"}
    called = EMB if path == "ensemble" else f"{EMB}_model"

    def complete(spans):
        names = {s.name for s in spans if s.trace_id == trace and s.service == "triton-inference-server"}
        return steps | {"InferRequest"} <= names and any(s.trace_id == trace and s.name == "POST /embed" for s in spans)

    spans = [s for s in receiver.wait_for(complete) if s.trace_id == trace]
    (request,) = [s for s in spans if s.name == "POST /embed"]
    assert request.parent_span_id == PARENT and request.service == "tritongen-gateway" and request.kind == 2  # SERVER
    (call,) = [s for s in spans if s.name == f"triton infer {called}"]
    assert call.parent_span_id == request.span_id and call.kind == 3  # CLIENT
    triton = [s for s in spans if s.service == "triton-inference-server"]
    # Triton's request (its HTTP frontend), under the call; the model it ran under it; an ensemble's steps under it.
    (served,) = [s for s in triton if s.name == "InferRequest"]
    (ran,) = [s for s in triton if s.name == called]
    assert served.parent_span_id == call.span_id and ran.parent_span_id == served.span_id
    assert all(s.parent_span_id == ran.span_id for s in triton if s.name in steps - {called}), [
        (s.name, s.span_id, s.parent_span_id) for s in triton
    ]
    assert {s.name for s in triton} - {"compute"} == steps | {"InferRequest"}  # no step the call did not run
    assert receiver.encodings == {"protobuf", "json"}


def test_a_request_without_traceparent_starts_its_own_trace(traced):
    receiver, urls = traced
    url = urls["direct"]
    before = {s.trace_id for s in receiver.spans}
    assert _post(url, "/v1/embeddings", {"input": "no parent here", "model": EMB}) == 200
    spans = receiver.wait_for(lambda s: any(x.name == "POST /v1/embeddings" and x.trace_id not in before for x in s))
    (request,) = [s for s in spans if s.name == "POST /v1/embeddings" and s.trace_id not in before]
    assert request.parent_span_id == ""


def test_metrics_carry_teis_names_by_model_and_route(traced):
    url = traced[1]["direct"]
    for _ in range(3):
        assert _post(url, "/embed", {"inputs": ["one", "two"]}) == 200
    with urllib.request.urlopen(f"http://{url}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    assert f'te_request_count_total{{method="batch",model="{EMB}",route="/embed"}}' in text
    assert f'te_request_success_total{{method="batch",model="{EMB}",route="/embed"}}' in text
    for name in ("te_request_duration", "te_request_inference_duration", "te_request_queue_duration",
                 "te_request_input_length", "te_batch_next_size", "tritongen_gateway_coalesced_requests"):  # fmt: skip
        assert f"{name}_count{{" in text, name
    assert "te_queue_size{" in text


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus is not installed (apt-get install prometheus)"
)
def test_prometheus_scrapes_the_gateways_request_count_and_failures(traced, tmp_path):
    url = traced[1]["direct"]
    config = prometheus_config([], interval_s=1, gateways=[url])
    queries = [(panel.title, expr) for panel in gateway_panels(EMB) for expr, _ in panel.targets]
    with prometheus(tmp_path, config) as prom:
        deadline = time.monotonic() + 90
        while True:
            _post(url, "/embed", {"inputs": "scraped"})
            try:
                _post(url, "/embed", {"inputs": "x", "normalize": False})  # a normalising model: TEI's 422
            except urllib.error.HTTPError as exc:
                assert exc.code == 422
            count = promql(prom, f'sum(te_request_count_total{{job="gateway",model="{EMB}",route="/embed"}})')
            failed = promql(prom, f'sum(te_request_failure_total{{job="gateway",err="validation",model="{EMB}"}})')
            # every gateway panel of the packaged dashboard has data
            empty = [title for title, expr in queries if not [r for r in promql(prom, expr) if _finite(r)]]
            if count and failed and float(count[0]["value"][1]) >= 2 and float(failed[0]["value"][1]) >= 1:
                if not empty:
                    break
            assert time.monotonic() < deadline, (count, failed, empty)
            time.sleep(1)


def _finite(result: dict) -> bool:
    return math.isfinite(float(result["value"][1]))
