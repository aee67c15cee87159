"""Benchmarks through the real server with perf_analyzer, side by side with baselines; the tuning sweep; the soak.

A face only: ``tritongen.bench.run`` holds the entry (``run_bench``), and importing this package loads nothing.
"""
