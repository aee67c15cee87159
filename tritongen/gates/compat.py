"""Run what we emit in the runtimes of the Triton container it ships in: does it load, and give what we gated.

Each supported container (``tritongen.containers``) builds each native backend against one release of its
runtime (the onnxruntime backend against one ONNX Runtime, the openvino backend against one OpenVINO), older
than the ones we build with, and the two differ (static INT8 QDQ by up to 0.04 on normalised embeddings
between ORT 1.19 and 1.2x). So the build checks the served model in those releases as well, from pip wheels
in a venv of the container's Python: ``make compat-venv`` creates ``.venv-containers/<release>/runtimes``
for every supported release, with every registered runtime's release there.

:class:`ContainerSession` runs one model in that venv's Python, a worker process fed through pipes, and
quacks like an ``InferenceSession`` (``run(None, feeds)``), so the accuracy gate can measure it unchanged.
The worker is a standalone script: the runtime's *opening* (its ``Runtime.container_opening``, which imports
only the runtime's own package and opens the file), then the pipe loop below. An ONNX file opens in ONNX
Runtime unless an opening is given: the ONNX files the gates check (the fold's proof, the INT8 search's
candidates) run there, as they do here.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tritongen.errors import StageError

if TYPE_CHECKING:
    from tritongen.gates.accuracy import AccuracyReport

__all__ = [
    "VENVS",
    "ContainerCheck",
    "ContainerReport",
    "ContainerSession",
    "check_in_container",
    "container_gate",
    "container_python",
    "max_relative_diff",
]

VENVS = Path(".venv-containers")  # <release>/runtimes: the container's release of every registered runtime
VENV_ENV = "TRITONGEN_CONTAINER_VENV"  # a venv to use instead, for every release

# An ONNX file in ONNX Runtime's CPU provider: the default opening (see the module's docstring).
ONNX_RUNTIME_OPENING = r"""
import onnxruntime as ort
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
version, run = ort.__version__, session.run
label = "ONNX Runtime " + version
"""

# Before the opening: the file and the precision, from the command line.
_ARGUMENTS = r"""
import sys
model, precision = sys.argv[1], sys.argv[2]
"""

# After it: answer pickled (names, feeds) requests with run's outputs, until stdin closes.
_LOOP = r"""
import pickle, struct
out = sys.stdout.buffer
def send(obj):
    data = pickle.dumps(obj, protocol=4)
    out.write(struct.pack("<Q", len(data))); out.write(data); out.flush()
send((version, label))
while True:
    head = sys.stdin.buffer.read(8)
    if len(head) < 8:
        break
    names, feeds = pickle.loads(sys.stdin.buffer.read(struct.unpack("<Q", head)[0]))
    try:
        send(("ok", run(names, feeds)))
    except Exception as exc:
        send(("error", f"{type(exc).__name__}: {exc}"))
"""


def container_python(release: str | None = None) -> Path | None:
    """The Python of container ``release``'s runtime venv (default: the default container's), or None without one.

    Looked for in ``$TRITONGEN_CONTAINER_VENV``, else in the working folder, else beside a source checkout of
    this package (an editable install run from elsewhere).
    """
    from tritongen.containers import container

    default = VENVS / container(release).release / "runtimes"
    asked = os.environ.get(VENV_ENV)
    roots = [Path(asked)] if asked else [Path.cwd() / default, Path(__file__).resolve().parents[2] / default]
    for root in roots:
        python = root / "bin" / "python"
        if python.is_file():
            return python
    return None


class ContainerSession:
    """One model in the container's runtime (another process); ``run`` as ``InferenceSession.run``.

    ``opening`` opens ``model`` there at ``precision`` (a runtime's ``container_opening``; default: an ONNX file
    in ONNX Runtime). ``version`` is what the runtime reports, ``label`` the runtime and its release for people.
    """

    def __init__(
        self, model: Path, python: Path, precision: str = "f32", *, opening: str = ONNX_RUNTIME_OPENING
    ) -> None:
        self.model = Path(model)
        self.process = subprocess.Popen(
            [str(python), "-c", _ARGUMENTS + opening + _LOOP, str(self.model), precision],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            self.version, self.label = self._receive()
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


@dataclass(frozen=True)
class ContainerReport:
    """The served model in the container's runtime: lossless models against ours, lossy ones through the gate."""

    runtime: str  # what the runtime reports (the session's ``version``), as ``build.json`` records it
    criterion: str  # "parity" (within the tolerance of our runtime's outputs) or "gate" (the accuracy gate)
    container: str  # the Triton release whose runtime this is
    passed: bool
    max_relative_diff: float | None = None
    tolerance: float | None = None
    accuracy: AccuracyReport | None = None
    label: str = ""  # the runtime and its release, for people (the session's ``label``); not recorded

    def summary(self) -> str:
        """One line for the console, the model card and errors."""
        verdict = "passes" if self.passed else "FAILS"
        runtime = self.label or self.runtime
        if self.criterion == "parity":
            return (
                f"{runtime} (the {self.container} container's) {verdict}: outputs within "
                f"{self.max_relative_diff:.2e} of ours (tolerance {self.tolerance:g})"
            )
        assert self.accuracy is not None
        return f"{runtime} (the {self.container} container's) {verdict} the gate: {self.accuracy.summary()}"

    def to_dict(self) -> dict[str, Any]:
        """For ``build.json``."""
        data = asdict(self)
        data["accuracy"] = None if self.accuracy is None else self.accuracy.__dict__
        del data["label"]
        return data


