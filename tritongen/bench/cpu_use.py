"""CPU time of a running tritonserver, process by process: the frontend and each step's stubs.

A server started by :class:`tritongen.serve.server.TritonServer` leads its own session, and its Python-backend
stubs (the tokenizer and postprocess steps, and here the local stand-ins for the native backends) run in it,
each named by its model instance on its command line. Reading ``/proc/<pid>/stat`` before and after a run
gives the CPU seconds each spent on it: what a request costs the server's CPU, apart from the client's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FRONTEND", "CpuSnapshot", "cpu_snapshot", "process_cpu", "server_cpu"]

FRONTEND = "tritonserver"  # the server process itself: HTTP/gRPC frontends, the schedulers, backend glue
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds so far of each process of one server's session, with the model each stub serves."""

    seconds: Mapping[int, float]
    owners: Mapping[int, str]  # pid -> FRONTEND or the model a stub serves

    def since(self, earlier: CpuSnapshot) -> dict[str, float]:
        """CPU seconds spent since ``earlier``, summed by owner (stubs that came and went count from 0)."""
        spent: dict[str, float] = {}
        for pid, seconds in self.seconds.items():
            owner = self.owners[pid]
            spent[owner] = spent.get(owner, 0.0) + seconds - earlier.seconds.get(pid, 0.0)
        return spent


def _stat(pid: int) -> tuple[int, float] | None:
    """(session id, CPU seconds) of ``pid``; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[3]), (int(fields[11]) + int(fields[12])) / _TICKS  # session; utime + stime


def _owner(pid: int, leader: int) -> str | None:
    """FRONTEND for the server itself, the model a stub serves, or None for anything else in the session."""
    if pid == leader:
        return FRONTEND
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not argv[0].endswith(b"triton_python_backend_stub") or len(argv) < 9:
        return None
    return argv[8].decode(errors="replace").rsplit("_", 2)[0]  # the instance name: <model>_<group>_<index>


def cpu_snapshot(leader: int) -> CpuSnapshot:
    """The CPU seconds so far of the server ``leader`` (its pid, which leads its session) and its stubs."""
    seconds, owners = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or stat[0] != leader:
            continue
        owner = _owner(pid, leader)
        if owner is not None:
            seconds[pid], owners[pid] = stat[1], owner
    return CpuSnapshot(seconds, owners)


def server_cpu(leader: int) -> float:
    """The CPU seconds so far of the server ``leader`` and its stubs, all together."""
    return sum(cpu_snapshot(leader).seconds.values())


def process_cpu(pid: int) -> float:
    """The CPU seconds so far of the process ``pid`` alone (0 once it is gone)."""
    stat = _stat(pid)
    return 0.0 if stat is None else stat[1]
