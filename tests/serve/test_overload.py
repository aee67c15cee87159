"""A burst far above capacity against the same tiny model with and without a queue limit, over both protocols."""

from __future__ import annotations

import pytest

from tritongen.bench.overload import HEADER, run_burst
from tritongen.buildspec import DynamicBatchingSettings, QueuePolicy

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tiny_factory, builds, shared_server):
    """The same tiny model twice: its model step's queue unbounded, and bounded at 4 requests.

    The bounded step's batcher holds each batch up to half a second for more requests, so the queue fills past 4
    whatever the speed of the CPU or of the steps before it: the burst is certain to find it full.
    """
    checkpoint = tiny_factory("bert")
    unbounded = DynamicBatchingSettings(queue_policy=QueuePolicy(max_queue_size=0))
    limit = DynamicBatchingSettings(
        max_queue_delay_microseconds=500_000,
        queue_policy=QueuePolicy(max_queue_size=4, default_timeout_microseconds=2_000_000),
    )
    return shared_server.serve(
        builds(checkpoint, "free", dynamic_batching=unbounded), builds(checkpoint, "limited", dynamic_batching=limit)
    )


def test_a_queue_limit_sheds_a_burst_with_unavailable_and_503_and_nothing_else(served):
    results = [
        run_burst("free", served.grpc_url, protocol="grpc", concurrency=128, seconds=4),
        run_burst("limited", served.grpc_url, protocol="grpc", concurrency=128, seconds=4),
        run_burst("limited", served.http_url, protocol="http", concurrency=128, seconds=4),
    ]
    print("\n" + HEADER + "\n" + "\n".join(r.row() for r in results))
    free, limited_grpc, limited_http = results
    assert free.errors == {} and free.rejected == 0 and free.accepted > 0
    for limited in (limited_grpc, limited_http):
        assert limited.errors == {}, limited
        assert limited.rejected > 0 and limited.accepted > 0, limited
