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

Settings come from the config's ``parameters``: ``tokenizer_file``, ``max_length``,
``buckets`` (comma-separated), ``pad_id``, ``pad_type_id`` and ``padding_side`` (``right``, or ``left`` where the
checkpoint's tokenizer declares it); the task's own come after them. Where the config has ``prompts`` (JSON,
name -> text) the optional ``PROMPT_NAME`` input picks the one prepended to each text, as sentence-transformers
does (absent or empty: ``default_prompt_name``, if any).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from _tritongen_step._common import (
    PerRequestStep,
    decode_texts,
    encode_windows,
    input_error,
    model_parameters,
    pack_encodings,
    pb_utils,
    resolve_version_file,
    token_metadata,
)
from _tritongen_step.contract import (
    ATTENTION_MASK,
    BUCKETS,
    INPUT_IDS,
    MAX_LENGTH,
    PAD_ID,
    PAD_TYPE_ID,
    PADDING,
    PROMPT_NAME,
    TEXT,
    TEXT_PAIR,
    TOKEN_COUNT,
    TOKEN_METADATA,
    TOKEN_TYPE_IDS,
    TOKENIZER_FILE,
    TRUNCATED,
)

__all__ = [
    "PARALLEL_TEXTS",
    "TextEncoder",
    "TritonPythonModel",
    "WindowedTokenizer",
    "check_windows",
    "serial",
    "truncated",
]


_ENCODER_OUTPUTS = (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS, *TOKEN_METADATA)


class TextEncoder:
    """Tokenise texts and pack them into bucket-padded int64 arrays."""

    def __init__(
        self,
        tokenizer_file: str,
        max_length: int,
        buckets: Sequence[int] | None,
        *,
        pad_id: int = 0,
        pad_type_id: int = 0,
        input_names: Sequence[str] = (INPUT_IDS, ATTENTION_MASK),
        padding_side: str = "right",
    ) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        # Without token metadata, the encodings need no offsets: ``encode_batch_fast`` skips them (about 20% less
        # CPU per text, the same ids, types and truncation).
        metadata = set(TOKEN_METADATA) & set(input_names)
        self._encode_batch = self.tokenizer.encode_batch if metadata else self.tokenizer.encode_batch_fast
        self.max_length = int(max_length)
        # None: each call padded to its own longest row (a CPU build's ``padding: longest``), not to a bucket.
        self.longest = buckets is None
        self.buckets = sorted({int(b) for b in buckets or () if 0 < int(b) < self.max_length} | {self.max_length})
        self.pad_id = int(pad_id)
        self.pad_type_id = int(pad_type_id)
        self.input_names = tuple(input_names)
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be left or right, got {padding_side!r}")
        self.padding_side = padding_side

    def bucket(self, length: int) -> int:
        """Smallest bucket that holds ``length`` tokens."""
        for size in self.buckets:
            if length <= size:
                return size
        return self.max_length

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[Any]:
        """Encode all texts (and optional second segments) in one call."""
        if pairs is None:
            return self._encode_batch(list(texts))
        # An empty second segment means no pair, as in transformers (`if text_pair:`).
        return self._encode_batch([(t, p) if p else t for t, p in zip(texts, pairs, strict=True)])

    def pack(self, encodings: Sequence[Any]) -> dict[str, np.ndarray]:
        """Pad ``encodings`` to one length (their bucket, or their longest row) and return the model inputs."""
        longest = max((len(e.ids) for e in encodings), default=1)
        width = max(longest, 1) if self.longest else self.bucket(longest)
        arrays = pack_encodings(encodings, width, self.pad_id, self.pad_type_id, self.padding_side)
        if set(TOKEN_METADATA) & set(self.input_names):
            arrays.update(token_metadata(encodings, width, self.padding_side))
        return {name: arrays[name] for name in self.input_names}

    def counts(self, encodings: Sequence[Any]) -> np.ndarray:
        """[N, 1] int32 ``TOKEN_COUNT``: the tokens of each encoding, special tokens in, padding out."""
        return np.fromiter((len(e.ids) for e in encodings), dtype=np.int32, count=len(encodings)).reshape(-1, 1)

    def __call__(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Encode and pack in one step."""
        return self.pack(self.encode(texts, pairs))


# Below this many texts in one ``execute``, the Rust tokenizer encodes on this instance's one thread: waking its
# thread pool costs more CPU than it saves on a few texts (about 15% of a one-text request's encoding), and the
# step's instances, sized for the node, are its parallelism. A client's batch is spread over the cores.
PARALLEL_TEXTS = 16


def serial(texts: int) -> None:
    """Let the tokenizer's thread pool encode the next call only when it holds ``PARALLEL_TEXTS`` texts or more.

    The Rust tokenizer reads ``TOKENIZERS_PARALLELISM`` at every call; a step process has no other use for it.
    """
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if texts >= PARALLEL_TEXTS else "false"


def truncated(encodings: Sequence[Any]) -> np.ndarray:
    """[N, 1] bool: whether each text lost tokens to truncation (the tokenizer kept what did not fit)."""
    return np.array([[bool(encoding.overflowing)] for encoding in encodings], dtype=bool).reshape(-1, 1)


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
        self.encoder = TextEncoder(
            str(resolve_version_file(args, params.get(TOKENIZER_FILE, "tokenizer.json"))),
            int(params[MAX_LENGTH]),
            None if params.get(PADDING) == "longest" else [int(b) for b in params.get(BUCKETS, "").split(",") if b],
            pad_id=int(params.get(PAD_ID, "0")),
            pad_type_id=int(params.get(PAD_TYPE_ID, "0")),
            input_names=[n for n in self.output_names if n in _ENCODER_OUTPUTS],
            padding_side=params.get("padding_side", "right"),
        )
        self.prompts: dict[str, str] = json.loads(params.get("prompts") or "{}")
        self.default_prompt = params.get("default_prompt_name", "")
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

    def read(self, request: Any) -> tuple[list[str], list[str] | None]:
        """The request's texts (prompted where the model has prompts) and second segments (None: no pairs)."""
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
        return texts, pairs

    def execute(self, requests: list[Any]) -> list[Any]:
        """Encode every text of every request at once, then answer each request."""
        responses: list[Any] = [None] * len(requests)
        batches: list[tuple[int, list[str], list[str] | None]] = []
        for index, request in enumerate(requests):
            try:
                texts, pairs = self.read(request)
            except ValueError as exc:
                responses[index] = pb_utils.InferenceResponse(error=input_error(pb_utils, str(exc)))
                continue
            batches.append((index, texts, pairs))
        if batches:
            texts = [t for _, ts, _ in batches for t in ts]
            has_pairs = batches[0][2] is not None
            pairs = [p for _, _, ps in batches for p in (ps or [])] if has_pairs else None
            serial(len(texts))
            encodings = self.encoder.encode(texts, pairs)
            start = 0
            for index, request_texts, _ in batches:
                chunk = encodings[start : start + len(request_texts)]
                start += len(request_texts)
                arrays = self.encoder.pack(chunk)
                arrays[TRUNCATED] = truncated(chunk)
                arrays[TOKEN_COUNT] = self.encoder.counts(chunk)
                responses[index] = pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(name, arrays[name]) for name in self.output_names]
                )
        return responses


class WindowedTokenizer(PerRequestStep, TritonPythonModel):
    """A tokenizer step that turns each request into its own set of windows: one batch for the model step."""

    max_windows: int  # the most windows one request may need (the model step's batch), read in ``setup``

    def windows(self, texts: Sequence[str], stride: int, what: str = "texts") -> tuple[list[Any], np.ndarray]:
        """``texts`` as overlapping windows of the model's length sharing ``stride`` tokens, and each one's text.

        A request needing more than ``max_windows`` windows is refused (ValueError: its input error).
        """
        windows, owners = encode_windows(
            self.encoder.tokenizer, texts, max_length=self.encoder.max_length, stride=stride
        )
        check_windows(len(windows), self.max_windows, self.encoder.max_length, what)
        return windows, owners
