"""Errors raised by the generator.

Every error a user can cause is a subclass of :class:`GeneratorError`; the CLI maps
them to a one-line message and exit code 2. The tree::

    GeneratorError
    ├── CheckpointError          the checkpoint is missing, unreadable or corrupt
    ├── UnsupportedModelError    architecture or task we cannot deploy
    ├── SpecError                invalid build settings
    ├── ExportError              ONNX export failed
    ├── ParityError              exported model disagrees with PyTorch
    ├── StageError               an unexpected failure inside one build stage (names the stage)
    ├── ConfigValidationError    a rendered config.pbtxt or the ensemble wiring is wrong
    ├── RepositoryError          the output repository cannot be written
    ├── ServerError              tritonserver could not start or answer
    └── BenchError               perf_analyzer or a baseline failed
"""

from __future__ import annotations


class GeneratorError(Exception):
    """Base class of every error the generator raises on purpose."""


class CheckpointError(GeneratorError):
    """The checkpoint is missing, unreadable or corrupt."""


class UnsupportedModelError(GeneratorError):
    """The checkpoint's architecture or the requested task is not supported."""


class SpecError(GeneratorError):
    """The build settings are invalid or contradict each other."""


class ExportError(GeneratorError):
    """Exporting the PyTorch model to ONNX failed."""


class ParityError(GeneratorError):
    """The exported model's outputs differ from PyTorch beyond tolerance."""


class StageError(GeneratorError):
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


class ConfigValidationError(GeneratorError):
    """A rendered model configuration, or the ensemble wiring, is invalid."""


class RepositoryError(GeneratorError):
    """The model repository cannot be read or written."""


class ServerError(GeneratorError):
    """The Triton server could not be started or did not answer."""


class BenchError(GeneratorError):
    """A benchmark run failed."""
