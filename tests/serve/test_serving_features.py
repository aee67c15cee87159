"""Every config feature is accepted by the real server; batching and the cache visibly work."""

from __future__ import annotations

import concurrent.futures as cf

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritongen.buildspec import (
    DynamicBatchingSettings,
    InstanceGroup,
    QueuePolicy,
    VersionPolicySettings,
)
from tritongen.runtimes.onnxruntime import OnnxRuntimeSettings
from tritongen.serve.client import infer
from tritongen.serve.stats import model_stats, stats_delta

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(builds, shared_server, tiny_factory):
    checkpoint = tiny_factory("bert", "classification")
    featured = builds(
        checkpoint,
        "feat",
        versions=2,  # `latest 2` must serve both
        max_batch_size=32,
        buckets=(16, 32),
        dynamic_batching=DynamicBatchingSettings(
            max_queue_delay_microseconds=1000,
            preferred_batch_size=(4, 8),
            preserve_ordering=True,
            queue_policy=QueuePolicy(max_queue_size=128, timeout_action="REJECT"),
        ),
        model_instances=InstanceGroup(count=2),
        tokenizer_instances=InstanceGroup(count=1),
        version_policy=VersionPolicySettings(policy="latest", latest=2),
        onnxruntime=OnnxRuntimeSettings(intra_op_threads=1, inter_op_threads=1, graph_optimization_level=2),
        response_cache=True,  # the shared server runs with a response cache
    )
    batched = builds(
        checkpoint,
        "batched",
        # The batcher waits (up to 2 s) until 8 requests are queued: under 16 concurrent clients batches form
        # however slow a busy machine makes each request, so the assertion below cannot depend on timing.
        dynamic_batching=DynamicBatchingSettings(max_queue_delay_microseconds=2_000_000, preferred_batch_size=(8,)),
        padding="buckets",  # requests of one bucket have one shape: Triton batches only those
    )
    return shared_server.serve(featured, batched)


def test_server_loads_every_configured_feature(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for name in ("feat", "feat_tokenizer", "feat_postprocess", "batched"):
        assert client.is_model_ready(name)
    assert client.is_model_ready("feat_model", "1") and client.is_model_ready("feat_model", "2")
    model = client.get_model_config("feat_model", as_json=True)["config"]
    assert model["max_batch_size"] == 32
    assert model["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert model["dynamic_batching"]["preserve_ordering"] is True
    assert model["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 128
    assert model["instance_group"][0]["count"] == 2
    assert model["version_policy"]["latest"]["num_versions"] == 2
    assert [w["name"] for w in model["model_warmup"]] == ["bucket_16", "bucket_32", "bucket_64"]
    assert model["parameters"]["intra_op_thread_count"]["string_value"] == "1"
    assert model["optimization"]["graph"]["level"] == 2
    ensemble = client.get_model_config("feat", as_json=True)["config"]
    assert ensemble["response_cache"]["enable"] is True


def test_repeated_text_is_a_cache_hit(server):
    before = model_stats(server.http_url, "feat").get("feat")
    first = infer(["the same text, twice"], name="feat", url=server.grpc_url)
    second = infer(["the same text, twice"], name="feat", url=server.grpc_url)
    delta = stats_delta(model_stats(server.http_url, "feat")["feat"], before)
    assert first == second
    assert delta.cache_hit_count == 1
    assert delta.cache_miss_count == 1


def test_model_step_batches_requests_under_concurrency_16(server):
    before = model_stats(server.http_url, "batched_model").get("batched_model")

    def client_loop(worker: int) -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for i in range(12):
            tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            text = f"worker {worker} request {i} with a few words"
            tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=object))
            client.infer("batched", [tensor])

    with cf.ThreadPoolExecutor(16) as pool:
        list(pool.map(client_loop, range(16)))
    delta = stats_delta(model_stats(server.http_url, "batched_model")["batched_model"], before)
    assert delta.inference_count == 16 * 12
    assert delta.average_batch_size > 4, f"average batch size {delta.average_batch_size:.2f}"
