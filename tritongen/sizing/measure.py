"""Time the model step's layouts in process: one request alone, and a saturating load over the instances.

Each instance is its own session, driven by its own thread (the runtimes release the GIL while they compute),
as Triton runs one session per instance. A layout's figures:

* **one request**: the median latency of one text at a time, each text once, handed to the instances in
  turn (as Triton gives each request to the next free instance: a second instance's cold session shows here);
* **saturating**: :data:`~tritongen.sizing.SATURATION` one-text requests in flight, so each instance takes
  batches of ``SATURATION // instances`` texts, as Triton's dynamic batcher forms them; texts per second while
  the instances drain every text from one queue, the costliest batches first.

Timed on documents (``per_request`` texts in each request), a request is one call: its latency alone, each
request once, and texts per second while the instances drain every request from one queue, as Triton gives each
instance the next whole request (requests of long rows rarely share a padded shape, so the batcher does not merge
them).

Layouts are measured in interleaved rounds and each keeps its best figures, so that a burst of load on the build
machine costs one round of one layout, not the choice.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tritongen.sizing import SATURATION, Layout, Measurement

__all__ = ["Feeds", "Session", "documents_of", "measure_layouts"]

Feeds = dict[str, Any]  # one call's inputs, as the session takes them
Session = Callable[[Feeds], Any]  # runs one call
ROUNDS = 2


def measure_layouts(
    layouts: Sequence[Layout],
    open_session: Callable[[Layout], Session],
    encode: Callable[[Sequence[str]], Feeds],
    texts: Sequence[str],
    progress: Callable[[str], None] = lambda message: None,
    per_request: int = 1,
    triton_batches: Callable[[Layout], bool] = lambda layout: True,
) -> list[Measurement]:
    """Every layout's best figures over :data:`ROUNDS` interleaved rounds, in the order given.

    ``open_session(layout)`` opens one instance's session; ``encode(texts)`` gives one call's inputs. Each request
    holds ``per_request`` of the ``texts`` (one: queries, batched as Triton's batcher merges them, one text a call
    where ``triton_batches(layout)`` says its config has no batcher; more: documents, each request its own call).
    """
    if per_request > 1:
        requests = [encode(texts[i : i + per_request]) for i in range(0, len(texts), per_request)]
        return _measure(layouts, open_session, requests, lambda layout: list(requests), len(texts), progress)
    ones = [encode([text]) for text in texts]
    # Requests padded to different buckets differ in shape, and Triton batches only equal shapes: a batch holds
    # the texts of one bucket.
    buckets: dict[int, list[str]] = {}
    for text, feeds in zip(texts, ones, strict=True):
        buckets.setdefault(_width(feeds), []).append(text)

    def batched(layout: Layout) -> list[Feeds]:
        batch = max(1, SATURATION // layout.instances) if triton_batches(layout) else 1
        return [  # every text once
            encode(group[start : start + batch]) for group in buckets.values() for start in range(0, len(group), batch)
        ]

    return _measure(layouts, open_session, ones, batched, len(texts), progress)


def _measure(
    layouts: Sequence[Layout],
    open_session: Callable[[Layout], Session],
    ones: Sequence[Feeds],
    batched: Callable[[Layout], list[Feeds]],
    texts: int,
    progress: Callable[[str], None],
) -> list[Measurement]:
    """Each layout's best (one request's median latency, texts/s draining ``batched(layout)``) over the rounds."""
    best: dict[Layout, tuple[float, float]] = {}
    for round_index in range(ROUNDS):
        for index, layout in enumerate(layouts):
            progress(f"model step layout {layout.label} (round {round_index + 1} of {ROUNDS}, "
                     f"{index + 1} of {len(layouts)})")  # fmt: skip
            batches = batched(layout)
            # The costliest first: a server under steady load never sees the end of a drain, where an instance
            # that took a long batch last would still be computing while the others wait.
            batches.sort(key=_cost, reverse=True)
            with _Instances([open_session(layout) for _ in range(layout.instances)]) as instances:
                instances.each(ones[0])  # warm-up, one text
                one = statistics.median(instances.one_at_a_time(ones)) * 1000
                instances.each(batches[0])  # warm-up at this batch size
                rate = texts / instances.drain(batches)
            was = best.get(layout, (float("inf"), 0.0))
            best[layout] = (min(was[0], one), max(was[1], rate))
    return [Measurement(layout, *best[layout]) for layout in layouts]


def documents_of(texts: Sequence[str], count: int, words: int) -> list[str]:
    """``count`` documents of about ``words`` words each, made of ``texts`` in turn (taken again where they run out)."""
    pool = [text.split() for text in texts if text.strip()]
    documents, index = [], 0
    for _ in range(count):
        document: list[str] = []
        while len(document) < words:
            document += pool[index % len(pool)]
            index += 1
        documents.append(" ".join(document[:words]))
    return documents


def _width(feeds: Feeds) -> int:
    """One call's padded row length (its widest input's last axis; 0 for inputs without one)."""
    return max((getattr(array, "shape", (0,))[-1] for array in feeds.values()), default=0)


def _cost(feeds: Feeds) -> int:
    """A call's size: rows times padded width."""
    return max((getattr(array, "size", 0) for array in feeds.values()), default=0)


