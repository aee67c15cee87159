"""Errors raised by the generator.

Every error a user can cause is a subclass of :class:`GeneratorError`; the CLI maps
them to a one-line message and exit code 2. The tree::

    GeneratorError
    ├── CheckpointError          the checkpoint is missing, unreadable or corrupt
    ├── UnsupportedModelError    architecture or task we cannot deploy
    ├── SpecError                invalid build settings
    ├── ExportError              ONNX export failed
    ├── ParityError              exported model disagrees with PyTorch
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


class ConfigValidationError(GeneratorError):
    """A rendered model configuration, or the ensemble wiring, is invalid."""


class RepositoryError(GeneratorError):
    """The model repository cannot be read or written."""


class ServerError(GeneratorError):
    """The Triton server could not be started or did not answer."""


class BenchError(GeneratorError):
    """A benchmark run failed."""