@dataclass(frozen=True)
class ContainerCheck:
    """What the served model is held to in the container's runtime.

    Without ``reference`` (a lossless model: FP32, fusions) every batch of ``feeds`` must give our runtime's
    outputs within ``tolerance`` (``numpy.allclose`` with ``rtol = atol = tolerance``). With a gate
    ``reference`` (FP16, INT8) the gate is measured again there and must pass: ``variant`` names the model,
    ``batch_dependent`` as the gate takes it. ``container`` is the Triton release, for the report.
    """

    feeds: list[dict[str, np.ndarray]]
    tolerance: float
    reference: Any = None
    variant: str = ""
    batch_dependent: bool = False
    container: str = ""


def check_in_container(session: ContainerSession, check: ContainerCheck) -> ContainerReport:
    """Hold the model that ``session`` runs in the container's runtime to ``check``."""
    if check.reference is not None:
        report = _gate_in(session, check.reference, check.variant, check.batch_dependent)
        return ContainerReport(
            session.version, "gate", check.container, report.passed, accuracy=report, label=session.label
        )
    return _parity_in(session, check)


def _parity_in(session: ContainerSession, check: ContainerCheck) -> ContainerReport:
    """The container's outputs on every batch of ``check.feeds`` against our runtime's (the ONNX file here)."""
    import onnxruntime as ort

    ours = ort.InferenceSession(str(session.model), providers=["CPUExecutionProvider"])
    worst, passed = 0.0, True
    for batch in check.feeds:
        for mine, theirs in zip(ours.run(None, batch), session.run(None, batch), strict=True):
            worst = max(worst, max_relative_diff(mine, theirs))
            passed = passed and bool(np.allclose(theirs, mine, rtol=check.tolerance, atol=check.tolerance))
    return ContainerReport(
        session.version, "parity", check.container, passed, max_relative_diff=worst, tolerance=check.tolerance,
        label=session.label,
    )  # fmt: skip


def _gate_in(session: ContainerSession, reference: Any, label: str, batch_dependent: bool) -> AccuracyReport:
    """The accuracy gate ``reference`` measured on ``session`` (the container's runtime)."""
    return reference.measure(session, f"{label} in {session.label}", batch_dependent=batch_dependent)


def container_gate(
    reference: Any, open_session: Callable[[Path], ContainerSession]
) -> Callable[[Path, str, bool], AccuracyReport]:
    """``gate(model, label, batch_dependent)``: the gate ``reference`` measured on ``open_session(model)``."""

    def gate(model: Path, label: str, batch_dependent: bool) -> AccuracyReport:
        with open_session(model) as session:
            return _gate_in(session, reference, label, batch_dependent)

    return gate


if __name__ == "__main__":  # pragma: no cover - a manual probe: python -m tritongen.gates.compat model.onnx
    python = container_python()
    if python is None:
        sys.exit("no container venv; run `make compat-venv`")
    with ContainerSession(Path(sys.argv[1]), python) as probe:
        print(f"{sys.argv[1]} loads in {probe.label}")
