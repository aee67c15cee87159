"""Helpers shared by the Python-backend models (copied next to them as ``_common.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["decode_texts", "input_error", "model_parameters", "read_json", "resolve_version_file"]


def model_parameters(model_config: dict[str, Any]) -> dict[str, str]:
    """Flatten a Triton config's ``parameters`` map to ``{key: string_value}``."""
    return {key: value["string_value"] for key, value in (model_config.get("parameters") or {}).items()}


def resolve_version_file(args: dict[str, str], filename: str) -> Path:
    """Path of ``filename`` inside this model's version folder, as Triton passed it in ``args``."""
    path = Path(args["model_repository"]) / args["model_version"] / filename
    if not path.is_file():
        raise FileNotFoundError(f"model file `{path}` is missing")
    return path


def decode_texts(array: np.ndarray, tensor_name: str) -> list[str]:
    """Decode a TYPE_STRING tensor of shape [batch, 1] (or [batch]) into Python strings.

    Raises ValueError, naming the tensor and the row, for bytes that are not UTF-8.
    """
    flat = array.reshape(-1)
    texts = []
    for row, item in enumerate(flat):
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{tensor_name}[{row}] is not valid UTF-8 (byte {exc.start})") from None
        texts.append(str(item))
    return texts


def read_json(path: Path) -> Any:
    """Load a JSON file."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def input_error(pb_utils: Any, message: str) -> Any:
    """A ``TritonError`` for a bad request: clients see gRPC INVALID_ARGUMENT / HTTP 400, not an internal error."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)  # error codes came with Triton 23.x
    return pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
