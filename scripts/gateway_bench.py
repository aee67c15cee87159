"""What the OpenAI/TEI gateway adds in front of an embedding ensemble: latency at c1, throughput at c16.

Starts Triton on REPOSITORY and the gateway in front of it (both up at once), then drives NAME directly
(Triton's HTTP/JSON API) and through the gateway (``/v1/embeddings``) in interleaved rounds with the same
texts (tritongen.bench.gateway). ``make bench BENCH_ARGS="--baselines gateway"`` measures the same inside the bench.
``--cpu-seconds S`` then drives the gateway alone for S seconds at each concurrency and prints its own process's
CPU time per request (user + system, from /proc), the cost a node's cores pay for it.

    PYTHONPATH=$PWD .venv/bin/python scripts/gateway_bench.py --repository model_repository --name minilm \
        [--cpu-seconds 10]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from tritongen.bench.gateway import GatewaySetup, compare_with_gateway, gateway_server
from tritongen.bench.http_load import Interleaving, drive, openai_target
from tritongen.data.datasets import bench_texts
from tritongen.serve.server import Endpoints, TritonServer


def _process_on_port(port: int) -> int:
    """The pid of the ``tritongen gateway`` started with ``--port port``."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gateway" in argv and b"--port" in argv and str(port).encode() in argv:
            return int(entry.name)
    raise SystemExit(f"no gateway process on port {port}")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def cpu_per_request(url: str, name: str, texts: list[str], concurrencies: list[int], seconds: float) -> None:
    """Print the gateway process's CPU ms per answered request at each concurrency."""
    pid, target = _process_on_port(int(url.rsplit(":", 1)[1])), openai_target("gateway", url, name, "/v1/embeddings")
    print("| concurrency | req/s | gateway CPU ms per request |\n|---:|---:|---:|")
    for concurrency in concurrencies:
        drive(target, texts[:32], concurrency, 1.0, warmup=0.5)
        before = _cpu_seconds(pid)
        load = drive(target, texts, concurrency, seconds, warmup=0)
        spent = _cpu_seconds(pid) - before
        print(f"| {concurrency} | {load.throughput:.1f} | {spent / max(1, len(load.latencies_ms)) * 1e3:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--name", default="minilm", help="an embedding ensemble of the repository")
    parser.add_argument("--concurrency", default="1,16", help="comma-separated concurrencies")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per side, round, concurrency")
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--paired", type=int, default=1000, help="requests per side of the paired c1 measurement")
    parser.add_argument("--cpu-seconds", type=float, default=0.0, help="then the gateway's CPU per request (0: no)")
    parser.add_argument("--max-triton-calls", type=int, help="the gateway's option of that name (default: its own)")
    args = parser.parse_args()
    texts = bench_texts(args.texts)
    server = TritonServer(args.repository, Endpoints.free(), models=[args.name])
    with server, tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        extra = [] if args.max_triton_calls is None else ["--max-triton-calls", str(args.max_triton_calls)]
        log = Path(tmp) / "gateway.log"
        with gateway_server(server.grpc_url, server.http_url, args.repository, log, args=extra) as (url, pid):
            concurrencies = [int(c) for c in args.concurrency.split(",")]
            plan = Interleaving(concurrencies, args.rounds, args.seconds)
            assert server.process is not None
            setup = GatewaySetup(server.http_url, url, (server.process.pid, pid))
            comparison = compare_with_gateway(
                setup, args.name, texts, plan, paired_requests=args.paired, progress=print
            )
            print(comparison.to_markdown())
            if args.cpu_seconds:
                cpu_per_request(url, args.name, texts, concurrencies, args.cpu_seconds)


if __name__ == "__main__":
    main()
