"""The overload table of docs/benchmarks.md: MiniLM with and without a model-step queue limit, one burst each.

.venv/bin/python scripts/overload.py [--queue 128] [--concurrency 256] [--seconds 20]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tritongen.bench.overload import HEADER, run_burst
from tritongen.builder.pipeline import build_repository
from tritongen.buildspec import BuildSpec, DynamicBatchingSettings, QueuePolicy
from tritongen.model.checkpoint import bundled_minilm
from tritongen.serve.server import running_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, default=128, help="max_queue_size of the limited build")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    repo = Path(tempfile.mkdtemp()) / "repo"
    checkpoint = str(bundled_minilm())
    for name, size in (("unbounded", 0), ("limited", args.queue)):
        batching = DynamicBatchingSettings(queue_policy=QueuePolicy(max_queue_size=size))
        build_repository(BuildSpec(model=checkpoint, name=name, repository=repo, dynamic_batching=batching))
    with running_server(repo) as server:
        rows = [
            run_burst(name, url, protocol=protocol, concurrency=args.concurrency, seconds=args.seconds)
            for protocol, url in (("grpc", server.grpc_url), ("http", server.http_url))
            for name in ("unbounded", "limited")
        ]
    print(HEADER)
    print("\n".join(row.row() for row in rows))


if __name__ == "__main__":
    main()
