"""What the OpenAI/TEI gateway adds in front of an embedding ensemble: latency at c1, throughput at c16.

Starts Triton on REPOSITORY and the gateway in front of it (both up at once), then drives NAME directly
(Triton's HTTP/JSON API) and through the gateway (``/v1/embeddings``) in interleaved rounds with the same
texts (tritongen.bench.gateway). ``make bench BENCH_ARGS="--baselines gateway"`` measures the same inside the bench.

    PYTHONPATH=$PWD .venv/bin/python scripts/gateway_bench.py --repository model_repository --name minilm
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tritongen.bench.gateway import compare_with_gateway, gateway_server
from tritongen.bench.http_load import Interleaving
from tritongen.data.datasets import bench_texts
from tritongen.serve.server import Endpoints, TritonServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--name", default="minilm", help="an embedding ensemble of the repository")
    parser.add_argument("--concurrency", default="1,16", help="comma-separated concurrencies")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per side, round, concurrency")
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--paired", type=int, default=1000, help="requests per side of the paired c1 measurement")
    args = parser.parse_args()
    texts = bench_texts(args.texts)
    server = TritonServer(args.repository, Endpoints.free(), models=[args.name])
    with server, tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        with gateway_server(server.grpc_url, args.repository, Path(tmp) / "gateway.log") as url:
            plan = Interleaving([int(c) for c in args.concurrency.split(",")], args.rounds, args.seconds)
            comparison = compare_with_gateway(
                server.http_url, args.name, url, texts, plan, paired_requests=args.paired, progress=print
            )
    print(comparison.to_markdown())


if __name__ == "__main__":
    main()
