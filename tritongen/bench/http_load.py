"""One HTTP/JSON load generator for servers that speak different APIs: closed loop, N clients, fixed time.

perf_analyzer speaks only KServe v2, so a peer with its own API (infinity-emb's OpenAI-style ``/embeddings``)
is driven, together with the ensemble, by this: each client thread keeps one keep-alive connection and sends
one text per request (or ``batch`` of them: a corpus being indexed), as soon as its previous answer arrived.
Both sides get the same texts in the same order and pay the same client cost (JSON encoding, Python threads) on
the same machine.
"""

from __future__ import annotations

import http.client
import itertools
import json
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from tritongen.contract import EMBEDDING, TEXT

__all__ = [
    "HttpTarget",
    "InterleavedRounds",
    "Interleaving",
    "LoadResult",
    "drive",
    "interleaved_rounds",
    "kserve_target",
    "openai_target",
]


@dataclass(frozen=True)
class HttpTarget:
    """Where to POST, and how a text becomes a body and an answer an embedding."""

    label: str
    host: str
    port: int
    path: str
    body: Callable[[Sequence[str]], bytes]
    embedding: Callable[[dict], list[float]]

    def post(self, connection: http.client.HTTPConnection, texts: Sequence[str]) -> dict:
        """One request of ``texts`` on ``connection``; the parsed JSON answer (raises on a non-200 status)."""
        connection.request("POST", self.path, self.body(texts), {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{self.label}: HTTP {response.status}: {data[:200]!r}")
        return json.loads(data)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The embedding of each text, one request each."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            return np.array([self.embedding(self.post(connection, [text])) for text in texts], np.float32)
        finally:
            connection.close()


def kserve_target(label: str, url: str, model: str, output: str | None = EMBEDDING) -> HttpTarget:
    """A Triton ensemble over KServe v2 JSON: ``TEXT`` in, ``output`` out (None: every output)."""
    host, port = url.rsplit(":", 1)
    outputs = {"outputs": [{"name": output}]} if output else {}

    def body(texts: Sequence[str]) -> bytes:
        tensor = {"name": TEXT, "shape": [len(texts), 1], "datatype": "BYTES", "data": list(texts)}
        return json.dumps({"inputs": [tensor], **outputs}).encode()

    def embedding(answer: dict) -> list[float]:
        return next(o["data"] for o in answer["outputs"] if o["name"] == EMBEDDING)

    return HttpTarget(label, host, int(port), f"/v2/models/{model}/infer", body, embedding)


def openai_target(label: str, url: str, model: str, path: str = "/embeddings") -> HttpTarget:
    """An OpenAI-style embeddings API (infinity-emb, TEI's ``/v1/embeddings``)."""
    host, port = url.rsplit(":", 1)

    def body(texts: Sequence[str]) -> bytes:
        return json.dumps({"model": model, "input": list(texts)}).encode()

    def embedding(answer: dict) -> list[float]:
        return answer["data"][0]["embedding"]

    return HttpTarget(label, host, int(port), path, body, embedding)


@dataclass(frozen=True)
class LoadResult:
    """One closed-loop run: answers completed in the window per second, and their latencies (ms)."""

    label: str
    concurrency: int
    seconds: float
    latencies_ms: tuple[float, ...]
    errors: int
    cpu_seconds: Mapping[str, float] = field(default_factory=dict)  # per meter: CPU spent in the window
    batch: int = 1  # texts per request

    @property
    def throughput(self) -> float:
        """Answered requests per second."""
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    def cpu_ms_per_request(self, meter: str) -> float:
        """The CPU milliseconds ``meter`` measured in the window, per request answered in it."""
        answered = len(self.latencies_ms)
        return self.cpu_seconds[meter] * 1e3 / answered if answered and meter in self.cpu_seconds else float("nan")

    def percentile(self, q: float) -> float:
        """Latency percentile ``q`` (0-100) in ms."""
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")


WARMUP_SECONDS = 2.0  # before each measured window: connections open, the server's batches settle


def drive(
    target: HttpTarget,
    texts: Sequence[str],
    concurrency: int,
    seconds: float,
    warmup: float | None = None,
    meters: Mapping[str, Callable[[], float]] | None = None,
    batch: int = 1,
) -> LoadResult:
    """``concurrency`` clients send ``texts`` (round robin, ``batch`` per request) for ``warmup`` + ``seconds``.

    The window of ``seconds`` is measured.
    The warm-up defaults to :data:`WARMUP_SECONDS`, but never longer than the window it precedes: a quick look of
    one second per side (``BenchOptions(peer_seconds=1)``) should not spend two thirds of its time warming up.
    ``meters`` (name -> CPU seconds so far of some processes) are read as the window opens and closes.
    """
    warmup = min(WARMUP_SECONDS, seconds) if warmup is None else warmup
    cycle = itertools.cycle(texts)
    lock, halt = threading.Lock(), threading.Event()
    latencies: list[float] = []
    errors = [0]
    start = time.monotonic() + warmup
    end = start + seconds

    def client() -> None:
        connection = http.client.HTTPConnection(target.host, target.port, timeout=120)
        try:
            while not halt.is_set():
                with lock:
                    sent_texts = [next(cycle) for _ in range(batch)]
                sent = time.monotonic()
                try:
                    target.post(connection, sent_texts)
                except Exception:  # a refused or failed request counts as an error, the client reconnects
                    errors[0] += 1
                    connection.close()
                    connection = http.client.HTTPConnection(target.host, target.port, timeout=120)
                    if time.monotonic() > end:  # a server that only fails ends the run at its window too
                        return
                    continue
                done = time.monotonic()
                if start <= done <= end:  # answers completed in the window (one started before it counts too)
                    with lock:
                        latencies.append((done - sent) * 1e3)
                if done > end:
                    return
        finally:
            connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    cpu = {}
    try:
        if meters:
            time.sleep(max(0.0, start - time.monotonic()))
            opened = {name: meter() for name, meter in meters.items()}
            time.sleep(max(0.0, end - time.monotonic()))
            cpu = {name: meter() - opened[name] for name, meter in meters.items()}
        for thread in threads:
            thread.join(timeout=max(1.0, end - time.monotonic() + 130))
    finally:
        halt.set()
    return LoadResult(target.label, concurrency, seconds, tuple(latencies), errors[0], cpu, batch)


@dataclass(frozen=True)
class Interleaving:
    """How two servers are measured side by side: ``rounds`` rounds of ``seconds`` per side at each concurrency.

    Each request carries ``batch`` texts.
    """

    concurrencies: Sequence[int]
    rounds: int = 3
    seconds: float = 15.0
    batch: int = 1


def interleaved_rounds(
    first: HttpTarget,
    second: HttpTarget,
    texts: Sequence[str],
    plan: Interleaving,
    progress: Callable[[str], None] = lambda _: None,
    meters: Mapping[str, Callable[[], float]] | None = None,
) -> list[tuple[LoadResult, LoadResult]]:
    """Drive both targets at each concurrency, ``plan.rounds`` times, either going first in turn; (first, second) pairs.

    Both servers are up at once, so each side meets the same machine; neither always goes first. ``meters`` read
    processes' CPU over each measured window (:func:`drive`).
    """
    results = []
    for round_index in range(plan.rounds):
        for concurrency in plan.concurrencies:
            order = (first, second) if round_index % 2 == 0 else (second, first)
            measured = {}
            for target in order:
                progress(f"  round {round_index + 1}/{plan.rounds}: {target.label} at concurrency {concurrency}…")
                measured[id(target)] = drive(target, texts, concurrency, plan.seconds, meters=meters, batch=plan.batch)
            results.append((measured[id(first)], measured[id(second)]))
    return results


# Named figures of one round's (first, second) pair: what a comparison takes the medians of.
RoundFigures = Mapping[str, Callable[[LoadResult, LoadResult], float]]


class InterleavedRounds:
    """What a comparison reads from its interleaved rounds: ``rounds`` holds (first, second) per round and concurrency.

    The gateway's and the peer's comparisons both report medians over rounds, in a table of one row per
    concurrency: one place computes and lays them out. ``table_head`` names the columns (all right-aligned);
    ``table_row`` formats one row from ``concurrency`` and the medians of ``figures``.
    """

    rounds: Sequence[tuple[LoadResult, LoadResult]]
    seconds: float
    figures: ClassVar[RoundFigures]
    table_head: ClassVar[str]
    table_row: ClassVar[str]

    def concurrencies(self) -> list[int]:
        """The concurrencies measured, ascending."""
        return sorted({first.concurrency for first, _ in self.rounds})

    def rounds_per_concurrency(self) -> int:
        """How many rounds each concurrency had."""
        return len(self.rounds) // max(1, len(self.concurrencies()))

    def failed(self) -> int:
        """Failed requests over every round, both sides."""
        return sum(a.errors + b.errors for a, b in self.rounds)

    def at(self, concurrency: int) -> dict[str, float]:
        """Each of ``figures`` as its median over the rounds at ``concurrency``; ``errors``: their failed requests."""
        pairs = [(a, b) for a, b in self.rounds if a.concurrency == concurrency]
        medians = {
            name: float(statistics.median([figure(a, b) for a, b in pairs])) for name, figure in self.figures.items()
        }
        medians["errors"] = float(sum(a.errors + b.errors for a, b in pairs))
        return medians

    def method(self) -> str:
        """How the rounds were run, for the report's opening sentence."""
        batch = self.rounds[0][0].batch if self.rounds else 1
        per_request = "one text" if batch == 1 else f"{batch} texts"
        return (
            f"one HTTP/JSON load generator ({per_request} per request, keep-alive clients), "
            f"{self.rounds_per_concurrency()} interleaved rounds of {self.seconds:.0f} s per side and concurrency"
        )

    def section(self, heading: str, setting: str) -> list[str]:
        """A report section's opening: ``heading``, what ran (``setting``, then :meth:`method`), the table."""
        return [f"## {heading}", "", f"{setting}, {self.method()}; medians of the rounds.", "", *self.table()]

    def table(self) -> list[str]:
        """The markdown table of the medians: ``table_head``, then ``table_row`` at each concurrency."""
        columns = self.table_head.count("|") - 1
        rows = [self.table_row.format(concurrency=c, **self.at(c)) for c in self.concurrencies()]
        return [self.table_head, "|" + "---:|" * columns, *rows]
