"""Free ports for the servers we start, and starting again when one was taken before its server bound it.

A port is picked by binding it, and every socket of one pick stays bound until all of the pick's ports are
chosen, so that they are distinct. They come from below the kernel's ephemeral range where it leaves room
(``/proc/sys/net/ipv4/ip_local_port_range``): ports in that range are also handed to every outgoing
connection's local end, so one picked there can be taken by a client before the server binds it. A port can
still be taken between the pick and the server's bind (by another process picking at the same moment);
:func:`start_on_free_ports` then starts the server again on a fresh pick, a bounded number of times, saying
so in one line.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tritongen.errors import PortTakenError

__all__ = ["PORT_ATTEMPTS", "free_port", "free_ports", "port_taken", "start_on_free_ports"]

# What a server prints when it cannot bind: tritonserver's HTTP, gRPC and metrics services, its refusal of one
# port for HTTP and gRPC, and uvicorn's (the gateway, the bench's peers).
_TAKEN = re.compile(
    r"already in use|address in use|cannot listen to HTTP requests and GRPC requests at the same address",
    re.IGNORECASE,
)
# Starts on a fresh pick before a taken port is the user's error.
PORT_ATTEMPTS = 3
# Where picks are made when the ephemeral range leaves room below it: above the well-known and common ports.
_LOWEST = 15000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_T = TypeVar("_T")


def port_taken(log: str) -> bool:
    """Whether ``log`` (a server's output) says it exited because a port it was given was taken."""
    return _TAKEN.search(log) is not None


def _range_below_ephemeral() -> range | None:
    try:
        low = int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(_LOWEST, low) if low - _LOWEST >= 1000 else None


def _bind(sock: socket.socket, host: str, candidates: range | None, rng: random.Random) -> int:
    """Bind ``sock`` to a free port of ``candidates`` (some random tries), else to one the kernel picks."""
    for _ in range(50 if candidates else 0):
        with contextlib.suppress(OSError):
            sock.bind((host, rng.choice(candidates)))  # type: ignore[arg-type]
            return int(sock.getsockname()[1])
    sock.bind((host, 0))
    return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> tuple[int, ...]:
    """``count`` distinct TCP ports that are free right now on ``host``; every socket stays bound until all are."""
    candidates, rng = _range_below_ephemeral(), random.Random()
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            ports.append(_bind(sock, host, candidates, rng))
        return tuple(ports)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    return free_ports(1, host)[0]


def start_on_free_ports(
    start: Callable[[int], _T], what: str, *, attempts: int = PORT_ATTEMPTS, say: Callable[[str], None] | None = None
) -> _T:
    """``start(attempt)`` (1, 2, ...; from 2 on it picks its ports anew), again while it raises :class:`PortTakenError`.

    After ``attempts`` starts the last error stands. Each new start is said in one line (``say``, by default
    standard error), naming ``what`` is started.
    """
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    for attempt in range(1, attempts + 1):
        try:
            return start(attempt)
        except PortTakenError as exc:
            if attempt == attempts:
                raise
            shown = ", ".join(str(p) for p in exc.ports)
            say(
                f"{what}: {exc.what} found a port it was given ({shown} on {exc.host}) taken since it was picked; "
                f"starting again on fresh ports (start {attempt + 1} of {attempts})"
            )
    raise AssertionError("unreachable")  # the loop returns or raises
