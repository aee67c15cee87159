"""The model step's layout for the model and the node: instances, and threads per instance.

No one layout wins on every model. Two one-thread instances serve MiniLM's many small requests best, while a
base-size model's single request wants every core the Python steps can spare (threads beyond one spin, see
:func:`candidates`). So where the spec leaves the model step's instances and
threads open, a CPU build measures a few layouts in process on the served model (:mod:`tritongen.sizing.measure`)
and chooses by a stated rule (:func:`choose`):

* ``balanced`` (the default): the best throughput among the layouts whose one-request latency is within
  :data:`LATENCY_SLACK` of the best one-request latency;
* ``latency``: the best one-request latency (the better throughput within :data:`TIE`);
* ``throughput``: the best throughput (the better one-request latency within :data:`TIE`).

The layout is decided once, in the build's size stage: the fixed default or the spec's own
(:meth:`CpuLayout.decided`), then, where it is measured, the rule's pick (:meth:`CpuLayout.refined`). The spec holds
it, which rendering reads and ``build.json`` records. This module is the plain data and the rule; it imports no
runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DOCUMENTS_PER_REQUEST",
    "DOCUMENT_REQUESTS",
    "LATENCY_SLACK",
    "PREFERENCES",
    "SATURATION",
    "TIE",
    "CpuLayout",
    "Layout",
    "Measurement",
    "SizingReport",
    "candidates",
    "choose",
    "fixed_layout",
]

PREFERENCES = ("balanced", "latency", "throughput")
LATENCY_SLACK = 0.10  # balanced: one-request latency within 10% of the best
TIE = 0.03  # differences this small are noise on a busy build machine
SATURATION = 16  # requests in flight for the throughput figure (the bench's c16)
# The documents workload: requests of this many long texts (the bench's ``--batch 32 --texts news``), this many of
# them timed one at a time and then in flight together.
DOCUMENTS_PER_REQUEST = 32
DOCUMENT_REQUESTS = 4


@dataclass(frozen=True)
class Layout:
    """One way to run the model step: ``instances`` sessions of ``threads`` intra-op threads each."""

    instances: int
    threads: int

    @property
    def label(self) -> str:
        """``2 × 1 thread``, ``1 × 4 threads``."""
        return f"{self.instances} × {self.threads} thread{'s' if self.threads > 1 else ''}"


@dataclass(frozen=True)
class CpuLayout:
    """The model step's layout on a CPU node of ``cores`` cores, and how the build comes to it.

    ``layout`` is what the model step's config gets. The build's size stage decides it once (:meth:`decided`):
    where the spec leaves its instances and threads open, the fixed default, replaced with what it measures where
    ``measure`` is set (:meth:`candidates`, :meth:`refined`). A runtime writes it into the spec
    (``Runtime.with_layout``) and reads it back (``Runtime.cpu_layout``).
    """

    cores: int
    python_instances: tuple[int, int]  # the tokenizer's and the postprocess step's instances, which keep a core each
    layout: Layout  # threads 0: the runtime's own default
    measure: bool = False
    prefer: str = "balanced"
    workload: str = "queries"  # what the layouts are timed with (``ModelLayoutSettings.workload``)

    def decided(self, *, left_open: bool, measure: bool | None, usable: int) -> CpuLayout:
        """The layout before any is measured: where the spec leaves it open (``left_open``), :func:`fixed_layout`.

        An open layout is measured unless ``measure`` says otherwise, where this machine can stand in for the node
        (no more cores than its ``usable``); one the spec sets is kept, and measured only where ``measure`` asks.
        """
        if not left_open:
            return dataclasses.replace(self, measure=bool(measure))
        fixed = fixed_layout(self.cores, reserved=sum(self.python_instances))
        return dataclasses.replace(self, layout=fixed, measure=self.cores <= usable if measure is None else measure)

    def candidates(self, *, folded: bool = False) -> list[Layout]:
        """The layouts the size stage times (:func:`candidates`): the postprocess step keeps no core once ``folded``.

        Timed on documents, the Python steps keep none: next to a request of 32 long texts their work is small, so
        an instance may have threads on every core. Preferring ``latency``, one instance on every core is timed too:
        it gives one request every core, which is what that preference asks for (served without Triton's batcher,
        ``Runtime.triton_batches``). The other rules leave it out: it always answers one request fastest, so
        ``balanced`` would take it whatever it serves.
        """
        tokenizers, postprocessors = self.python_instances
        if self.workload == "documents":
            return candidates(self.cores, reserved=0)
        found = candidates(self.cores, reserved=tokenizers + (0 if folded else postprocessors))
        if self.prefer == "latency":
            found = list(dict.fromkeys([*found, Layout(1, max(1, self.cores))]))
        return found

    def refined(self, measurements: Sequence[Measurement]) -> tuple[CpuLayout, Measurement, str]:
        """The layout with the measured one ``prefer`` picks (:func:`choose`), that measurement, and why."""
        chosen, why = choose(measurements, self.prefer)
        return dataclasses.replace(self, layout=chosen.layout), chosen, why


@dataclass(frozen=True)
class Measurement:
    """One layout's figures in process: one request alone, and :data:`SATURATION` requests in flight."""

    layout: Layout
    one_ms: float  # median latency of one request alone (one text; or, timed on documents, 32 of them)
    texts_per_s: float  # with SATURATION one-text requests in flight, batched over the instances (or documents')

    def to_dict(self) -> dict[str, Any]:
        """For ``build.json``."""
        return {
            "instances": self.layout.instances, "threads": self.layout.threads,
            "one_request_ms": round(self.one_ms, 3), "texts_per_s": round(self.texts_per_s, 1),
        }  # fmt: skip


