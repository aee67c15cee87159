"""Baseline (d), the peer for embedding models: infinity-emb serving the same checkpoint.

infinity-emb (torch engine, its own dynamic batching) is what many teams run instead of Triton for
embeddings. It installs into its own venv (``make infinity-venv`` creates ``.venv-infinity``: torch 2.13 CPU
and ``infinity-emb[torch,server]``), because it pins transformers 4 and sentence-transformers 3. The bench
starts it beside the Triton server, so both meet the same machine at once, and drives both with one HTTP/JSON
load generator (:mod:`tritongen.bench.http_load`) in interleaved rounds; the report gives the median of the
per-round ratios at each concurrency, and checks that the two sides' embeddings agree (cosine).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from tritongen.bench.http_load import HttpTarget, Interleaving, openai_target
from tritongen.bench.peer import PeerComparison, compare_with_peer
from tritongen.bench.process import http_process, venv_executable
from tritongen.errors import BenchError

__all__ = ["INFINITY_VENV", "compare_with_infinity", "infinity_executable", "infinity_server"]

INFINITY_VENV = Path(".venv-infinity")


def infinity_executable() -> Path | None:
    """``infinity_emb`` of the infinity venv once ``make infinity-venv`` finished it, or None."""
    return venv_executable(INFINITY_VENV, "infinity_emb")


@contextlib.contextmanager
def infinity_server(checkpoint: str, name: str, log: Path, *, batch_size: int = 32) -> Iterator[str]:
    """Start infinity-emb on ``checkpoint`` (a local folder; offline) on a free port; stop it and its children."""
    executable = infinity_executable()
    if executable is None:
        raise BenchError(f"baseline infinity needs {INFINITY_VENV} with infinity-emb; run `make infinity-venv`")

    def command(port: int) -> list[str]:
        return [
            str(executable), "v2", "--model-id", checkpoint, "--served-model-name", name, "--engine", "torch",
            "--device", "cpu", "--port", str(port), "--batch-size", str(batch_size), "--no-bettertransformer",
        ]  # fmt: skip

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
           "INFINITY_ANONYMOUS_USAGE_STATS": "0"}  # fmt: skip
    with http_process(command, log, what="infinity-emb", env=env, timeout=300) as url:
        yield url


def compare_with_infinity(
    ours: HttpTarget,
    name: str,
    peer_url: str,
    texts: Sequence[str],
    plan: Interleaving,
    progress: Callable[[str], None] = lambda _: None,
) -> PeerComparison:
    """Drive the ensemble (``ours``: Triton's API or the gateway's) and infinity-emb serving ``name``, interleaved."""
    peer = openai_target("infinity-emb (torch engine)", peer_url, name)
    return compare_with_peer(ours, peer, texts, plan, progress)
