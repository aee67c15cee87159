"""The script peer for embedding models: what a savvy user runs instead of Triton, in 40-odd lines.

:mod:`tritongen.bench.st_fastapi` is that script: sentence-transformers on its ONNX backend, quantized to INT8 by
its own ``export_dynamic_quantized_onnx_model`` for this CPU's instruction set, behind a plain FastAPI ``def``
endpoint in uvicorn's thread pool, speaking OpenAI's ``/v1/embeddings`` (drive it with
:func:`tritongen.bench.http_load.openai_target` and ``path=ST_PATH``). It runs in its own venv (``make st-venv``
creates ``.venv-st``: torch 2.13 CPU, ``sentence-transformers[onnx]``, FastAPI, uvicorn), never in tritongen's.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from tritongen.bench.http_load import Interleaving, kserve_target, openai_target
from tritongen.bench.infinity import PeerComparison, compare_with_peer
from tritongen.bench.process import http_process, venv_executable
from tritongen.errors import BenchError
from tritongen.serve.server import free_port

__all__ = ["ST_PATH", "ST_SCRIPT", "ST_VENV", "compare_with_script", "st_executable", "st_server"]

ST_VENV = Path(".venv-st")
ST_SCRIPT = Path(__file__).with_name("st_fastapi.py")
ST_PATH = "/v1/embeddings"


def st_executable() -> Path | None:
    """The python of the sentence-transformers venv once ``make st-venv`` finished it, or None."""
    return venv_executable(ST_VENV, "python")


@contextlib.contextmanager
def st_server(checkpoint: str | Path, log: Path, *, quantize: bool = True, threads: int = 0) -> Iterator[str]:
    """Start the script on ``checkpoint`` (a local folder; offline) on a free port; stop it and its children.

    What it writes (the ONNX export, the INT8 model, Hugging Face's cache) goes to a temporary folder, removed
    at exit; the checkpoint is only read. ``threads`` 0 leaves ONNX Runtime its default (one per core).
    """
    executable = st_executable()
    if executable is None:
        raise BenchError(f"the script peer needs {ST_VENV} with sentence-transformers; run `make st-venv`")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tritongen-st-") as scratch:
        command = [
            str(executable), str(ST_SCRIPT), "--model", str(checkpoint), "--port", str(port),
            "--cache", str(Path(scratch) / "model"), "--threads", str(threads),
            *([] if quantize else ["--no-quantize"]),
        ]  # fmt: skip
        inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # its own venv
        env = {**inherited, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
               "HF_HOME": str(Path(scratch) / "hf"), "TMPDIR": scratch}  # fmt: skip
        with http_process(command, port, log, what="the script peer", env=env, timeout=300) as url:
            yield url


def compare_with_script(
    triton_url: str,
    name: str,
    script_url: str,
    texts: Sequence[str],
    plan: Interleaving,
    progress: Callable[[str], None] = lambda _: None,
) -> PeerComparison:
    """Drive the ensemble ``name`` and the script in interleaved rounds, one HTTP/JSON text per request each."""
    ours = kserve_target(f"`{name}`", triton_url, name)
    script = openai_target("sentence-transformers ONNX INT8 + FastAPI (the script)", script_url, name, path=ST_PATH)
    return compare_with_peer(ours, script, texts, plan, progress, heading="(f) the script")
