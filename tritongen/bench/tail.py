"""Where the slowest requests spend their time: per-request timestamps from Triton's trace API.

The statistics API gives averages per step; a p99 is made of a few requests, so the bench traces every request
of one load run (``--trace-config triton,file=...`` at start with the level OFF, turned to TIMESTAMPS through
the trace API for the run only) and splits each ensemble request into:

* ``http``: receiving the request and sending the answer (Triton's HTTP frontend, JSON in and out);
* per step, ``queue`` (waiting for an instance or a batch) and ``compute`` (the execution: for a Python step this
  includes the round trip to its stub process and the stub's wait for a core; the model step's padding to its
  batch's longest text is inside its compute too);
* ``between steps``: what the ensemble scheduler spends handing tensors from one step to the next;

and the model step's batch size (requests that ran in the same execution share its compute timestamps). The
report sets the slowest 1% of requests beside the median request, component by component.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tritongen.errors import BenchError

if TYPE_CHECKING:
    from tritongen.serve.server import TritonServer

__all__ = ["RequestTrace", "TailReport", "read_traces", "tail_report", "trace_arguments", "tracing"]

NS_PER_MS = 1e6


def trace_arguments(path: Path) -> list[str]:
    """``tritonserver`` arguments that prepare tracing into ``path`` and leave it off until :func:`tracing`."""
    return [
        "--trace-config", f"triton,file={path}", "--trace-config", "triton,log-frequency=0",
        "--trace-config", "level=OFF", "--trace-config", "rate=1",
    ]  # fmt: skip


@contextlib.contextmanager
def tracing(server: TritonServer) -> Iterator[None]:
    """Every request traced (TIMESTAMPS, rate 1) inside the block; off again after it (which writes the file).

    Raises :class:`~tritongen.errors.ServerCrashedError` (the server killed) where tritonserver crashed meanwhile.
    """
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60.0)
    try:
        with server.crash_watch("it traced every request"):
            client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
            try:
                yield
            finally:
                client.update_trace_settings(settings={"trace_level": ["OFF"]})
    finally:
        client.close()


@dataclass(frozen=True)
class RequestTrace:
    """One ensemble request: its components in ms (in the order they happen) and its model-step batch size."""

    total_ms: float
    components: dict[str, float]
    batch: int


def _merged(entries: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Triton writes a trace as several entries with one id: its model, then one entry per timestamp."""
    traces: dict[int, dict[str, Any]] = defaultdict(lambda: {"ts": {}})
    for entry in entries:
        trace = traces[entry["id"]]
        for key, value in entry.items():
            if key == "timestamps":
                trace["ts"].update({stamp["name"]: stamp["ns"] for stamp in value})
            elif key != "id":
                trace[key] = value
    return traces


def _settled(path: Path, timeout_s: float = 30.0) -> str:
    """The trace file's text once Triton has written it: it writes on the switch to OFF, in the background."""
    deadline, size = time.monotonic() + timeout_s, -1
    while time.monotonic() < deadline:
        now = path.stat().st_size if path.is_file() else -1
        if now > 0 and now == size:
            break
        size = now
        time.sleep(0.5)
    return path.read_text().strip() if path.is_file() else ""


def _load(path: Path, wait_s: float) -> list[dict[str, Any]]:
    """The trace file's entries. Triton 2.51 leaves the array unclosed until it exits, and appends arrays."""
    text = _settled(path, wait_s)
    if not text:
        raise BenchError("no request traces were written to {path}: the server's trace API is not available", path=path)
    text = text.replace("][", ",")
    try:
        return json.loads(text if text.endswith("]") else text + "]")
    except json.JSONDecodeError as exc:
        raise BenchError(f"the trace file {{path}} is not Triton's trace JSON: {exc}", path=path) from None


def _span(ts: Mapping[str, int], start: str, end: str) -> float:
    return (ts[end] - ts[start]) / NS_PER_MS


