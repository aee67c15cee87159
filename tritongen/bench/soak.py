"""Soak a served ensemble: mixed traffic for minutes, errors by kind, latency and memory per interval.

Traffic is a fixed rotation of request kinds (short, long, empty, non-ASCII, invalid UTF-8, batched and
malformed requests) sent by ``concurrency`` threads, each with its own gRPC client. Every answer is sorted:

- ``ok``: answered, for a kind that should be answered;
- ``refused``: a client error (gRPC ``INVALID_ARGUMENT``) for a kind that should be refused (invalid UTF-8,
  malformed). An empty text may be either answered or refused, depending on the task;
- anything else is an error, counted by kind and cause (a server error, an unavailable server, a good
  request refused, a bad request answered).

Each interval (a minute by default) records the requests, outcomes, p50/p99 latency of answered requests and
the resident memory of ``tritonserver`` and of each Python step's stub processes (summed per model), read
from ``/proc``. A process whose memory grows by more than :class:`LeakRule`'s bounds over the second half of
the soak (from its middle interval, never before warm-up, to the last) is flagged as a leak.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.contract import carried_by_text_requests
from tritongen.errors import ServerError
from tritongen.serve.supervisor import stubs_of

__all__ = ["KINDS", "LeakRule", "SoakInterval", "SoakReport", "SoakSettings", "process_memory", "run_soak"]

_LONG = " ".join(["The quick brown fox jumps over the lazy dog near the riverbank at dawn."] * 40)
_NON_ASCII = "Zoë ate crème brûlée in São Paulo 🎉, 東京の学生 and Москва!"

# kind -> (texts per request, what to send, expected outcome: "ok", "refused" or "either")
KINDS: dict[str, tuple[int, bytes | str, str]] = {
    "short": (1, "I love this movie", "ok"),
    "long": (1, _LONG, "ok"),
    "empty": (1, "", "either"),
    "non_ascii": (1, _NON_ASCII, "ok"),
    "invalid_utf8": (1, b"caf\xe9 \xff\xfe broken", "refused"),
    "batched": (4, "Several texts in one request, each its own row.", "ok"),
    "malformed": (1, "an input the ensemble does not declare", "refused"),
}


@dataclass
class SoakInterval:
    """What one interval saw."""

    index: int
    seconds: float
    requests: int
    outcomes: dict[str, int]
    errors: dict[str, int]
    p50_ms: float | None
    p99_ms: float | None
    memory_mib: dict[str, float]


@dataclass
class SoakReport:
    """The whole soak: intervals, totals and the leak verdict."""

    name: str
    concurrency: int
    intervals: list[SoakInterval] = field(default_factory=list)
    leaks: dict[str, str] = field(default_factory=dict)
    leak_bound: str = ""

    @property
    def totals(self) -> Counter[str]:
        """Outcome counts over the whole soak."""
        return _summed(interval.outcomes for interval in self.intervals)

    @property
    def errors(self) -> Counter[str]:
        """Error counts by kind and cause over the whole soak."""
        return _summed(interval.errors for interval in self.intervals)

    def to_markdown(self) -> str:
        """A table per interval, then totals, errors and the leak verdict."""
        processes = sorted({p for i in self.intervals for p in i.memory_mib})
        head = ["interval", "requests", "ok", "refused", "errors", "p50 ms", "p99 ms"] + [f"{p} MiB" for p in processes]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for i in self.intervals:
            cells = [
                str(i.index), str(i.requests), str(i.outcomes.get("ok", 0)), str(i.outcomes.get("refused", 0)),
                str(sum(i.errors.values())), _fmt(i.p50_ms), _fmt(i.p99_ms),
            ] + [_fmt(i.memory_mib.get(p)) for p in processes]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
        totals = self.totals
        lines += [
            "",
            f"{sum(totals.values())} requests: {totals.get('ok', 0)} ok, {totals.get('refused', 0)} refused as "
            f"expected, {totals.get('error', 0)} errors ({dict(self.errors) or 'none'}).",
            f"Leaks ({self.leak_bound}): {self.leaks or 'none'}.",
        ]
        return "\n".join(lines) + "\n"


def _summed(counts: Iterable[dict[str, int]]) -> Counter[str]:
    """The counts added up key by key (``Counter.update``: a zero count stays, where ``+`` would drop it)."""
    total: Counter[str] = Counter()
    for count in counts:
        total.update(count)
    return total


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _inputs(module: Any, names: list[str], kind: str) -> list[Any]:
    rows, text, _ = KINDS[kind]
    if kind == "malformed":
        names = [*names, "UNDECLARED"]
    value = text if isinstance(text, bytes) else text.encode("utf-8")
    tensors = []
    for name in names:
        array = np.array([value] * rows, dtype=object).reshape(rows, 1)
        tensor = module.InferInput(name, list(array.shape), "BYTES")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def _classify(kind: str, error: Exception | None) -> tuple[str, str | None]:
    """``(outcome, error cause)`` of one answer."""
    expected = KINDS[kind][2]
    if error is None:
        return ("ok", None) if expected != "refused" else ("error", f"{kind}: bad request answered")
    status = getattr(error, "status", lambda: None)()
    if status == "StatusCode.INVALID_ARGUMENT" and expected != "ok":
        return "refused", None
    cause = str(status or type(error).__name__).replace("StatusCode.", "")
    return "error", f"{kind}: {cause}"


def _read_proc(pid: int) -> tuple[list[str], int, float] | None:
    """``(cmdline, parent pid, resident MiB)`` of a process, or None once it is gone."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields.get("VmRSS", "0 kB").split()[0])
    return cmdline, int(fields["PPid"]), rss_kib / 1024


