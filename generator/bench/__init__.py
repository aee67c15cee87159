"""Benchmarks through the real server with perf_analyzer, side by side with baselines."""

from generator.bench.perf import PerfPoint, Sweep
from generator.bench.report import BenchReport
from generator.bench.run import BenchOptions, run_bench

__all__ = ["BenchOptions", "BenchReport", "PerfPoint", "Sweep", "run_bench"]
