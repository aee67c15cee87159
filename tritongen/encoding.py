"""Texts into model rows: the one tokenisation and packing the tokenizer steps serve and the gateway runs itself.

:class:`TextEncoder` tokenises with the Rust fast tokenizer (a checkpoint's ``tokenizer.json``), cuts at the
model's length (the end, or the start where asked), and packs the rows into int64 ``input_ids``,
``attention_mask`` and ``token_type_ids`` padded to a length bucket or to the longest row (:func:`pack_encodings`).
The tokenizer steps serve it (copied beside them as ``_tritongen_step/encoding.py``); where the gateway can read a
repository whose tokenizer step holds this very file, it encodes with it too and calls the model step itself
(:mod:`tritongen.gateway.direct`), so the rows it sends are the ones the step would have made. Besides numpy and
``tokenizers`` it imports only the contract beside it (relative: ``_tritongen_step.contract`` in a repository,
``tritongen.contract`` in process).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .contract import (
    ATTENTION_MASK,
    INPUT_IDS,
    OFFSETS,
    SPECIAL_MASK,
    TOKEN_IDS,
    TOKEN_METADATA,
    TOKEN_TYPE_IDS,
    WORD_IDS,
)
from .parameters import TokenizerParameters

__all__ = [
    "ENCODER_OUTPUTS",
    "PARALLEL_TEXTS",
    "IdEncoding",
    "TextEncoder",
    "pack_encodings",
    "serial",
    "token_metadata",
    "truncated",
]

ENCODER_OUTPUTS = (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS, *TOKEN_METADATA)  # what the packing can give a model


class IdEncoding:
    """A row of token ids a client sent, read by the packing as a ``tokenizers`` encoding: one segment, all real."""

    __slots__ = ("ids", "overflowing")

    def __init__(self, ids: list[int], overflowing: list[int]) -> None:
        self.ids = ids
        self.overflowing = overflowing  # the ids cut off (empty: none)

    @property
    def type_ids(self) -> list[int]:
        """The first segment's type for every id."""
        return [0] * len(self.ids)

    @property
    def attention_mask(self) -> list[int]:
        """Every id is read."""
        return [1] * len(self.ids)


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
        self.metadata = bool(set(TOKEN_METADATA) & set(input_names))  # the step outputs where each token came from
        self._encode_batch = self.tokenizer.encode_batch if self.metadata else self.tokenizer.encode_batch_fast
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
        self._left: Any = None  # the tokenizer that keeps a long text's last tokens, made when first asked for
        self.vocabulary = self.tokenizer.get_vocab_size(with_added_tokens=True)

    @classmethod
    def configured(cls, tokenizer_file: str, settings: TokenizerParameters, input_names: Sequence[str]) -> TextEncoder:
        """The encoder a tokenizer step's config describes (its ``TokenizerParameters``), packing ``input_names``."""
        return cls(
            tokenizer_file,
            settings.max_length,
            None if settings.pads_to_longest else list(settings.buckets),
            pad_id=settings.pad_id,
            pad_type_id=settings.pad_type_id,
            input_names=[n for n in input_names if n in ENCODER_OUTPUTS],
            padding_side=settings.padding_side or "right",
        )

    def bucket(self, length: int) -> int:
        """Smallest bucket that holds ``length`` tokens."""
        for size in self.buckets:
            if length <= size:
                return size
        return self.max_length

    def encode(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, left: Sequence[bool] | None = None
    ) -> list[Any]:
        """Encode all texts (and optional second segments) in one call; the rows ``left`` marks keep their end."""
        # An empty second segment means no pair, as in transformers (`if text_pair:`).
        items = list(texts) if pairs is None else [(t, p) if p else t for t, p in zip(texts, pairs, strict=True)]
        if left is None or not any(left):
            return self._encode_batch(items)
        rows = (
            [i for i, keep_end in enumerate(left) if not keep_end],
            [i for i, keep_end in enumerate(left) if keep_end],
        )
        encodings: list[Any] = [None] * len(items)
        for batch, indices in zip((self._encode_batch, self._left_encoder()), rows, strict=True):
            for index, encoding in zip(indices, batch([items[i] for i in indices]) if indices else [], strict=True):
                encodings[index] = encoding
        return encodings

    def _left_encoder(self) -> Any:
        """``encode_batch`` of a copy of the tokenizer that cuts from the left (its template adds its tokens after)."""
        if self._left is None:
            from tokenizers import Tokenizer

            self._left = Tokenizer.from_str(self.tokenizer.to_str())
            self._left.enable_truncation(self.max_length, direction="left")
        return self._left.encode_batch if self.metadata else self._left.encode_batch_fast

    def from_ids(self, rows: Sequence[Sequence[int]], left: Sequence[bool] | None = None) -> list[IdEncoding]:
        """Rows of token ids as encodings, each cut to the model's length (its end kept where ``left`` says).

        A ValueError names the first row with an id outside the vocabulary, or no id at all.
        """
        encodings = []
        for index, row in enumerate(rows):
            ids = [int(i) for i in row]
            if not ids:
                raise ValueError(f"{TOKEN_IDS} row {index} holds no token id")
            bad = next((i for i in ids if not 0 <= i < self.vocabulary), None)
            if bad is not None:
                raise ValueError(
                    f"{TOKEN_IDS} row {index} holds the id {bad}, outside the model's vocabulary of {self.vocabulary} "
                    "tokens"
                )
            cut = len(ids) - self.max_length
            if cut <= 0:
                encodings.append(IdEncoding(ids, []))
            elif left is not None and left[index]:
                encodings.append(IdEncoding(ids[cut:], ids[:cut]))
            else:
                encodings.append(IdEncoding(ids[: self.max_length], ids[self.max_length :]))
        return encodings

    def pack(self, encodings: Sequence[Any]) -> dict[str, np.ndarray]:
        """Pad ``encodings`` to one length (their bucket, or their longest row) and return the model inputs."""
        longest = max((len(e.ids) for e in encodings), default=1)
        width = max(longest, 1) if self.longest else self.bucket(longest)
        arrays = pack_encodings(encodings, width, self.pad_id, self.pad_type_id, self.padding_side)
        if self.metadata:
            arrays.update(token_metadata(encodings, width, self.padding_side))
        return {name: arrays[name] for name in self.input_names}

    def counts(self, encodings: Sequence[Any]) -> np.ndarray:
        """[N, 1] int32 ``TOKEN_COUNT``: the tokens of each encoding, special tokens in, padding out."""
        return np.fromiter((len(e.ids) for e in encodings), dtype=np.int32, count=len(encodings)).reshape(-1, 1)

    def __call__(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Encode and pack in one step."""
        return self.pack(self.encode(texts, pairs))


def _span(n: int, width: int, side: str) -> slice:
    """Where a row of ``n`` tokens sits in ``width`` columns padded on ``side``."""
    return slice(width - n, width) if side == "left" else slice(0, n)


def pack_encodings(
    encodings: Sequence[Any], width: int, pad_id: int = 0, pad_type_id: int = 0, side: str = "right"
) -> dict[str, np.ndarray]:
    """``input_ids``, ``attention_mask`` and ``token_type_ids`` of ``tokenizers`` encodings, padded to ``width``.

    The one packing of encodings into int64 model inputs (the tokenizer steps, NER and QA windows).
    ``side`` is where the padding goes: ``right``, or ``left`` for checkpoints that declare it (Qwen3-Embedding).
    Every row's ids go into one flat array and are placed with one mask, not row by row: per request this is
    what a Python step spends besides the tokenizer itself.
    """
    rows = len(encodings)
    lengths = np.fromiter((len(enc.ids) for enc in encodings), dtype=np.int64, count=rows)
    columns = np.arange(width)
    placed = columns >= (width - lengths)[:, None] if side == "left" else columns < lengths[:, None]
    total = int(lengths.sum())
    ids = np.full((rows, width), pad_id, dtype=np.int64)
    types = np.full((rows, width), pad_type_id, dtype=np.int64)
    ids[placed] = np.fromiter(itertools.chain.from_iterable(enc.ids for enc in encodings), np.int64, count=total)
    types[placed] = np.fromiter(itertools.chain.from_iterable(enc.type_ids for enc in encodings), np.int64, count=total)
    mask = np.zeros((rows, width), dtype=np.int64)
    mask[placed] = np.fromiter(
        itertools.chain.from_iterable(enc.attention_mask for enc in encodings), np.int64, count=total
    )
    return {INPUT_IDS: ids, ATTENTION_MASK: mask, TOKEN_TYPE_IDS: types}


def token_metadata(encodings: Sequence[Any], width: int, side: str = "right") -> dict[str, np.ndarray]:
    """``special_mask``, ``word_ids`` and ``offsets`` of ``tokenizers`` encodings, padded to ``width`` on ``side``.

    Padding is marked special, with word id -1 and offsets (0, 0), like special tokens.
    """
    rows = len(encodings)
    special = np.ones((rows, width), dtype=np.int64)
    words = np.full((rows, width), -1, dtype=np.int64)
    offsets = np.zeros((rows, width, 2), dtype=np.int64)
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        if n:
            span = _span(n, width, side)
            special[row, span] = enc.special_tokens_mask
            words[row, span] = [-1 if w is None else w for w in enc.word_ids]
            offsets[row, span] = np.asarray(enc.offsets, dtype=np.int64).reshape(n, 2)
    return {SPECIAL_MASK: special, WORD_IDS: words, OFFSETS: offsets}


def truncated(encodings: Sequence[Any]) -> np.ndarray:
    """[N, 1] bool: whether each text lost tokens to truncation (the tokenizer kept what did not fit)."""
    return np.array([[bool(encoding.overflowing)] for encoding in encodings], dtype=bool).reshape(-1, 1)


# Below this many texts in one call (a step's ``execute``, a gateway's call), the Rust tokenizer encodes on the
# calling thread: waking its thread pool costs more CPU than it saves on a few texts (about 15% of a one-text
# request's encoding), and the step's instances, sized for the node, are its parallelism. A client's batch is
# spread over the cores.
PARALLEL_TEXTS = 16


def serial(texts: int) -> None:
    """Let the tokenizer's thread pool encode the next call only when it holds ``PARALLEL_TEXTS`` texts or more.

    The Rust tokenizer reads ``TOKENIZERS_PARALLELISM`` at every call; a step process, and the gateway's, has no
    other use for it.
    """
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if texts >= PARALLEL_TEXTS else "false"
