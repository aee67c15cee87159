"""Token-classification postprocess step: ``TEXT``, ``logits`` and the window metadata -> ``ENTITIES``.

``ENTITIES`` is a JSON list per text as the strided transformers pipeline returns it
(``ner.aggregate_windows``: windows aggregated, overlaps merged). Parameters: ``labels_file``,
``tokenizer_file``, ``aggregation_strategy`` and ``unk_token``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from _tritongen_step import ner
from _tritongen_step._common import decode_texts, resolve_version_file
from _tritongen_step.contract import (
    ENTITIES,
    INPUT_IDS,
    LOGITS,
    OFFSETS,
    SPECIAL_MASK,
    TEXT,
    WINDOW_EXAMPLE,
    WORD_IDS,
)
from _tritongen_step.parameters import NerParameters, TokenizerFileParameters
from _tritongen_step.postprocess import RequestPostprocess, input_array

__all__ = ["TritonPythonModel"]


class TritonPythonModel(RequestPostprocess):
    """The token-classification postprocess step of the ensemble."""

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read the labels, the strategy and the tokenizer's vocabulary."""
        from tokenizers import Tokenizer

        path = resolve_version_file(args, TokenizerFileParameters.from_parameters(params).tokenizer_file)
        settings = NerParameters.from_parameters(params)
        vocab = ner.TokenVocab.from_tokenizer(Tokenizer.from_file(str(path)), unk_token=settings.unk_token)
        strategy = settings.aggregation_strategy
        self.aggregation = ner.Aggregation.of(self.labels(params, args), strategy=strategy, tokenizer=vocab)

    def process_request(self, request: Any) -> dict[str, np.ndarray]:
        """The entities of every text of one request."""
        texts = decode_texts(input_array(request, TEXT), TEXT)
        encoded = {name: input_array(request, name) for name in (INPUT_IDS, SPECIAL_MASK, WORD_IDS, OFFSETS)}
        entities = ner.aggregate_windows(
            input_array(request, LOGITS), encoded, input_array(request, WINDOW_EXAMPLE), texts, self.aggregation
        )
        rows = [[json.dumps(row, ensure_ascii=False).encode("utf-8")] for row in entities]
        return {ENTITIES: np.array(rows, dtype=np.object_)}
