"""A minimal stand-in for ``triton_python_backend_utils`` for unit tests of model.py files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


class TritonError:
    INTERNAL = 1
    INVALID_ARG = 3

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def code(self) -> int:
        return self._code

    def message(self) -> str:
        return self._message


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


@dataclass
class InferenceResponse:
    output_tensors: list[Tensor] = field(default_factory=list)
    error: TritonError | None = None

    def output(self, name: str) -> np.ndarray:
        return next(t.as_numpy() for t in self.output_tensors if t.name() == name)


@dataclass
class Request:
    tensors: dict[str, np.ndarray]
    requested: tuple[str, ...] = ()  # the outputs asked for; none: every output (as the server does)

    def requested_output_names(self) -> list[str]:
        return list(self.requested)


def get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    array = request.tensors.get(name)
    return None if array is None else Tensor(name, array)


_TYPES = {"TYPE_FP32": np.float32, "TYPE_INT64": np.int64, "TYPE_STRING": np.object_, "TYPE_INT32": np.int32}


def triton_string_to_numpy(name: str) -> Any:
    return _TYPES[name]


def texts(*items: str | bytes) -> np.ndarray:
    """A TYPE_STRING request tensor of shape [n, 1]."""
    return np.array([[t.encode() if isinstance(t, str) else t] for t in items], dtype=np.object_)
