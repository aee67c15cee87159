"""Drive the real perf_analyzer (from the tritonclient wheel) and parse its CSV."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tritongen.contract import TEXT
from tritongen.errors import BenchError
from tritongen.serve.server import server_environment

__all__ = ["PerfPoint", "Sweep", "perf_analyzer_binary", "run_perf_analyzer", "write_input_data"]


# perf_analyzer reports once this many windows in a row are stable (its stability window, not a flag).
SMOKE_WINDOWS = 3
_ANY_SPREAD = 1_000_000  # percent: windows of any throughput and latency count as stable


@dataclass(frozen=True)
class Sweep:
    """perf_analyzer settings: a concurrency sweep measured in request-count windows."""

    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    request_count: int = 256  # requests per measurement window (count_windows mode)
    stability_percentage: int = 15
    max_trials: int = 10
    protocol: str = "http"  # the FastAPI baseline speaks only HTTP; all configs use the same protocol
    batch_size: int = 1  # texts per request (perf_analyzer's -b: consecutive texts of the input data)
    # > 0: about this many requests per point, in SMOKE_WINDOWS windows whose stability is not judged. For smoke
    # runs that prove the harness works: a busy machine cannot make them fail. Real benches leave it at 0.
    fixed_requests: int = 0

    def measurement_flags(self) -> list[str]:
        """perf_analyzer's measurement options for this sweep.

        A smoke run does not use perf_analyzer's ``--request-count``: that mode sends exactly N requests, then
        drops the records of any that finish before its main thread starts the window, and waits forever for
        them (perf_analyzer 2.51; a loaded machine that holds up the main thread for one request's time hangs
        it). Count windows under steady load always fill; a threshold no run can miss makes the windows
        perf_analyzer needs before it reports (``SMOKE_WINDOWS``) always count as stable.
        """
        if self.fixed_requests > 0:
            return [
                "--measurement-mode", "count_windows",
                "--measurement-request-count", str(max(1, -(-self.fixed_requests // SMOKE_WINDOWS))),
                "--stability-percentage", str(_ANY_SPREAD),
                "--max-trials", str(SMOKE_WINDOWS),
            ]  # fmt: skip
        return [
            "--measurement-mode", "count_windows",
            "--measurement-request-count", str(self.request_count),
            "--stability-percentage", str(self.stability_percentage),
            "--max-trials", str(self.max_trials),
        ]  # fmt: skip


@dataclass(frozen=True)
class PerfPoint:
    """One perf_analyzer measurement (latencies in milliseconds)."""

    config: str
    concurrency: int
    throughput: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    avg_ms: float
    stable: bool = True  # False: perf_analyzer could not stabilise; measured with a relaxed threshold


def perf_analyzer_binary() -> Path:
    """The perf_analyzer that tritonclient installed into this environment."""
    path = Path(sys.prefix) / "bin" / "perf_analyzer"
    if not path.is_file():
        raise BenchError("perf_analyzer is missing at {path}; reinstall tritonclient[all]==2.51.0", path=path)
    return path


def write_input_data(path: Path, texts: Sequence[str], *, with_batch_dim: bool = False) -> None:
    """perf_analyzer ``--input-data`` JSON: one request per text, in order."""
    shape = [1, 1] if with_batch_dim else [1]
    data = {"data": [{TEXT: {"content": [text], "shape": shape}} for text in texts]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def run_perf_analyzer(
    config: str, model: str, url: str, input_data: Path, concurrency: int, sweep: Sweep, workdir: Path
) -> PerfPoint:
    """Measure ``model`` at one concurrency; raise BenchError with perf_analyzer's reason on failure."""
    csv_path = workdir / f"{config}_c{concurrency}.csv"
    command = [
        str(perf_analyzer_binary()),
        "-m", model,
        "-u", url,
        "-i", sweep.protocol,
        "--input-data", str(input_data),
        "--concurrency-range", str(concurrency),
        *(["-b", str(sweep.batch_size)] if sweep.batch_size > 1 else []),
        *sweep.measurement_flags(),
        "-f", str(csv_path),
        "--verbose-csv",
    ]  # fmt: skip
    result = _run(command, model, concurrency)
    stable = True
    unsettled = "Failed to obtain stable measurement" in result.stdout + result.stderr
    if result.returncode != 0 and unsettled and not sweep.fixed_requests:
        # A noisy machine: measure again with a relaxed threshold and say so in the report.
        stable = False
        relaxed = [*command[: command.index("--stability-percentage") + 1], "50",
                   *command[command.index("--stability-percentage") + 2 :]]  # fmt: skip
        result = _run(relaxed, model, concurrency)
    if result.returncode != 0 or not csv_path.is_file():
        lines = [ln for ln in (result.stdout + result.stderr).splitlines() if ln.strip()]
        reason = next(
            (ln for ln in reversed(lines) if "rror" in ln or "fail" in ln.lower()), lines[-1] if lines else ""
        )
        raise BenchError(f"perf_analyzer on `{model}` at concurrency {concurrency} failed: {reason.strip()}")
    (workdir / f"{config}_c{concurrency}.log").write_text(result.stdout)
    point = parse_csv(csv_path, config)
    return point if stable else dataclasses.replace(point, stable=False)


_HANG_S = 1800  # one point of a real sweep takes seconds to minutes; this only stops a hung perf_analyzer


def _run(command: list[str], model: str, concurrency: int) -> subprocess.CompletedProcess[str]:
    """perf_analyzer, stopped with a BenchError (and what it printed) if it hangs."""
    try:
        return subprocess.run(command, capture_output=True, text=True, env=server_environment(), timeout=_HANG_S)
    except subprocess.TimeoutExpired as exc:
        printed = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        last = [ln for ln in printed.splitlines() if ln.strip()][-1:] or ["nothing"]
        raise BenchError(
            f"perf_analyzer on `{model}` at concurrency {concurrency} was still running after {_HANG_S} s "
            f"(last printed: {last[0].strip()}); see the server's log"
        ) from None


def parse_csv(path: Path, config: str) -> PerfPoint:
    """The first measurement row of a perf_analyzer CSV."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise BenchError("perf_analyzer wrote no measurement to {path}", path=path)
    row = rows[0]
    return PerfPoint(
        config=config,
        concurrency=int(row["Concurrency"]),
        throughput=float(row["Inferences/Second"]),
        p50_ms=float(row["p50 latency"]) / 1000,
        p95_ms=float(row["p95 latency"]) / 1000,
        p99_ms=float(row["p99 latency"]) / 1000,
        avg_ms=float(row["Avg latency"]) / 1000,
    )
