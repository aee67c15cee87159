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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tritongen.bench.http_load import HttpTarget, Interleaving, openai_target
from tritongen.bench.peer import PeerComparison, compare_with_peer
from tritongen.bench.process import http_process, venv_executable
from tritongen.errors import BenchError

__all__ = ["ST_PATH", "ST_SCRIPT", "ST_VENV", "Fp32Check", "compare_with_script", "st_executable", "st_server"]

ST_VENV = Path(".venv-st")
ST_SCRIPT = Path(__file__).with_name("st_fastapi.py")
ST_PATH = "/v1/embeddings"


def st_executable() -> Path | None:
    """The python of the sentence-transformers venv once ``make st-venv`` finished it, or None."""
    return venv_executable(ST_VENV, "python")


@contextlib.contextmanager
def st_server(
    checkpoint: str | Path, log: Path, *, quantize: bool = True, threads: int = 0, isa: str | None = None
) -> Iterator[str]:
    """Start the script on ``checkpoint`` (a local folder; offline) on a free port; stop it and its children.

    What it writes (the ONNX export, the INT8 model, Hugging Face's cache) goes to a temporary folder, removed
    at exit; the checkpoint is only read. ``threads`` 0 leaves ONNX Runtime its default (one per core). ``isa``
    picks the quantization config (``avx2``, ``avx512``, ``avx512_vnni``, ``arm64``); None: this CPU's best.
    """
    executable = st_executable()
    if executable is None:
        raise BenchError(f"the script peer needs {ST_VENV} with sentence-transformers; run `make st-venv`")
    with tempfile.TemporaryDirectory(prefix="tritongen-st-") as scratch:

        def command(port: int) -> list[str]:
            return [
                str(executable), str(ST_SCRIPT), "--model", str(checkpoint), "--port", str(port),
                "--cache", str(Path(scratch) / "model"), "--threads", str(threads),
                *([] if quantize else ["--no-quantize"]), *(["--isa", isa] if isa else []),
            ]  # fmt: skip

        inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # its own venv
        env = {**inherited, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
               "HF_HOME": str(Path(scratch) / "hf"), "TMPDIR": scratch}  # fmt: skip
        with http_process(command, log, what="the script peer", env=env, timeout=300) as url:
            yield url


@dataclass(frozen=True)
class Fp32Check:
    """FP32 PyTorch's embeddings (``reference``: texts -> rows) and the text sets each side is compared with it on."""

    reference: Callable[[list[str]], np.ndarray]
    sets: Mapping[str, Sequence[str]]

    def rows(self, sides: Mapping[str, HttpTarget]) -> list[tuple[str, str, int, float, float, float]]:
        """Per set and side: (set, side, texts, min cosine, median, the shortest text's cosine)."""
        rows = []
        for name, texts in self.sets.items():
            texts = list(texts)
            want = self.reference(texts)
            shortest = min(range(len(texts)), key=lambda i: len(texts[i]))
            for side, target in sides.items():
                got = target.embed(texts)
                cosines = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
                rows.append((name, side, len(texts), float(cosines.min()), float(np.median(cosines)),
                             float(cosines[shortest])))  # fmt: skip
        return rows


def compare_with_script(
    ours: HttpTarget,
    name: str,
    script_url: str,
    texts: Sequence[str],
    plan: Interleaving,
    progress: Callable[[str], None] = lambda _: None,
    fp32: Fp32Check | None = None,
) -> PeerComparison:
    """Drive the ensemble (``ours``: Triton's API or the gateway's) and the script serving ``name``, interleaved.

    With ``fp32``, each side's embeddings are also set against FP32 PyTorch on every text of its sets.
    """
    script = openai_target("sentence-transformers ONNX INT8 + FastAPI (the script)", script_url, name, path=ST_PATH)
    comparison = compare_with_peer(ours, script, texts, plan, progress, heading="(f) the script")
    if fp32 is None:
        return comparison
    progress("  both sides against FP32 PyTorch…")
    return replace(comparison, against_fp32=fp32.rows({ours.label: ours, "the script": script}))
