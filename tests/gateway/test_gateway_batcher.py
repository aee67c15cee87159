"""The gateway's continuous batching on a scripted Triton: at once when idle, together when busy, errors apart."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tritongen.errors import GatewayError
from tritongen.gateway.batcher import SPREAD_LENGTH, Batcher, cut_calls
from tritongen.gateway.metrics import GatewayMetrics
from tritongen.gateway.models import ModelInfo, TensorType

MODEL = ModelInfo("emb", 8, {"TEXT": TensorType("BYTES", (1,))}, {"EMBEDDING": TensorType("FP32", (2,))}, instances=1)


class Scripted:
    """A Triton that answers each text with [len(text), call number], holds calls while ``gate`` is closed, and
    refuses a call holding the text ``bad`` as Triton refuses a bad input (400)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, model, inputs, outputs):
        texts = list(inputs["TEXT"])
        self.calls.append(texts)
        number = len(self.calls)
        await self.gate.wait()
        if "bad" in texts:
            raise GatewayError(400, f"`{model.name}`: TEXT[{texts.index('bad')}] is bad", code="invalid_input")
        return {"EMBEDDING": np.array([[len(t), number] for t in texts], dtype=np.float32)}


def _run(body):
    return asyncio.run(body())


async def _behind_a_call(batcher: Batcher, triton: Scripted, *requests: list[str], check=None) -> list:
    """``["a"]`` in flight, then ``requests`` (their texts) queued behind it; ``check()`` while they wait; each
    answer (or error), the first call's first."""
    triton.gate.clear()
    first = asyncio.create_task(batcher.submit(MODEL, {"TEXT": ["a"]}, ["EMBEDDING"]))
    await asyncio.sleep(0)  # the first is in flight: the lane is busy
    waiting = [asyncio.create_task(batcher.submit(MODEL, {"TEXT": texts}, ["EMBEDDING"])) for texts in requests]
    await asyncio.sleep(0)
    if check is not None:
        check()
    triton.gate.set()
    return await asyncio.gather(first, *waiting, return_exceptions=True)


def test_a_request_goes_at_once_when_triton_is_idle():
    async def body():
        triton = Scripted()
        batcher = Batcher(triton.send, limit=1)
        answer = await batcher.submit(MODEL, {"TEXT": ["abc"]}, ["EMBEDDING"])
        assert triton.calls == [["abc"]] and answer["EMBEDDING"].tolist() == [[3, 1]]

    _run(body)


def test_requests_that_arrive_while_triton_is_busy_go_together_and_get_their_own_rows_back():
    async def body():
        triton, metrics = Scripted(), GatewayMetrics()
        batcher = Batcher(triton.send, limit=1, metrics=metrics)

        def waiting():
            assert triton.calls == [["a"]] and metrics.render().count(b'te_queue_size{model="emb"} 3.0') == 1

        requests = (["eeeee", "ffffff"], ["ggggggg"], ["hhhhhhhh", "eeeee"])  # one size class: 5 to 8 characters
        answers = await _behind_a_call(batcher, triton, *requests, check=waiting)
        assert triton.calls == [["a"], ["eeeee", "ffffff", "ggggggg", "hhhhhhhh", "eeeee"]]  # one merged call
        assert [a["EMBEDDING"].tolist() for a in answers] == [
            [[1, 1]], [[5, 2], [6, 2]], [[7, 2]], [[8, 2], [5, 2]],
        ]  # fmt: skip
        scrape = metrics.render().decode()
        assert 'tritongen_gateway_coalesced_requests_sum{model="emb"} 4.0' in scrape  # 1 + 3 requests
        assert 'te_batch_next_size_sum{model="emb"} 6.0' in scrape and 'te_queue_size{model="emb"} 0.0' in scrape

    _run(body)


def test_only_requests_of_one_size_go_together_and_the_oldest_goes_first():
    """A call's rows are padded to its longest: a short text waits for the next call rather than pay a long one's."""

    async def body():
        triton = Scripted()
        batcher = Batcher(triton.send, limit=1)
        texts = ("x" * 100, "short", "y" * 120, "tiny!")
        answers = await _behind_a_call(batcher, triton, *([text] for text in texts))
        assert triton.calls == [["a"], ["x" * 100, "y" * 120], ["short", "tiny!"]]
        assert [a["EMBEDDING"][0, 0] for a in answers[1:]] == [100, 5, 120, 5]

    _run(body)


def test_a_merged_call_holds_at_most_max_batch_size_rows():
    async def body():
        triton = Scripted()
        await _behind_a_call(Batcher(triton.send, limit=1), triton, *(["x"] * 3 for _ in range(4)))
        assert [len(call) for call in triton.calls] == [1, 6, 6]  # 3 + 3 fit in 8 rows, a third would not

    _run(body)


def test_a_bad_request_in_a_merged_call_fails_alone_and_its_neighbours_are_answered():
    async def body():
        triton = Scripted()
        results = await _behind_a_call(Batcher(triton.send, limit=1), triton, ["ok!"], ["bad"], ["fin", "too"])
        assert isinstance(results[2], GatewayError) and "TEXT[0] is bad" in results[2].message
        assert results[1]["EMBEDDING"].tolist()[0][0] == 3 and results[3]["EMBEDDING"][:, 0].tolist() == [3, 3]
        assert triton.calls[1] == ["ok!", "bad", "fin", "too"] and ["bad"] in triton.calls[2:]

    _run(body)