class _Instances:
    """A layout's sessions, each on a thread of its own (as Triton runs each instance), fed calls by queue."""

    def __init__(self, sessions: Sequence[Session]) -> None:
        self.inbox: list[queue.Queue[Feeds | None]] = [queue.Queue() for _ in sessions]
        self.shared: queue.Queue[Feeds | None] = queue.Queue()  # drained by every instance
        self.done: queue.Queue[tuple[float, BaseException | None]] = queue.Queue()
        self.threads = [
            threading.Thread(target=self._serve, args=(session, inbox), daemon=True)
            for session, inbox in zip(sessions, self.inbox, strict=True)
        ]
        for thread in self.threads:
            thread.start()

    def __enter__(self) -> _Instances:
        return self

    def __exit__(self, *exc: object) -> None:
        for inbox in self.inbox:
            inbox.put(None)
        for thread in self.threads:
            thread.join()

    def _serve(self, session: Session, inbox: queue.Queue[Feeds | None]) -> None:
        while (feeds := inbox.get()) is not None:
            if not feeds:  # the signal to drain the shared queue
                while (shared := self._next_shared()) is not None:
                    self._call(session, shared)
                self.done.put((0.0, None))
                continue
            self._call(session, feeds)

    def _next_shared(self) -> Feeds | None:
        try:
            return self.shared.get_nowait()
        except queue.Empty:
            return None

    def _call(self, session: Session, feeds: Feeds) -> None:
        begin = time.perf_counter()
        try:
            session(feeds)
        except BaseException as exc:  # raised again on the caller's thread
            self.done.put((0.0, exc))
            return
        self.done.put((time.perf_counter() - begin, None))

    def _wait(self) -> float:
        seconds, failure = self.done.get()
        if failure is not None:
            raise failure
        return seconds

    def each(self, feeds: Feeds) -> None:
        """One call on every instance, one after another."""
        for inbox in self.inbox:
            inbox.put(feeds)
            self._wait()

    def one_at_a_time(self, calls: Sequence[Feeds]) -> list[float]:
        """Each call's seconds, one call in flight at a time, the instances taking turns."""
        times = []
        for index, feeds in enumerate(calls):
            self.inbox[index % len(self.inbox)].put(feeds)
            times.append(self._wait())
        return times

    def drain(self, calls: Sequence[Feeds]) -> float:
        """Seconds until the instances, each taking the next call as it is free, have left none."""
        for feeds in calls:
            self.shared.put(feeds)
        begin = time.perf_counter()
        for inbox in self.inbox:
            inbox.put({})
        pending = len(calls) + len(self.inbox)  # every call's result, and each instance's end of draining
        while pending:
            self._wait()
            pending -= 1
        return time.perf_counter() - begin