@dataclass
class SizingReport:
    """What the layout stage measured and chose, for the model card and ``build.json``."""

    prefer: str
    cores: int
    measurements: list[Measurement]
    chosen: Measurement
    why: str
    texts: int  # distinct texts measured with
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    measured_on: str = ""  # what ran the step: "onnxruntime r24.10 native, ONNX Runtime 1.28.0", or in process
    workload: str = "queries"  # what the layouts were timed with

    def to_dict(self) -> dict[str, Any]:
        """For ``build.json``."""
        return {
            "prefer": self.prefer, "cores": self.cores, "chosen": self.chosen.to_dict(), "why": self.why,
            "measured": [m.to_dict() for m in self.measurements], "texts": self.texts,
            "seconds": round(self.seconds, 1), "notes": self.notes, "measured_on": self.measured_on,
            "workload": self.workload,
        }  # fmt: skip

    def card_lines(self) -> list[str]:
        """The model card's section: every layout measured, and why the chosen one won."""
        best_one = min(m.one_ms for m in self.measurements)
        best_rate = max(m.texts_per_s for m in self.measurements)
        documents = self.workload == "documents"
        shape = (
            f"{self.texts} documents from the validation texts in requests of {DOCUMENTS_PER_REQUEST}, one request "
            f"at a time and {DOCUMENT_REQUESTS} in flight"
            if documents
            else f"{self.texts} validation texts one at a time and {SATURATION} in flight"
        )
        in_flight = f"{DOCUMENT_REQUESTS} requests" if documents else f"{SATURATION}"
        lines = [
            f"Measured on the served model ({self.measured_on or 'in process'}) for a {self.cores}-core node, "
            f"workload `{self.workload}`: {shape}, in {self.seconds:.0f} s; preference `{self.prefer}`.",
            "",
            f"| layout | one request ms | vs best | texts/s, {in_flight} in flight | vs best | |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for m in self.measurements:
            mark = "**chosen**" if m is self.chosen else ""
            lines.append(
                f"| {m.layout.label} | {m.one_ms:.2f} | {m.one_ms / best_one:.2f}x | {m.texts_per_s:.1f} | "
                f"{m.texts_per_s / best_rate:.2f}x | {mark} |"
            )
        lines += ["", f"Chosen: {self.chosen.layout.label}, because {self.why}."]
        lines += [f"{note}" for note in self.notes]
        return lines


def candidates(cores: int, reserved: int = 0) -> list[Layout]:
    """The layouts measured for a node of ``cores`` cores, ``reserved`` of them kept for the Python steps.

    One-thread instances, 1, 2, 4 and 8 of them up to the node's cores: a one-thread session has no thread pool,
    so nothing of it waits on a core it does not use. Instances of several threads share only the cores left
    beside the Python steps: Triton's onnxruntime backend has no switch for spinning, so their threads spin
    between operators (ONNX Runtime's default) and hold their cores while a request runs. (One instance of two
    threads once answered with a p99 of 519 ms on 2 cores; that was Triton's batcher stalling the one instance,
    which such a step is now served without: docs/benchmarks.md.)
    """
    cores = max(1, cores)
    layouts = [Layout(n, 1) for n in (1, 2, 4, 8) if n <= cores]
    free = cores - reserved
    layouts += [Layout(n, free // n) for n in (1, 2, 4, 8) if free // n >= 2]
    return list(dict.fromkeys(layouts))


def fixed_layout(cores: int, reserved: int = 0) -> Layout:
    """The layout written where the spec leaves it open: two instances (one on a one-core node).

    Each gets an even share of the cores the Python steps leave, at least one thread: threads beyond one spin
    between operators (see :func:`candidates`) and hold their cores while a request runs. Two instances of one
    thread served 1.6x the requests/s of one instance with ONNX Runtime's default threads at concurrency 16 on 2
    cores (docs/benchmarks.md). Where the layout is measured at build time, its choice replaces this one.
    """
    count = 2 if cores >= 2 else 1
    return Layout(count, max(1, (cores - reserved) // count))


def choose(measurements: Sequence[Measurement], prefer: str = "balanced") -> tuple[Measurement, str]:
    """The layout ``prefer`` picks, and why in words (:mod:`tritongen.sizing`'s rule)."""
    if prefer not in PREFERENCES:
        raise ValueError(f"prefer must be one of {', '.join(PREFERENCES)}, got {prefer}")
    best_one = min(m.one_ms for m in measurements)
    best_rate = max(m.texts_per_s for m in measurements)
    if prefer == "latency":
        near = [m for m in measurements if m.one_ms <= best_one * (1 + TIE)]
        chosen = max(near, key=lambda m: m.texts_per_s)
        return chosen, (
            f"it answers one request fastest ({chosen.one_ms:.2f} ms"
            + (f"; of those within {TIE:.0%} of the best, the most texts/s" if len(near) > 1 else "")
            + ")"
        )
    if prefer == "throughput":
        near = [m for m in measurements if m.texts_per_s >= best_rate * (1 - TIE)]
        chosen = min(near, key=lambda m: m.one_ms)
        return chosen, (
            f"it serves the most texts/s with {SATURATION} in flight ({chosen.texts_per_s:.1f}"
            + (f"; of those within {TIE:.0%} of the best, the fastest one request" if len(near) > 1 else "")
            + ")"
        )
    near = [m for m in measurements if m.one_ms <= best_one * (1 + LATENCY_SLACK)]
    chosen = max(near, key=lambda m: m.texts_per_s)
    return chosen, (
        f"it serves the most texts/s ({chosen.texts_per_s:.1f}, {chosen.texts_per_s / best_rate:.2f}x the best) "
        f"of the {len(near)} layout{'s' if len(near) > 1 else ''} whose one-request latency is within "
        f"{LATENCY_SLACK:.0%} of the best ({best_one:.2f} ms)"
    )
