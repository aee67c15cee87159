"""Errors raised by tritongen, all in one module.

Every error a user can cause is a subclass of :class:`TritongenError`; the CLI maps
them to a one-line message and exit code 2. The tree::

    TritongenError
    ├── UsageError               the command line is incomplete or contradictory
    ├── CheckpointError          the checkpoint is missing, unreadable or corrupt
    ├── UnsupportedModelError    architecture or task we cannot deploy
    │   └── CapabilityError      the checkpoint failed one step of the capability check (names the step)
    ├── SpecError                invalid build settings (or an unreadable texts file they name)
    ├── ExportError              ONNX export or quantisation failed
    ├── ParityError              exported model disagrees with PyTorch
    ├── AccuracyError            the optimised model fails the accuracy gate
    ├── StageError               an unexpected failure inside one build stage (names the stage)
    ├── ConfigValidationError    a rendered config.pbtxt or the ensemble wiring is wrong
    ├── RepositoryError          the output repository cannot be read or written
    ├── EngineError              a TensorRT engine cannot be built here
    ├── ServerError              tritonserver could not start or answer
    │   ├── PortTakenError       a port a server was given was in use when it tried to listen there
    │   └── ServerCrashedError   tritonserver died of a signal while it served
    ├── RolloutError             a roll-out or rollback stopped; the version that served still does
    ├── BenchError               perf_analyzer or a baseline failed
    ├── DeployError              a deploy folder, manifest set or capacity plan cannot be made
    └── GatewayError             one gateway request failed (its HTTP status and OpenAI error fields)

The path and log file an error is about are attributes (``exc.path``, ``exc.log_file``), and so
are a :class:`StageError`'s ``stage`` and ``cause``; the message is rendered from them. The steps of the
capability check carry ``stage`` too: a :class:`CapabilityError`'s (``model type``, ``remote code``,
``task head``, ``weights``), ``export`` on an :class:`ExportError`, ``parity`` on a :class:`ParityError`. A message
places the path with a ``{path}`` marker (``"checkpoint {path} has no config.json"``), else the
path leads it. ``QAInputError`` in ``tasks/question_answering/qa.py`` is deliberately not here: that module
runs inside Triton's Python backend, which has no tritongen to import.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "AccuracyError",
    "BenchError",
    "CapabilityError",
    "CheckpointError",
    "ConfigValidationError",
    "DeployError",
    "EngineError",
    "ExportError",
    "GatewayError",
    "ParityError",
    "PortTakenError",
    "RepositoryError",
    "RolloutError",
    "ServerCrashedError",
    "ServerError",
    "SpecError",
    "StageError",
    "TritongenError",
    "UnsupportedModelError",
    "UsageError",
    "describe",
    "stage",
]

_PATH_MARKER = "{path}"


class TritongenError(Exception):
    """Base class of every error tritongen raises on purpose; never raised itself.

    ``path`` is the file or folder the error is about and ``log_file`` the log that holds the rest
    of the story; both are kept as attributes and rendered into the one-line message.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        log_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.message = message
        self.path = None if path is None else Path(path)
        self.log_file = None if log_file is None else Path(log_file)
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.message
        if self.path is not None:
            # A literal replace, not str.format: messages quote library text that may hold braces.
            shown = f"`{self.path}`"
            text = text.replace(_PATH_MARKER, shown) if _PATH_MARKER in text else f"{shown}: {text}"
        if self.log_file is not None:
            text += f" (log: {self.log_file})"
        return text

    def __reduce__(self):  # keyword attributes survive pickling (multiprocessing, pytest-xdist)
        return _rebuild, (type(self), self.__dict__)


def _rebuild(cls: type[TritongenError], state: dict) -> TritongenError:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    Exception.__init__(error, error._render())
    return error


class UsageError(TritongenError):
    """The command line is incomplete or its options contradict each other (the only errors naming flags)."""


class CheckpointError(TritongenError):
    """The checkpoint is missing, unreadable or corrupt."""


class UnsupportedModelError(TritongenError):
    """The checkpoint's architecture or the requested task is not supported."""


