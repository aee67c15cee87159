"""Triton Python-backend tokenizer: ``TEXT`` -> ``input_ids``, ``attention_mask`` [, ``token_type_ids``].

It runs the Rust fast tokenizer from the checkpoint's ``tokenizer.json``, truncates to the
model's maximum length, and pads each request to the smallest length bucket that fits, so
that Triton's dynamic batcher can batch equally shaped requests for the model step. All
texts of all requests in one ``execute`` are encoded in a single ``encode_batch`` call.

It also emits ``TRUNCATED``: whether the text was longer than the model and lost its tail (classification
and embeddings truncate by design), and ``TOKEN_COUNT``: the tokens the model reads of each text (special tokens
and prompt in, padding out), which the gateway sums for its answers' ``usage`` instead of tokenising again.
Tasks whose requests become windows (token classification, question answering) subclass
:class:`WindowedTokenizer` in their own folder (``tritongen/tasks/<task>/tokenizer.py``), and this module is
copied next to their ``model.py``.

Where the ensemble offers them, two optional inputs change how a row is read: ``TOKEN_IDS`` (the model's own token
ids in place of ``TEXT``, padded with -1) reach the model as they are, checked against the vocabulary and cut to
the model's length like a text, with no special token added (as Text Embeddings Inference takes ids); and
``TRUNCATE_LEFT`` keeps a long row's last tokens instead of its first (the special tokens stay where the
tokenizer's template puts them).

Settings come from the config's ``parameters``: ``tokenizer_file``, ``max_length``,
``buckets`` (comma-separated), ``pad_id``, ``pad_type_id`` and ``padding_side`` (``right``, or ``left`` where the
checkpoint's tokenizer declares it); the task's own come after them. Where the config has ``prompts`` (JSON,
name -> text) the optional ``PROMPT_NAME`` input picks the one prepended to each text, as sentence-transformers
does (absent or empty: ``default_prompt_name``, if any).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from _tritongen_step._common import (
    PerRequestStep,
    decode_texts,
    encode_windows,
    input_error,
    model_parameters,
    pb_utils,
    resolve_version_file,
)
from _tritongen_step.contract import (
    PROMPT_NAME,
    TEXT,
    TEXT_PAIR,
    TOKEN_COUNT,
    TOKEN_IDS,
    TRUNCATE_LEFT,
    TRUNCATED,
)
from _tritongen_step.encoding import PARALLEL_TEXTS, IdEncoding, TextEncoder, serial, truncated
from _tritongen_step.parameters import (
    PromptParameters,
    StrideParameters,
    TokenizerFileParameters,
    TokenizerParameters,
    WindowsParameters,
)

__all__ = [
    "PARALLEL_TEXTS",
    "IdEncoding",
    "Rows",
    "TextEncoder",
    "TritonPythonModel",
    "WindowedTokenizer",
    "check_windows",
    "serial",
    "truncated",
]


class Rows:
    """One request's rows as read.

    Its texts (and pairs) to encode, and which of them keep their last tokens; or the encodings of the token ids it
    sent.
    """

    __slots__ = ("encoded", "left", "pairs", "texts")

    def __init__(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        left: list[bool] | None = None,
        encoded: list[IdEncoding] | None = None,
    ) -> None:
        self.texts, self.pairs, self.left, self.encoded = texts, pairs, left, encoded


def check_windows(count: int, limit: int, window: int, what: str) -> None:
    """Refuse a request with more windows than the model step takes in one batch."""
    if count > limit:
        raise ValueError(
            f"the {what} need {count} windows of {window} tokens, more than the {limit} the model step takes in one "
            f"request: send fewer or shorter {what}, or rebuild with a larger max_batch_size"
        )


class TritonPythonModel:
    """The plain tokenizer step: ``TEXT`` [, ``TEXT_PAIR``] -> bucket-padded rows, ``TRUNCATED`` and ``TOKEN_COUNT``.

    Task tokenizers that cut requests into windows subclass it (``tritongen/tasks/*/tokenizer.py``): they
    read their own settings in :meth:`setup` and answer each request with :meth:`process_request`.
    """

    def initialize(self, args: dict[str, str]) -> None:
        """Read settings from the model config and load ``tokenizer.json``."""
        config = json.loads(args["model_config"])
        params = model_parameters(config)
        self.output_names = [out["name"] for out in config["output"]]
        self.input_names = [inp["name"] for inp in config["input"]]
        self.encoder = TextEncoder.configured(
            str(resolve_version_file(args, TokenizerFileParameters.from_parameters(params).tokenizer_file)),
            TokenizerParameters.from_parameters(params, config.get("name", "the tokenizer step")),
            self.output_names,
        )
        prompts = PromptParameters.from_parameters(params)
        self.prompts: dict[str, str] = prompts.prompts
        self.default_prompt = prompts.default_prompt_name
        self.setup(params)

    def setup(self, params: dict[str, str]) -> None:
        """Read the task's own parameters (none for plain text)."""

    def texts(self, request: Any, name: str) -> list[str]:
        """The strings of input ``name`` of ``request``."""
        return decode_texts(pb_utils.get_input_tensor_by_name(request, name).as_numpy(), name)

    def prompted(self, request: Any, texts: list[str]) -> list[str]:
        """``texts`` with the prompt ``PROMPT_NAME`` names (per row; absent or empty: the default) in front."""
        tensor = pb_utils.get_input_tensor_by_name(request, PROMPT_NAME) if PROMPT_NAME in self.input_names else None
        names = [""] * len(texts) if tensor is None else decode_texts(tensor.as_numpy(), PROMPT_NAME)
        if len(names) == 1 and len(texts) > 1:
            names = names * len(texts)
        if len(names) != len(texts):
            raise ValueError(f"TEXT has {len(texts)} rows but PROMPT_NAME has {len(names)}")
        out = []
        for name, text in zip(names, texts, strict=True):
            name = name or self.default_prompt
            if name and name not in self.prompts:
                known = ", ".join(sorted(self.prompts)) or "none"
                raise ValueError(f"PROMPT_NAME `{name}` is not one of this model's prompts ({known})")
            out.append(self.prompts.get(name, "") + text)
        return out

    def read(self, request: Any) -> Rows:
        """The request's rows: its texts (prompted where the model has prompts) and second segments, or its ids."""
        left = self.truncate_left(request)
        if TOKEN_IDS in self.input_names:
            ids = pb_utils.get_input_tensor_by_name(request, TOKEN_IDS)
            if ids is not None:
                return self.read_ids(request, ids.as_numpy(), left)
        if pb_utils.get_input_tensor_by_name(request, TEXT) is None:
            ids = f" or {TOKEN_IDS}" if TOKEN_IDS in self.input_names else ""
            raise ValueError(f"missing input: give {TEXT}{ids}")
        texts = self.texts(request, TEXT)
        if self.prompts:
            texts = self.prompted(request, texts)
        pairs = None
        if TEXT_PAIR in self.input_names:
            tensor = pb_utils.get_input_tensor_by_name(request, TEXT_PAIR)
            if tensor is None:
                raise ValueError("TEXT_PAIR is required by this model")
            pairs = decode_texts(tensor.as_numpy(), TEXT_PAIR)
            if len(pairs) != len(texts):
                raise ValueError(f"TEXT has {len(texts)} rows but TEXT_PAIR has {len(pairs)}")
        return Rows(texts, pairs, _rows_of(left, len(texts)))

    def read_ids(self, request: Any, array: np.ndarray, left: list[bool] | None) -> Rows:
        """``TOKEN_IDS`` rows (-1 pads a row's end), which take no ``TEXT`` and no prompt (the ids are the model's)."""
        if pb_utils.get_input_tensor_by_name(request, TEXT) is not None:
            raise ValueError(f"give {TEXT} or {TOKEN_IDS}, not both")
        if PROMPT_NAME in self.input_names and pb_utils.get_input_tensor_by_name(request, PROMPT_NAME) is not None:
            raise ValueError(f"{PROMPT_NAME} cannot be used with {TOKEN_IDS}: put the prompt's tokens in the ids")
        matrix = array.reshape(len(array), -1) if array.ndim else array.reshape(1, 1)
        rows = []
        for index, row in enumerate(matrix.tolist()):
            end = len(row)
            while end and row[end - 1] == -1:
                end -= 1
            if any(i < 0 for i in row[:end]):
                raise ValueError(f"{TOKEN_IDS} row {index} holds a negative id before its -1 padding")
            rows.append(row[:end])
        return Rows([], encoded=self.encoder.from_ids(rows, _rows_of(left, len(rows))))

    def truncate_left(self, request: Any) -> list[bool] | None:
        """``TRUNCATE_LEFT`` per row where the request sends it, else None (every row keeps its first tokens)."""
        if TRUNCATE_LEFT not in self.input_names:
            return None
        tensor = pb_utils.get_input_tensor_by_name(request, TRUNCATE_LEFT)
        return None if tensor is None else [bool(v) for v in tensor.as_numpy().reshape(-1)]

    def encode_rows(self, requests: Sequence[Rows]) -> list[list[Any]]:
        """Each request's encodings: every text of every request in one call (each row cut on its side)."""
        texts = [t for rows in requests for t in rows.texts]
        pairs = (
            [p for rows in requests for p in (rows.pairs or [])] if any(r.pairs is not None for r in requests) else None
        )
        left = None
        if any(rows.left is not None for rows in requests if rows.encoded is None):
            left = [
                keep for rows in requests if rows.encoded is None for keep in (rows.left or [False] * len(rows.texts))
            ]
        serial(len(texts))
        if not texts:
            encoded = []
        elif left is None:  # the common case, and the only one of a step whose encoder takes no sides
            encoded = self.encoder.encode(texts, pairs)
        else:
            encoded = self.encoder.encode(texts, pairs, left)
        out, start = [], 0
        for rows in requests:
            if rows.encoded is not None:
                out.append(rows.encoded)
                continue
            out.append(encoded[start : start + len(rows.texts)])
            start += len(rows.texts)
        return out

    def execute(self, requests: list[Any]) -> list[Any]:
        """Encode every text of every request at once, then answer each request."""
        responses: list[Any] = [None] * len(requests)
        read: list[tuple[int, Rows]] = []
        for index, request in enumerate(requests):
            try:
                read.append((index, self.read(request)))
            except ValueError as exc:
                responses[index] = pb_utils.InferenceResponse(error=input_error(pb_utils, str(exc)))
        for (index, _), chunk in zip(read, self.encode_rows([rows for _, rows in read]), strict=True):
            arrays = self.encoder.pack(chunk)
            arrays[TRUNCATED] = truncated(chunk)
            arrays[TOKEN_COUNT] = self.encoder.counts(chunk)
            responses[index] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, arrays[name]) for name in self.output_names]
            )
        return responses


def _rows_of(left: list[bool] | None, count: int) -> list[bool] | None:
    """``TRUNCATE_LEFT``'s flags for ``count`` rows: one flag serves every row; None where it was not sent."""
    if left is None:
        return None
    if len(left) == 1 and count > 1:
        return left * count
    if len(left) != count:
        raise ValueError(f"{TRUNCATE_LEFT} has {len(left)} rows but the request has {count}")
    return left


class WindowedTokenizer(PerRequestStep, TritonPythonModel):
    """A tokenizer step that turns each request into its own set of windows: one batch for the model step."""

    max_windows: int  # the most windows one request may need (the model step's batch), read in ``setup``
    stride: int  # the tokens neighbouring windows share

    def setup(self, params: dict[str, str]) -> None:
        """Read the window overlap and the most windows per request."""
        self.stride = StrideParameters.from_parameters(params).stride
        self.max_windows = WindowsParameters.from_parameters(params).max_windows

    def windows(self, texts: Sequence[str], stride: int, what: str = "texts") -> tuple[list[Any], np.ndarray]:
        """``texts`` as overlapping windows of the model's length sharing ``stride`` tokens, and each one's text.

        A request needing more than ``max_windows`` windows is refused (ValueError: its input error).
        """
        windows, owners = encode_windows(
            self.encoder.tokenizer, texts, max_length=self.encoder.max_length, stride=stride
        )
        check_windows(len(windows), self.max_windows, self.encoder.max_length, what)
        return windows, owners
