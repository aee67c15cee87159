"""Benchmarks through the real server with perf_analyzer, side by side with baselines."""

from tritongen.bench.perf import PerfPoint, Sweep
from tritongen.bench.report import BenchReport
from tritongen.bench.run import BenchOptions, run_bench

__all__ = ["BenchOptions", "BenchReport", "PerfPoint", "Sweep", "run_bench"]