class CapabilityError(UnsupportedModelError):
    """The checkpoint failed one step of the capability check that replaces a list of supported model types.

    A model is served when transformers knows its type natively (``model type``), runs no code shipped with
    the checkpoint unless asked to (``remote code``), has the task's head among transformers' auto classes
    (``task head``) whose weights the checkpoint fills (``weights``), exports with dynamic axes
    (:class:`ExportError`) and passes parity (:class:`ParityError`). ``stage`` names the step that failed.
    """

    def __init__(self, stage: str, reason: str, *, path: str | os.PathLike[str] | None = None) -> None:
        self.stage = stage
        self.reason = reason
        super().__init__(f"{stage} check failed: {reason}", path=path)


class SpecError(TritongenError):
    """The build settings are invalid or contradict each other, or a file they name cannot be read."""


class ExportError(TritongenError):
    """Exporting the PyTorch model to ONNX, or quantising it, failed."""

    stage = "export"


class ParityError(TritongenError):
    """The exported model's outputs differ from PyTorch beyond tolerance."""

    stage = "parity"


class AccuracyError(TritongenError):
    """The optimised model lost more accuracy than the gate allows."""


class StageError(TritongenError):
    """Something failed inside one build stage that no check caught (a library error, a model quirk).

    ``stage`` names the stage (``export``, ``parity check``, ...) and ``cause`` keeps the original
    exception; the message is one line built from both, so the CLI never shows a traceback.
    """

    def __init__(self, stage: str, cause: BaseException) -> None:
        self.stage = stage
        self.cause = cause
        super().__init__(f"{stage} failed: {describe(cause)}")


def describe(exc: BaseException, width: int = 300) -> str:
    """``Type: message`` on one line (ONNX Runtime puts the cause on its second line), at most ``width`` long."""
    message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= width else text[: width - 1] + "…"


class ConfigValidationError(TritongenError):
    """A rendered model configuration, or the ensemble wiring, is invalid."""


class RepositoryError(TritongenError):
    """The model repository cannot be read or written."""


class EngineError(TritongenError):
    """A TensorRT engine cannot be built here."""


class ServerError(TritongenError):
    """The Triton server could not be started or did not answer."""


class PortTakenError(ServerError):
    """A port a server was given was in use when it tried to listen there.

    ``what`` is the server, ``ports`` the ports it was given on ``host``. Where we picked them ourselves, one was
    taken between the pick and the server's bind, and the server starts again on others
    (:func:`tritongen.serve.ports.start_on_free_ports`).
    """

    def __init__(
        self, what: str, ports: tuple[int, ...], host: str, *, log_file: str | os.PathLike[str] | None = None
    ) -> None:
        self.what, self.ports, self.host = what, tuple(ports), host
        shown = ", ".join(str(p) for p in self.ports)
        one = "port" if len(self.ports) == 1 else "one of the ports"
        super().__init__(f"{what} could not listen on {host}: {one} {shown} is already in use; choose other ports",
                         log_file=log_file)  # fmt: skip


class ServerCrashedError(ServerError):
    """tritonserver died of a signal (``number``, 11 for a segmentation fault) while it was ``what``."""

    def __init__(self, what: str, number: int, *, log_file: str | os.PathLike[str] | None = None) -> None:
        self.what, self.number = what, number
        super().__init__(f"tritonserver crashed (signal {number}) while {what}; see its log", log_file=log_file)


class RolloutError(TritongenError):
    """A roll-out or rollback stopped (failed canary, load error); the version that served still serves."""


class BenchError(TritongenError):
    """A benchmark run failed."""


class DeployError(TritongenError):
    """A deploy folder, a manifest set or a capacity plan cannot be made from what is on disk."""


class GatewayError(TritongenError):
    """One request to the gateway failed; the client gets it in the error shape of its route's API.

    ``status`` is the HTTP status; ``type``, ``param`` and ``code`` are the OpenAI error body's fields, from
    which :func:`tritongen.gateway.errors.error_response` writes the TEI, vLLM and Cohere shapes.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        self.status, self.type, self.param, self.code = status, type, param, code
        super().__init__(message)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run one build stage: an error no check anticipated becomes a one-line :class:`StageError` naming it.

    Errors raised on purpose (:class:`TritongenError`) pass unchanged; so do Ctrl-C and exits. Rust
    panics (tokenizers, safetensors) derive from BaseException, so everything else is caught.
    """
    try:
        yield
    except (TritongenError, KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        raise StageError(name, exc) from exc
