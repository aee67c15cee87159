"""The tail attribution reads Triton's trace file as Triton 2.51 writes it."""

from __future__ import annotations

import json

import pytest

from tritongen.bench.tail import read_traces, tail_report
from tritongen.errors import BenchError

STEPS = ("e_tokenizer", "e_model", "e_postprocess")


def _entries(trace_id: int, start: int, model_ms: float, batch_key: int) -> list[dict]:
    """One ensemble request as Triton writes it: a model entry, then one entry per timestamp, per trace."""
    ms = 1_000_000
    entries = [{"id": trace_id, "model_name": "e", "model_version": -1}]
    stamps = {"HTTP_RECV_START": start, "REQUEST_START": start + ms // 10}
    at = start + ms // 10
    for n, step in enumerate(STEPS, start=1):
        child = 100_000 + trace_id * 10 + n
        entries.append({"id": child, "model_name": step, "model_version": 1, "parent_id": trace_id})
        compute = int(model_ms * ms) if step == "e_model" else ms
        begin = batch_key if step == "e_model" else at + ms // 2
        child_stamps = {
            "REQUEST_START": at, "QUEUE_START": at, "COMPUTE_START": begin, "COMPUTE_END": begin + compute,
            "REQUEST_END": begin + compute,
        }  # fmt: skip
        entries += [{"id": child, "timestamps": [{"name": k, "ns": v}]} for k, v in child_stamps.items()]
        at = begin + compute
    stamps.update({"REQUEST_END": at, "HTTP_SEND_END": at + ms // 10})
    entries += [{"id": trace_id, "timestamps": [{"name": k, "ns": v}]} for k, v in stamps.items()]
    return entries


def test_the_slowest_requests_are_split_by_step_and_batch(tmp_path):
    entries = []
    for i in range(200):  # 198 fast requests alone in their batch, 2 slow ones sharing one model execution
        slow = i >= 198
        start = i * 100_000_000
        entries += _entries(i + 1, start, 50.0 if slow else 2.0, 10**12 if slow else start + 2_000_000)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(entries)[:-1])  # Triton leaves the array open until it exits
    requests = read_traces(path, "e", STEPS, "e_model")
    assert len(requests) == 200
    report = tail_report(requests, "test")
    assert report.tail == 2 and report.batch == (pytest.approx(1.01), 2.0)
    rows = {name: (median, slowest, share) for name, median, slowest, share in report.rows()}
    assert rows["e_model compute"][:2] == (pytest.approx(2.0), pytest.approx(50.0))
    assert rows["e_tokenizer compute"][:2] == (pytest.approx(1.0), pytest.approx(1.0))
    assert rows["e_model queue"][2] > 0.5  # waiting for the shared execution is most of the excess
    assert "0 of the slowest 2 ran alone" in report.to_markdown()


def test_too_few_traced_requests_and_a_missing_file_are_refused(tmp_path):
    with pytest.raises(BenchError, match="no request traces were written"):
        read_traces(tmp_path / "none.json", "e", STEPS, "e_model", wait_s=0.1)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_entries(1, 0, 2.0, 0)))
    with pytest.raises(BenchError, match="1 complete traced requests; the tail needs at least 100"):
        tail_report(read_traces(path, "e", STEPS, "e_model"), "test")
