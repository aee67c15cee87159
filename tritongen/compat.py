"""Run what we emit in the ONNX Runtime of the 24.10 container, from here: does it load, and give what we gated.

``nvcr.io/nvidia/tritonserver:24.10-py3`` (Triton 2.51) builds its onnxruntime backend against ONNX Runtime
1.19.2: the server repository's ``build.py`` on the ``r24.10`` branch maps ``"2.51.0"`` to ORT ``"1.19.2"`` in
``TRITON_VERSION_MAP``. We build with a newer release, and the two differ (static INT8 QDQ by up to 0.04 on
normalised embeddings), so the build checks the served model in that release as well, in a separate venv
(``make compat-venv`` creates ``.venv-ort-container`` with ``onnxruntime==1.19.2``).

:class:`ContainerSession` runs one model in that venv's Python, a worker process fed through pipes, and
quacks like an ``InferenceSession`` (``run(None, feeds)``), so the accuracy gate can measure it unchanged.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.errors import StageError

__all__ = ["CONTAINER_ORT", "DEFAULT_VENV", "ContainerSession", "container_python", "max_relative_diff"]

CONTAINER_ORT = "1.19.2"
DEFAULT_VENV = Path(".venv-ort-container")
VENV_ENV = "TRITONGEN_CONTAINER_VENV"  # overrides DEFAULT_VENV

_WORKER = r"""
import pickle, struct, sys
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
out = sys.stdout.buffer
def send(obj):
    data = pickle.dumps(obj, protocol=4)
    out.write(struct.pack("<Q", len(data))); out.write(data); out.flush()
send(ort.__version__)
while True:
    head = sys.stdin.buffer.read(8)
    if len(head) < 8:
        break
    names, feeds = pickle.loads(sys.stdin.buffer.read(struct.unpack("<Q", head)[0]))
    try:
        send(("ok", session.run(names, feeds)))
    except Exception as exc:
        send(("error", f"{type(exc).__name__}: {exc}"))
"""


def container_python(venv: Path | None = None) -> Path | None:
    """The container-runtime venv's Python, or None when that venv was not created."""
    root = Path(venv or os.environ.get(VENV_ENV) or DEFAULT_VENV)
    if not root.is_absolute():
        root = Path.cwd() / root
    python = root / "bin" / "python"
    return python if python.is_file() else None


class ContainerSession:
    """One ONNX model in the container's ONNX Runtime (another process); ``run`` as ``InferenceSession.run``."""

    def __init__(self, model: Path, python: Path) -> None:
        self.model = Path(model)
        self.process = subprocess.Popen(
            [str(python), "-c", _WORKER, str(self.model)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            self.version = self._receive()
        except StageError:
            self.close()
            raise

    def _receive(self) -> Any:
        assert self.process.stdout is not None
        head = self.process.stdout.read(8)
        if len(head) < 8:
            error = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
            last = [line for line in error.splitlines() if line.strip()][-1:] or ["it exited"]
            raise StageError("container runtime check", RuntimeError(f"{self.model.name} did not load: {last[0]}"))
        return pickle.loads(self.process.stdout.read(struct.unpack("<Q", head)[0]))

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs of one run, as ``InferenceSession.run`` returns them."""
        assert self.process.stdin is not None
        data = pickle.dumps((output_names, {k: np.asarray(v) for k, v in feeds.items()}), protocol=4)
        self.process.stdin.write(struct.pack("<Q", len(data)) + data)
        self.process.stdin.flush()
        status, value = self._receive()
        if status != "ok":
            raise StageError("container runtime check", RuntimeError(value))
        return value

    def close(self) -> None:
        """Stop the worker."""
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()  # type: ignore[union-attr]
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream:
                stream.close()

    def __enter__(self) -> ContainerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def max_relative_diff(a: np.ndarray, b: np.ndarray) -> float:
    """The largest ``|a - b| / (1 + |a|)`` (relative for large values, absolute near zero)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a64 - b64) / (1.0 + np.abs(a64)))) if a64.size else 0.0


if __name__ == "__main__":  # pragma: no cover - a manual probe: python -m tritongen.compat model.onnx
    python = container_python()
    if python is None:
        sys.exit("no container venv; run `make compat-venv`")
    with ContainerSession(Path(sys.argv[1]), python) as probe:
        print(f"{sys.argv[1]} loads in ONNX Runtime {probe.version}")
