"""Continuous batching in the gateway: requests that arrive while Triton is busy go to it together, in one call.

Triton's HTTP frontend, its ensemble scheduler and each Python step cost CPU per request, whatever the rows in it
(about 1 ms of server CPU per request on a 2-core node, the ``--free-model-step`` bench). So, as Text Embeddings
Inference's router does (``core/src/queue.rs``, ``core/src/infer.rs``), the gateway sends a request at once while
fewer than ``limit`` calls of its kind are in flight, and otherwise queues it; each call that completes takes what
queued, up to the ensemble's ``max_batch_size`` rows, into one call, and its answer is split back by rows. A request
never waits while Triton is idle: an idle lane sends it at once, from the request's own task.

Only requests of one size go together: a call's rows are padded to its longest, so a short text merged with a long
one would cost the model step the long one's length (measured: merging every waiting request halved the texts/s
at 16 clients). A request's size class is its longest row's length in characters (or token ids), to the next power
of two; a call takes the oldest waiting request and the others of its class behind it, in order.

A merged call runs in the context of the first request it answers (its trace, :mod:`~tritongen.gateway.tracing`);
:func:`merged_contexts` gives the send function the others'.

Calls of one kind share inputs and outputs (a lane per ensemble, input names and asked outputs). A merged call
that Triton refuses for its input (400: one bad text) is sent again request by request, so the bad request fails
alone and its neighbours are answered; any other failure is every merged request's.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tritongen.errors import GatewayError
from tritongen.gateway.metrics import GatewayMetrics
from tritongen.gateway.models import ModelInfo

__all__ = ["SPREAD_LENGTH", "Batcher", "Call", "Send", "cut_calls", "merged_contexts", "row_lengths"]

# Triton's answer of ``outputs`` to ``inputs`` (name -> one value per row) for the ensemble.
Send = Callable[[ModelInfo, Mapping[str, Sequence[Any]], Sequence[str]], Awaitable[dict[str, np.ndarray]]]


# A call whose rows hold this many characters (or token ids) in all is spread over the ensemble's instances.
SPREAD_LENGTH = 4096

_MERGED: contextvars.ContextVar[tuple[contextvars.Context, ...]] = contextvars.ContextVar("merged", default=())


def merged_contexts() -> tuple[contextvars.Context, ...]:
    """Inside a merged call: the contexts of the requests it answers besides the first (in whose context it runs)."""
    return _MERGED.get()


def row_lengths(inputs: Mapping[str, Sequence[Any]]) -> list[int]:
    """Each row's length: its characters, or its token ids (a pair's two texts summed)."""
    rows = len(next(iter(inputs.values())))
    sized = [values for values in inputs.values() if values and isinstance(values[0], (str, list))]
    return [sum(len(values[i]) for values in sized) for i in range(rows)]


def size_class(inputs: Mapping[str, Sequence[Any]]) -> int:
    """The power of two at or above the longest row's length (:func:`row_lengths`)."""
    return max(0, max(row_lengths(inputs), default=0) - 1).bit_length()


@dataclass
class _Request:
    """One client request's rows, waiting for a call, their size class, and its context (its trace)."""

    inputs: Mapping[str, Sequence[Any]]
    rows: int
    queued: float
    answer: asyncio.Future[dict[str, np.ndarray]]
    size: int = 0
    context: contextvars.Context = field(default_factory=contextvars.copy_context)


@dataclass
class _Lane:
    """The calls of one kind: how many are in flight, and the requests waiting for the next."""

    in_flight: int = 0
    waiting: deque[_Request] = field(default_factory=deque)