def read_traces(
    path: Path, ensemble: str, steps: Sequence[str], model_step: str, *, wait_s: float = 30.0
) -> list[RequestTrace]:
    """Every complete request to ``ensemble`` in the trace file (waited for up to ``wait_s``), ``steps`` split out.

    ``model_step`` (one of ``steps``) is the step whose executions give each request's batch size.
    """
    traces = _merged(_load(path, wait_s))
    children: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for trace in traces.values():
        if "parent_id" in trace:
            children[trace["parent_id"]][trace.get("model_name", "")] = trace
    batches: dict[tuple[int, int], int] = defaultdict(int)
    for child in children.values():
        ts = child.get(model_step, {}).get("ts", {})
        if "COMPUTE_START" in ts and "COMPUTE_END" in ts:
            batches[(ts["COMPUTE_START"], ts["COMPUTE_END"])] += 1
    requests = []
    for trace_id, trace in traces.items():
        step_traces = children.get(trace_id, {})
        ts = trace["ts"]
        needed = ("HTTP_RECV_START", "REQUEST_START", "REQUEST_END", "HTTP_SEND_END")
        if trace.get("model_name") != ensemble or any(k not in ts for k in needed):
            continue
        if any("COMPUTE_END" not in step_traces.get(s, {}).get("ts", {}) for s in steps):
            continue  # a request cut by the start or end of tracing
        requests.append(_request(ts, [(s, step_traces[s]["ts"]) for s in steps], batches, model_step))
    return requests


def _request(
    ts: Mapping[str, int], steps: Sequence[tuple[str, Mapping[str, int]]], batches: Mapping, model_step: str
) -> RequestTrace:
    components = {"http": _span(ts, "HTTP_RECV_START", "REQUEST_START") + _span(ts, "REQUEST_END", "HTTP_SEND_END")}
    inside = 0.0
    batch = 1
    for name, step in steps:
        components[f"{name} queue"] = _span(step, "QUEUE_START", "COMPUTE_START")
        components[f"{name} compute"] = _span(step, "COMPUTE_START", "COMPUTE_END")
        inside += _span(step, "REQUEST_START", "REQUEST_END")
        if name == model_step:
            batch = batches.get((step["COMPUTE_START"], step["COMPUTE_END"]), 1)
    components["between steps"] = _span(ts, "REQUEST_START", "REQUEST_END") - inside
    return RequestTrace(_span(ts, "HTTP_RECV_START", "HTTP_SEND_END"), components, batch)


@dataclass(frozen=True)
class TailReport:
    """The median request against the mean of the slowest ``fraction`` of requests, component by component."""

    label: str
    requests: int
    tail: int
    median: dict[str, float]
    slowest: dict[str, float]
    batch: tuple[float, float]  # the model step's mean batch size: all requests, the slowest
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[tuple[str, float, float, float]]:
        """(component, median ms, slowest mean ms, share of the slowest requests' excess over the median)."""
        excess = sum(self.slowest.values()) - sum(self.median.values())
        return (
            [
                (name, self.median[name], self.slowest[name], (self.slowest[name] - self.median[name]) / excess)
                for name in self.median
            ]
            if excess > 0
            else [(name, self.median[name], self.slowest[name], 0.0) for name in self.median]
        )

    def to_markdown(self) -> str:
        """The table, for the bench summary and the benchmarks doc."""
        lines = [
            f"### Where the slowest requests wait: {self.label}",
            "",
            f"{self.requests} traced requests; the slowest {self.tail} (1%) against the median request. "
            f"The model step's mean batch: {self.batch[0]:.2f} requests, {self.batch[1]:.2f} for the slowest.",
            "",
            "| component | median request ms | slowest 1% mean ms | share of their excess |",
            "|---|---:|---:|---:|",
            *(f"| {n} | {m:.2f} | {s:.2f} | {share:.0%} |" for n, m, s, share in self.rows()),
            f"| **in the server** | {sum(self.median.values()):.2f} | {sum(self.slowest.values()):.2f} | |",
        ]
        return "\n".join(lines + [f"- {note}" for note in self.notes]) + "\n"


def tail_report(requests: Sequence[RequestTrace], label: str, fraction: float = 0.01) -> TailReport:
    """Set the slowest ``fraction`` of ``requests`` beside the median one; each component's median and mean."""
    if len(requests) < 100:
        raise BenchError(f"{len(requests)} complete traced requests; the tail needs at least 100 (run longer)")
    ordered = sorted(requests, key=lambda r: r.total_ms)
    tail = ordered[-max(1, round(len(ordered) * fraction)) :]
    names = list(ordered[0].components)
    median = {n: float(np.median([r.components[n] for r in ordered])) for n in names}
    slowest = {n: float(np.mean([r.components[n] for r in tail])) for n in names}
    batch = (float(np.mean([r.batch for r in ordered])), float(np.mean([r.batch for r in tail])))
    alone = sum(r.batch == 1 for r in tail)
    notes = [
        f"{alone} of the slowest {len(tail)} ran alone in their model-step execution: their compute is their own "
        "length, not a batch-mate's padding.",
        "A Python step's compute includes the round trip to its stub process and the stub's wait for a core.",
    ]
    return TailReport(label, len(ordered), len(tail), median, slowest, batch, notes)
