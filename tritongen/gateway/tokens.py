"""Token ids in and out with the build's own ``tokenizer.json``: token-id inputs and TEI's ``/decode``.

An ensemble that takes ``TOKEN_IDS`` gets token ids as they are (:func:`check_ids` checks them against the
vocabulary first, where the gateway can read it). One built without it takes text only, so there token ids are
decoded to text and passed on (:func:`texts_from_ids`). That is honest only when the ids are this model's: ids made
by another tokenizer (tiktoken's, which LangChain's ``OpenAIEmbeddings`` sends by default) decode to other words.
So such a row is served only when its text encodes back to the very same ids, with or without the model's special
tokens; otherwise the answer is a 400 that says so.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from tritongen.errors import GatewayError
from tritongen.gateway.models import ModelInfo
from tritongen.gateway.schemas import bad

__all__ = ["check_ids", "decode", "texts_from_ids"]


@functools.lru_cache(maxsize=32)
def _untruncated(tokenizer: Any) -> Any:
    """A copy of ``tokenizer`` that neither truncates nor pads, to check a round trip of any length."""
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _tokenizer(model: ModelInfo, field: str) -> Any:
    if model.tokenizer is None:
        raise GatewayError(
            400,
            f"`{model.name}`: token ids need its tokenizer step's tokenizer.json, which the gateway cannot read "
            "(give it the repository folder with --repository), or send text",
            param=field,
            code="unsupported_model",
        )
    return _untruncated(model.tokenizer)


def _check_vocabulary(model: ModelInfo, tokenizer: Any, rows: Sequence[Any], field: str) -> None:
    """A 400 naming the first item of ``rows`` (strings are skipped) holding an id past the vocabulary."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    for i, row in enumerate(rows):
        if not isinstance(row, str) and max(row) >= size:
            raise bad(f"`{field}` item {i} holds the id {max(row)}; `{model.name}` has {size} tokens", field)


def check_ids(model: ModelInfo, rows: Sequence[Any], field: str) -> None:
    """Refuse the first token-id row of ``rows`` (texts and id rows) with an id outside ``model``'s vocabulary."""
    _check_vocabulary(model, model.tokenizer, rows, field)


def texts_from_ids(model: ModelInfo, rows: list[list[int]], field: str) -> list[str]:
    """The texts of token-id ``rows``, each checked to encode back to its ids (a 400 naming the row if not)."""
    tokenizer = _tokenizer(model, field)
    _check_vocabulary(model, tokenizer, rows, field)
    texts = tokenizer.decode_batch(rows, skip_special_tokens=True)
    plain = tokenizer.encode_batch(texts, add_special_tokens=False)
    full = tokenizer.encode_batch(texts)
    for i, (row, without, with_special) in enumerate(zip(rows, plain, full, strict=True)):
        if row != without.ids and row != with_special.ids:
            raise bad(
                f"`{field}` item {i}: the token ids do not encode back from their text with `{model.name}`'s "
                "tokenizer (ids of another tokenizer, such as tiktoken's?); send the text instead",
                field,
            )
    return texts


def decode(model: ModelInfo, rows: list[list[int]], skip_special_tokens: bool, field: str = "ids") -> list[str]:
    """TEI's ``/decode``: the text of each row of ids."""
    tokenizer = _tokenizer(model, field)
    _check_vocabulary(model, tokenizer, rows, field)
    return list(tokenizer.decode_batch(rows, skip_special_tokens=skip_special_tokens))
