"""Several embedding ensembles of one repository, served at once, measured in interleaved rounds.

    .venv/bin/python scripts/interleave_bench.py --repository model_repository --names minilm,minilm_unfold \\
        [--concurrency 1,16] [--rounds 4] [--seconds 10]

``make bench --compare`` measures each ensemble in its own time window with perf_analyzer; on a noisy 2-core
machine the windows meet different conditions. Here each round drives every ensemble once per concurrency
(in rotating order) with the bench's HTTP/JSON load generator (``tritongen.bench.http_load``), and the table
gives medians over rounds and the median of the per-round ratios against the first name.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from tritongen.bench.http_load import drive, kserve_target
from tritongen.data.datasets import bench_texts
from tritongen.serve.server import running_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--names", required=True, help="comma-separated embedding ensembles; the first is the base")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--texts", type=int, default=512)
    args = parser.parse_args()
    names = [n for n in args.names.split(",") if n]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    texts = bench_texts(args.texts)
    results: dict[tuple[str, int], list] = {(n, c): [] for n in names for c in concurrencies}
    with running_server(args.repository, models=names) as server:
        targets = [kserve_target(n, server.http_url, n) for n in names]
        for target in targets:  # every model warm before the first round
            drive(target, texts[:32], 2, 1.0, warmup=0.5)
        for round_index in range(args.rounds):
            for concurrency in concurrencies:
                shift = round_index % len(targets)
                for target in targets[shift:] + targets[:shift]:
                    print(f"round {round_index + 1}/{args.rounds}: {target.label} at {concurrency}…", file=sys.stderr)
                    results[(target.label, concurrency)].append(drive(target, texts, concurrency, args.seconds))
    print(
        f"{len(texts)} bench texts, {args.rounds} interleaved rounds of {args.seconds:.0f} s per ensemble and "
        f"concurrency, one HTTP/JSON load generator; medians\n"
    )
    print("| ensemble | concurrency | req/s | p50 ms | p99 ms | vs first (median of rounds) |")
    print("|---|---:|---:|---:|---:|---:|")
    for concurrency in concurrencies:
        base = results[(names[0], concurrency)]
        for name in names:
            runs = results[(name, concurrency)]
            ratio = statistics.median(r.throughput / b.throughput for r, b in zip(runs, base, strict=True))
            print(
                f"| {name} | {concurrency} | {statistics.median(r.throughput for r in runs):.1f} | "
                f"{statistics.median(r.percentile(50) for r in runs):.1f} | "
                f"{statistics.median(r.percentile(99) for r in runs):.1f} | {ratio:.2f}x |"
            )


if __name__ == "__main__":
    main()