def process_memory(grpc_port: int) -> dict[str, float]:
    """Resident MiB of the tritonserver serving ``grpc_port`` and of its stubs, summed per model."""
    table = {pid: info for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if (info := _read_proc(pid))}
    servers = [
        pid for pid, (cmd, _, _) in table.items()
        if cmd and Path(cmd[0]).name == "tritonserver" and f"--grpc-port={grpc_port}" in cmd
    ]  # fmt: skip
    if not servers:
        return {}
    memory = {"tritonserver": table[servers[0]][2]}
    for stub in stubs_of(servers[0]).values():
        if stub.pid in table:
            memory[stub.model] = memory.get(stub.model, 0.0) + table[stub.pid][2]
    return memory


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


@contextlib.contextmanager
def _traffic(
    url: str, name: str, names: list[str], concurrency: int, record: Callable[[str, float, Exception | None], None]
) -> Iterator[None]:
    import tritonclient.grpc as module

    stop = threading.Event()
    kinds = list(KINDS)

    def worker(offset: int) -> None:
        client = module.InferenceServerClient(url)
        try:
            count = offset
            while not stop.is_set():
                kind = kinds[count % len(kinds)]
                count += 1
                started = time.perf_counter()
                error: Exception | None = None
                try:
                    client.infer(name, _inputs(module, names, kind), client_timeout=60)
                except Exception as exc:  # every failure is counted, by kind
                    error = exc
                record(kind, time.perf_counter() - started, error)
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=90)


def _ensemble_inputs(url: str, name: str) -> list[str]:
    import tritonclient.grpc as module

    client = module.InferenceServerClient(url)
    try:
        config = client.get_model_config(name, as_json=True)["config"]
    except Exception as exc:
        raise ServerError(f"cannot read the config of `{name}` at {url}: {exc}") from None
    finally:
        client.close()
    return [t["name"] for t in config["input"] if carried_by_text_requests(t["name"], bool(t.get("optional")))]


