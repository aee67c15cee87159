"""The node's cores: how many this process may use, a node size checked, and the Python steps sized for a GPU node."""

from __future__ import annotations

import os
from typing import Any

from tritongen.errors import SpecError

__all__ = ["check_cpu_cores", "python_step_defaults", "usable_cores"]


def check_cpu_cores(cores: object) -> None:
    """Refuse a node size that is not a whole number of cores, at least one."""
    if cores is not None and (not isinstance(cores, int) or isinstance(cores, bool) or cores < 1):
        raise SpecError(f"cpu_cores must be a whole number >= 1 (the CPU node's cores), got {cores!r}")


def python_step_defaults(data: dict[str, Any], cores: int) -> dict[str, Any]:
    """Tokenizer and postprocess instances for a GPU node of ``cores`` cores, where the spec leaves them open.

    On a GPU node everything but the model step runs on the CPU, and one instance of a Python step is one
    single-threaded process: the steps must have enough of them to keep the GPU fed. Half the cores for the
    tokenizer (the costliest Python step per request) and a quarter for the postprocess (docs/benchmarks.md,
    "The CPU side": per one-text request the tokenizer step costs about 2.5 times the postprocess step, and
    Triton's own frontend takes as much again on its own threads).
    """
    sized = dict(data)
    for step, share in (("tokenizer_instances", 2), ("postprocess_instances", 4)):
        group = dict(data.get(step) or {})
        if group.get("count") is None:
            sized[step] = {**group, "count": max(1, cores // share)}
    return sized


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's cpuset limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