def test_another_failure_of_a_merged_call_is_every_merged_requests():
    async def body():
        failures = []

        async def down(model, inputs, outputs):
            failures.append(list(inputs["TEXT"]))
            if len(failures) == 1:
                await asyncio.sleep(0.01)
                return {"EMBEDDING": np.zeros((1, 2), np.float32)}
            raise GatewayError(503, "the Triton server is not reachable", code="unavailable")

        batcher = Batcher(down, limit=1)
        first = asyncio.create_task(batcher.submit(MODEL, {"TEXT": ["a"]}, ["EMBEDDING"]))
        await asyncio.sleep(0)
        rest = [asyncio.create_task(batcher.submit(MODEL, {"TEXT": [t]}, ["EMBEDDING"])) for t in "bc"]
        results = await asyncio.gather(first, *rest, return_exceptions=True)
        assert not isinstance(results[0], Exception)
        assert all(isinstance(r, GatewayError) and r.status == 503 for r in results[1:])
        assert failures == [["a"], ["b", "c"]]  # one call for both, not retried one by one

    _run(body)


@pytest.mark.parametrize(("limit", "rows"), [(0, 1), (1, 8)], ids=["batching-off", "a-full-batch"])
def test_a_request_is_its_own_call_when_batching_is_off_or_it_fills_a_batch(limit, rows):
    async def body():
        triton = Scripted()
        batcher = Batcher(triton.send, limit=limit)
        triton.gate.clear()
        first = asyncio.create_task(batcher.submit(MODEL, {"TEXT": ["a"] * rows}, ["EMBEDDING"]))
        second = asyncio.create_task(batcher.submit(MODEL, {"TEXT": ["b"] * rows}, ["EMBEDDING"]))
        await asyncio.sleep(0)
        assert len(triton.calls) == 2  # both sent at once, neither waits for the other
        triton.gate.set()
        await asyncio.gather(first, second)

    _run(body)


def test_the_default_limit_is_the_ensembles_steps_instances_and_one_more():
    assert Batcher(Scripted().send).limit(MODEL) == 2


# -- a big call spread over the instances, and chunked by the batch size -------------------------------------


def test_a_big_call_is_cut_into_one_call_per_instance_with_its_rows_sorted_and_lengths_balanced():
    texts = ["x" * n for n in (3000, 10, 2000, 500, 1500, 40)]  # 7050 characters in all
    calls = cut_calls([(list(range(6)), {"TEXT": texts, "PROMPT_NAME": list("abcdef")})], 2, 0)
    assert [rows for rows, _ in calls] == [[1, 5, 3, 4, 2], [0]]  # by length; runs of about equal length
    assert [len(t) for t in calls[0][1]["TEXT"]] == [10, 40, 500, 1500, 2000]
    assert calls[0][1]["PROMPT_NAME"] == list("bfdec") and calls[1][1]["PROMPT_NAME"] == ["a"]  # every input cut alike
    indices, inputs = calls[0]
    assert all(inputs["TEXT"][i] == texts[row] for i, row in enumerate(indices))


def test_a_call_is_not_spread_when_small_alone_or_into_one_part():
    big = [(list(range(4)), {"TEXT": ["y" * SPREAD_LENGTH] * 4})]
    small, alone = [(list(range(4)), {"TEXT": ["short"] * 4})], [([0], {"TEXT": ["y" * 2 * SPREAD_LENGTH]})]
    assert cut_calls(small, 2, 0) == small and cut_calls(alone, 2, 0) == alone and cut_calls(big, 1, 0) == big
    assert len(cut_calls(big, 2, 0)) == 2
    ids = [(list(range(4)), {"TOKEN_IDS": [[1] * SPREAD_LENGTH] * 4})]  # token ids count as the length
    assert [rows for rows, _ in cut_calls(ids, 2, 0)] == [[0, 1], [2, 3]]


def test_no_call_holds_more_rows_than_the_ensembles_batch_after_spreading():
    texts = [str(i) * (1 + i % 3) for i in range(10)]  # short: one run, in the request's order
    assert [rows for rows, _ in cut_calls([(list(range(10)), {"TEXT": texts})], 2, 4)] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9],
    ]  # fmt: skip
    big = [(list(range(6)), {"TEXT": ["z" * SPREAD_LENGTH] * 6})]
    assert [rows for rows, _ in cut_calls(big, 2, 2)] == [[0, 1], [2], [3, 4], [5]]  # two runs of 3, chunked by 2


def test_a_requests_figures_are_recorded_after_its_task_yields_and_every_scrape_has_them():
    def count(metrics: GatewayMetrics) -> float:
        value = metrics.registry.get_sample_value(
            "te_request_count_total", {"model": "emb", "route": "/embed", "method": "single"}
        )
        return value or 0.0

    async def main() -> None:
        metrics = GatewayMetrics()
        metrics.answered("emb", "/embed", 1, 0.004)
        metrics.answered("emb", "/embed", 1, 0.005)
        assert count(metrics) == 0  # not on the request's path: its answer is written first
        await asyncio.sleep(0)
        assert count(metrics) == 2
        metrics.answered("emb", "/embed", 1, 0.006)
        assert b'te_request_count_total{method="single",model="emb",route="/embed"} 3.0' in metrics.render()

    asyncio.run(main())
    metrics = GatewayMetrics()  # off the event loop, at once
    metrics.answered("emb", "/embed", 1, 0.004)
    assert count(metrics) == 1
