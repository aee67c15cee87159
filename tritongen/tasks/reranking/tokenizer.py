r"""Reranking tokenizer step: ``TEXT`` (query) + ``TEXT_PAIR`` (document) -> the reranker's prompt, one row each.

As the Qwen3-Reranker model card: ``<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}`` is
tokenised and cut to the tokens the prompt leaves free (its tail goes first: ``TRUNCATED`` says so), then the
prompt's prefix and suffix ids (computed at build time with the checkpoint's tokenizer) go around it. Rows are
right-padded to a length bucket. Every pair of every request is encoded in one call. Parameters: the plain
tokenizer's, ``instruction``, ``prefix_ids`` and ``suffix_ids``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from _tritongen_step.contract import ATTENTION_MASK, INPUT_IDS
from _tritongen_step.parameters import RerankPromptParameters
from _tritongen_step.tokenizer import TextEncoder
from _tritongen_step.tokenizer import TritonPythonModel as TextTokenizer

__all__ = ["PromptEncoder", "TritonPythonModel"]


class PromptEncoder:
    """Encode (query, document) pairs into the reranker's prompt; the plain step's ``encode``/``pack`` interface."""

    def __init__(self, encoder: TextEncoder, instruction: str, prefix: Sequence[int], suffix: Sequence[int]) -> None:
        self.encoder = encoder
        self.instruction = instruction
        self.prefix = list(prefix)
        self.suffix = list(suffix)
        budget = encoder.max_length - len(self.prefix) - len(self.suffix)
        if budget < 1:
            raise ValueError(f"the prompt leaves no room in {encoder.max_length} tokens")
        encoder.tokenizer.enable_truncation(budget)  # the card truncates the middle only

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[Any]:
        """The middle of each prompt, tokenised and truncated (``encoding.overflowing`` says if it was cut)."""
        documents = pairs if pairs is not None else [""] * len(texts)
        middles = [
            f"<Instruct>: {self.instruction}\n<Query>: {query}\n<Document>: {document}"
            for query, document in zip(texts, documents, strict=True)
        ]
        return self.encoder.tokenizer.encode_batch(middles)

    def counts(self, encodings: Sequence[Any]) -> np.ndarray:
        """[N, 1] int32 ``TOKEN_COUNT``: each row's tokens, the prompt's prefix and suffix in."""
        return self.encoder.counts(encodings) + np.int32(len(self.prefix) + len(self.suffix))

    def pack(self, encodings: Sequence[Any]) -> dict[str, np.ndarray]:
        """Prefix + middle + suffix per row, right-padded to one bucket length."""
        rows = [self.prefix + list(encoding.ids) + self.suffix for encoding in encodings]
        width = self.encoder.bucket(max((len(row) for row in rows), default=1))
        ids = np.full((len(rows), width), self.encoder.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = row
            mask[index, : len(row)] = 1
        return {INPUT_IDS: ids, ATTENTION_MASK: mask}


class TritonPythonModel(TextTokenizer):
    """The reranking tokenizer step of the ensemble."""

    def setup(self, params: dict[str, str]) -> None:
        """Wrap the text encoder in the reranker's prompt."""
        prompt = RerankPromptParameters.from_parameters(params)
        self.encoder = PromptEncoder(self.encoder, prompt.instruction, list(prompt.prefix_ids), list(prompt.suffix_ids))