@dataclass(frozen=True)
class LeakRule:
    """When a process's memory growth is a leak: over the second half of the soak, past warm-up, above both bounds.

    Only the second half counts (and never the first ``warmup_intervals``): ONNX Runtime's arena grows until it
    has met the largest batch shape, which can take minutes of mixed traffic, and then stays flat. A leak keeps
    growing: by more than ``bound_mib`` and more than ``bound_ratio`` of where it started.
    """

    warmup_intervals: int = 1
    bound_mib: float = 64.0
    bound_ratio: float = 0.2

    def describe(self) -> str:
        """The rule in words, for the report."""
        return f"growth over the second half above {self.bound_mib:.0f} MiB and {self.bound_ratio:.0%}"

    def leaks(self, intervals: list[SoakInterval]) -> dict[str, str]:
        """The processes that leaked over ``intervals``, with their growth (``"100 -> 300 MiB"``)."""
        steady = intervals[min(max(self.warmup_intervals, len(intervals) // 2), len(intervals) - 1) :]
        if len(steady) < 2:
            return {}
        first, last = steady[0].memory_mib, steady[-1].memory_mib
        leaks = {}
        for process, start in first.items():
            end = last.get(process, start)
            if end - start > max(self.bound_mib, start * self.bound_ratio):
                leaks[process] = f"{start:.0f} -> {end:.0f} MiB"
        return leaks


@dataclass(frozen=True)
class SoakSettings:
    """How long and how hard to soak: ``minutes`` of ``concurrency`` clients, a report every ``interval_s``."""

    minutes: float = 10.0
    concurrency: int = 32
    interval_s: float = 60.0
    leak: LeakRule = LeakRule()


class _Tally:
    """What the traffic threads saw since the last interval, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.latencies: list[float] = []

    def record(self, kind: str, seconds: float, error: Exception | None) -> None:
        """Sort one answer and count it."""
        outcome, cause = _classify(kind, error)
        with self.lock:
            self.outcomes[outcome] += 1
            if cause:
                self.errors[cause] += 1
            if error is None:
                self.latencies.append(seconds * 1000)

    def interval(self, index: int, seconds: float, grpc_port: int) -> SoakInterval:
        """The interval that ends now, the tally started afresh; memory is read at its end."""
        with self.lock:
            outcomes, errors, latencies = self.outcomes, self.errors, self.latencies
            self.outcomes, self.errors, self.latencies = Counter(), Counter(), []
        return SoakInterval(
            index=index, seconds=round(seconds, 1), requests=sum(outcomes.values()), outcomes=dict(outcomes),
            errors=dict(errors), p50_ms=_percentile(latencies, 50), p99_ms=_percentile(latencies, 99),
            memory_mib=process_memory(grpc_port),
        )  # fmt: skip


def run_soak(
    name: str,
    *,
    grpc_port: int,
    host: str = "127.0.0.1",
    settings: SoakSettings = SoakSettings(),
    on_interval: Callable[[SoakInterval], None] | None = None,
) -> SoakReport:
    """Drive mixed traffic at ``name`` for ``settings.minutes`` and report every ``settings.interval_s`` seconds."""
    url = f"{host}:{grpc_port}"
    names = _ensemble_inputs(url, name)
    tally = _Tally()
    report = SoakReport(name=name, concurrency=settings.concurrency, leak_bound=settings.leak.describe())
    deadline = time.monotonic() + settings.minutes * 60
    with _traffic(url, name, names, settings.concurrency, tally.record):
        index = 0
        while time.monotonic() < deadline:
            started = time.monotonic()
            time.sleep(max(0.0, min(settings.interval_s, deadline - started)))
            index += 1
            interval = tally.interval(index, time.monotonic() - started, grpc_port)
            report.intervals.append(interval)
            if on_interval:
                on_interval(interval)
    report.leaks = settings.leak.leaks(report.intervals)
    return report


def write_report(report: SoakReport, folder: Path) -> Path:
    """``soak.json`` and ``soak.md`` in ``folder``; returns the markdown path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = asdict(report) | {"totals": dict(report.totals), "errors": dict(report.errors)}
    (folder / "soak.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    path = folder / "soak.md"
    path.write_text(f"# Soak of `{report.name}` at concurrency {report.concurrency}\n\n{report.to_markdown()}")
    return path
