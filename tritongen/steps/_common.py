"""Helpers shared by the Python-backend models (copied beside them as ``_tritongen_step/_common.py``).

The vector maths they share with the gateway and the gates is :mod:`tritongen.vectors` (``_tritongen_step.vectors``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # outside the server: importable for tests and build-time checks
    pb_utils = None


__all__ = [
    "PerRequestStep",
    "decode_texts",
    "encode_truncated",
    "encode_windows",
    "input_error",
    "model_parameters",
    "read_json",
    "resolve_version_file",
    "respond_per_request",
    "settings_kept",
]


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


def respond_per_request(
    pb_utils: Any, requests: Sequence[Any], output_names: Sequence[str] | None, process: Callable[[Any], dict]
) -> list[Any]:
    """One response per request: ``process(request)``'s arrays, or an input error for its ValueError.

    ``output_names`` None: every array ``process`` returns, in its order (a step answering requested outputs).
    """
    responses = []
    for request in requests:
        try:
            arrays = process(request)
        except ValueError as exc:
            responses.append(pb_utils.InferenceResponse(error=input_error(pb_utils, str(exc))))
            continue
        tensors = [pb_utils.Tensor(name, arrays[name]) for name in (arrays if output_names is None else output_names)]
        responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
    return responses


class PerRequestStep:
    """A step that answers each request on its own: one request's windows (or pairs) belong together.

    The tokenizer steps that cut requests into windows and the postprocess steps that merge them back both
    answer this way; each mixes it in before its own step base, so this ``execute`` is the one served.
    """

    output_names: list[str]

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """The outputs of one request; a ValueError becomes that request's input error."""
        raise NotImplementedError

    def execute(self, requests: list[Any]) -> list[Any]:
        """One response per request."""
        return respond_per_request(pb_utils, requests, self.output_names, self.process_request)


@contextlib.contextmanager
def settings_kept(tokenizer: Any) -> Iterator[Any]:
    """``tokenizer`` with padding off, for encodings each padded later; its own truncation and padding come back after.

    The steps and the gates share one ``tokenizers.Tokenizer`` per model, so a caller that cuts or pads
    differently (NER and QA windows) must leave it as it found it.
    """
    saved_truncation, saved_padding = tokenizer.truncation, tokenizer.padding
    try:
        tokenizer.no_padding()
        yield tokenizer
    finally:
        if saved_truncation is None:
            tokenizer.no_truncation()
        else:
            tokenizer.enable_truncation(**saved_truncation)
        if saved_padding is None:
            tokenizer.no_padding()
        else:
            tokenizer.enable_padding(**saved_padding)


def encode_truncated(tokenizer: Any, texts: list[str], max_length: int, stride: int) -> list[Any]:
    """``texts`` cut at ``max_length`` tokens, the overflow kept as windows sharing ``stride`` tokens; no padding.

    The tokenizer's own truncation and padding settings are restored afterwards.
    """
    with settings_kept(tokenizer):
        tokenizer.enable_truncation(int(max_length), stride=int(stride), strategy="longest_first", direction="right")
        return tokenizer.encode_batch(texts, add_special_tokens=True) if texts else []


def encode_windows(
    tokenizer: Any, texts: Sequence[str], *, max_length: int, stride: int
) -> tuple[list[Any], np.ndarray]:
    """Split each text into overlapping windows: encodings, and the text each belongs to.

    This is what ``pipeline("token-classification")(text, stride=stride)`` feeds the model, and what the
    chunked embeddings embed: the fast tokenizer truncates at ``max_length`` with ``return_overflowing_tokens``
    and ``stride``, so a long text becomes windows of ``max_length`` tokens (each with the special tokens the
    model expects around it) whose neighbours share ``stride`` tokens; a short text is one window, the same
    encoding as plain truncation gives. Offsets stay offsets into the whole text. The tokenizer's own
    truncation and padding settings are restored afterwards.
    """
    texts = list(texts)
    if not all(isinstance(text, str) for text in texts):
        raise ValueError("encode_windows() takes a list of strings")
    room = max_length - tokenizer.num_special_tokens_to_add(False)
    if not 0 <= stride < room:
        raise ValueError(
            f"stride {stride} must be >= 0 and below the {room} text tokens of a {max_length}-token window"
        )
    encodings = encode_truncated(tokenizer, texts, max_length, stride)
    windows, owners = [], []
    for index, encoding in enumerate(encodings):
        for window in [encoding, *encoding.overflowing]:
            windows.append(window)
            owners.append(index)
    return windows, np.asarray(owners, dtype=np.int64)