class Batcher:
    """Sends ensemble requests through ``send``, merging those that wait into one call (see the module)."""

    def __init__(self, send: Send, limit: int | None = None, metrics: GatewayMetrics | None = None) -> None:
        """``limit``: calls of a kind in flight at once; None: the ensemble's most instances of a step, plus one.

        0 merges nothing: every request is its own call, at once.
        """
        self._send, self._limit, self._metrics = send, limit, metrics
        self._lanes: dict[tuple[str, tuple[str, ...], tuple[str, ...]], _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def limit(self, model: ModelInfo) -> int:
        """Calls of one kind in flight at once for ``model``: the steps' instances and one more being assembled."""
        return model.instances + 1 if self._limit is None else self._limit

    async def submit(
        self, model: ModelInfo, inputs: Mapping[str, Sequence[Any]], outputs: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """``outputs`` for ``inputs``: at once while Triton has room, else in the next call with what else waits."""
        rows = len(next(iter(inputs.values())))
        limit = self.limit(model)
        if limit <= 0 or model.max_batch_size <= 0 or rows >= model.max_batch_size:  # nothing to merge it with
            return await self._call(model, [inputs], rows, [0.0], outputs)
        key = (model.name, tuple(inputs), tuple(outputs))
        lane = self._lanes.setdefault(key, _Lane())
        if lane.in_flight < limit and not lane.waiting:
            lane.in_flight += 1
            try:
                return await self._call(model, [inputs], rows, [0.0], outputs)
            finally:
                lane.in_flight -= 1
                self._pump(model, lane, outputs)
        request = _Request(
            inputs, rows, time.perf_counter(), asyncio.get_running_loop().create_future(), size_class(inputs)
        )
        lane.waiting.append(request)
        self._gauge(model, lane)
        return await request.answer

    async def close(self) -> None:
        """Wait for the merged calls under way (the gateway's shutdown: their requests are still answered)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _gauge(self, model: ModelInfo, lane: _Lane) -> None:
        if self._metrics is not None:
            self._metrics.queued(model.name, len(lane.waiting))

    def _pump(self, model: ModelInfo, lane: _Lane, outputs: Sequence[str]) -> None:
        """Start merged calls for the waiting requests while the lane has room."""
        limit = self.limit(model)
        while lane.waiting and lane.in_flight < limit:
            batch, rows = _take(lane.waiting, model.max_batch_size)
            lane.in_flight += 1
            call = self._merged(model, lane, batch, rows, outputs)
            task = batch[0].context.run(asyncio.get_running_loop().create_task, call)  # a task copies the context
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._gauge(model, lane)

    async def _merged(
        self, model: ModelInfo, lane: _Lane, batch: list[_Request], rows: int, outputs: Sequence[str]
    ) -> None:
        """One call for ``batch``, each request answered with its rows; then the lane's next call."""
        try:
            _MERGED.set(tuple(request.context for request in batch[1:]))
            now = time.perf_counter()
            waits = [now - request.queued for request in batch]
            try:
                result = await self._call(model, [r.inputs for r in batch], rows, waits, outputs)
            except GatewayError as exc:
                if exc.status == 400 and len(batch) > 1:  # one request's bad input: each alone, to find it
                    await asyncio.gather(*(self._alone(model, request, outputs) for request in batch))
                    return
                for request in batch:
                    _settle(request.answer, error=exc)
                return
            except Exception as exc:  # every merged request's failure, reported by its own route
                for request in batch:
                    _settle(request.answer, error=exc)
                return
            start = 0
            for request in batch:
                _settle(request.answer, {name: array[start : start + request.rows] for name, array in result.items()})
                start += request.rows
        finally:
            lane.in_flight -= 1
            self._pump(model, lane, outputs)

    async def _alone(self, model: ModelInfo, request: _Request, outputs: Sequence[str]) -> None:
        try:
            _settle(request.answer, await self._call(model, [request.inputs], request.rows, [0.0], outputs))
        except Exception as exc:
            _settle(request.answer, error=exc)

    async def _call(
        self,
        model: ModelInfo,
        parts: Sequence[Mapping[str, Sequence[Any]]],
        rows: int,
        waits: Sequence[float],
        outputs: Sequence[str],
    ) -> dict[str, np.ndarray]:
        """One Triton call of the requests ``parts`` (their rows one after another), timed for the metrics."""
        inputs = parts[0] if len(parts) == 1 else {name: [v for p in parts for v in p[name]] for name in parts[0]}
        started = time.perf_counter()
        result = await self._send(model, inputs, outputs)
        if self._metrics is not None:
            self._metrics.call(model.name, rows, len(parts), waits, time.perf_counter() - started)
        return result


def _take(waiting: deque[_Request], room: int) -> tuple[list[_Request], int]:
    """The oldest waiting request and those of its size class behind it, up to ``room`` rows; and their rows."""
    first = waiting.popleft()
    batch, rows, kept = [first], first.rows, []
    while waiting and rows < room:
        request = waiting.popleft()
        if request.size == first.size and rows + request.rows <= room:
            batch.append(request)
            rows += request.rows
        else:
            kept.append(request)
    waiting.extendleft(reversed(kept))
    return batch, rows


def _settle(
    answer: asyncio.Future[dict[str, np.ndarray]],
    result: dict[str, np.ndarray] | None = None,
    *,
    error: BaseException | None = None,
) -> None:
    """Answer a waiting request, unless its client went away (its future was cancelled)."""
    if answer.done():
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result if result is not None else {})


# The request rows a call answers (their indices in the request), and its inputs.
Call = tuple[list[int], dict[str, list[Any]]]


def cut_calls(calls: Sequence[Call], parts: int, max_rows: int) -> list[Call]:
    """``calls`` as Triton takes them: each big one cut into ``parts`` calls, and none of more than ``max_rows`` rows.

    One call runs on one instance of the model step, whose threads are a share of the node's cores, so 32 long
    documents in one call leave the other instances idle. A call of :data:`SPREAD_LENGTH` or more in all goes as
    ``parts`` calls at once instead (the gateway gives the ensemble's steps' most instances), its rows sorted by
    length and cut into runs of about equal length, so each call pads only to its own longest row (as
    sentence-transformers sorts a batch). The gateway gives 1, cutting nothing so, where an output is token-level:
    the widths of different calls' rows differ. Then a call of more rows than the ensemble's ``max_batch_size``
    (``max_rows``; 0: no limit) goes in chunks of that many. The caller puts the answers back in the request's order.
    """
    cut: list[Call] = []
    for indices, inputs in calls:
        rows = len(indices)
        groups = _spread(row_lengths(inputs), parts) if parts > 1 and rows > 1 else [list(range(rows))]
        if len(groups) == 1 and (not max_rows or rows <= max_rows):  # most requests: the call as it came
            cut.append((indices, inputs))
            continue
        for group in groups:
            for start in range(0, len(group), max_rows or len(group)):
                chunk = group[start : start + max_rows] if max_rows else group
                cut.append(([indices[i] for i in chunk], {k: [v[i] for i in chunk] for k, v in inputs.items()}))
    return cut


def _spread(lengths: Sequence[int], parts: int) -> list[list[int]]:
    """The rows' positions in ``parts`` runs by length, of about equal length in all (one run where small)."""
    total = sum(lengths)
    if total < SPREAD_LENGTH:
        return [list(range(len(lengths)))]
    count, groups, filled = min(parts, len(lengths)), [list[int]()], 0
    for position in sorted(range(len(lengths)), key=lengths.__getitem__):
        if filled >= total * len(groups) / count and len(groups) < count:
            groups.append([])
        groups[-1].append(position)
        filled += lengths[position]
    return groups
