"""Request bodies of the OpenAI and Text Embeddings Inference routes, parsed and checked by hand.

Each ``parse_*`` takes the raw body and returns a frozen request, or raises a 400 :class:`GatewayError` that names
the field (OpenAI's ``param``). Parsing by hand, with the standard ``json`` module, keeps the per-request cost
to what the route needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tritongen.errors import GatewayError

__all__ = [
    "EmbedRequest",
    "EmbeddingsRequest",
    "PredictRequest",
    "RerankRequest",
    "TokenizeRequest",
    "parse_embed",
    "parse_embeddings",
    "parse_predict",
    "parse_rerank",
    "parse_tokenize",
]

MAX_INPUTS = 2048  # OpenAI's limit on inputs per embeddings request


def _bad(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code="invalid_request")


def _object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"the request body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _bad("the request body must be a JSON object")
    return data


def _texts(data: dict[str, Any], key: str) -> tuple[list[str], bool]:
    """A string or a non-empty list of strings; also whether it was one string."""
    value = data.get(key)
    if isinstance(value, str):
        return [value], True
    if value is None:
        raise _bad(f"`{key}` is required", key)
    if not isinstance(value, list) or not value:
        raise _bad(f"`{key}` must be a string or a non-empty list of strings", key)
    if any(isinstance(v, int) or (isinstance(v, list) and v and isinstance(v[0], int)) for v in value):
        raise _bad(f"`{key}` holds token ids; this gateway takes text only (the ensemble tokenizes)", key)
    if not all(isinstance(v, str) for v in value):
        raise _bad(f"`{key}` must be a string or a list of strings", key)
    if len(value) > MAX_INPUTS:
        raise _bad(f"`{key}` has {len(value)} items; at most {MAX_INPUTS} per request", key)
    return value, False


def _optional(data: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = data.get(key, default)
    if value is None:
        return default
    # bool is an int in Python: a bool where an int is wanted (or the reverse) is refused
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _bad(f"`{key}` must be {'a boolean' if kind is bool else f'of type {kind.__name__}'}", key)
    return value


def _model(data: dict[str, Any]) -> str | None:
    model = _optional(data, "model", str, None)
    return model or None


def _dimensions(data: dict[str, Any]) -> int | None:
    dimensions = _optional(data, "dimensions", int, None)
    if dimensions is not None and dimensions < 1:
        raise _bad("`dimensions` must be at least 1", "dimensions")
    return dimensions


def _truncation_direction(data: dict[str, Any]) -> None:
    direction = _optional(data, "truncation_direction", str, "right")
    if direction.lower() != "right":
        raise _bad(
            "`truncation_direction` must be `right`: the ensemble truncates the end of a text", "truncation_direction"
        )


@dataclass(frozen=True)
class EmbeddingsRequest:
    """OpenAI ``POST /v1/embeddings``."""

    model: str | None
    texts: list[str]
    dimensions: int | None
    base64: bool
    prompt_name: str | None


def parse_embeddings(body: bytes) -> EmbeddingsRequest:
    """Parse ``{input, model, dimensions, encoding_format, user}`` (``user`` is ignored)."""
    data = _object(body)
    texts, _ = _texts(data, "input")
    encoding = _optional(data, "encoding_format", str, "float")
    if encoding not in ("float", "base64"):
        raise _bad("`encoding_format` must be `float` or `base64`", "encoding_format")
    return EmbeddingsRequest(
        _model(data), texts, _dimensions(data), encoding == "base64", _optional(data, "prompt_name", str, None)
    )


@dataclass(frozen=True)
class EmbedRequest:
    """TEI ``POST /embed``."""

    model: str | None
    texts: list[str]
    single: bool
    normalize: bool
    truncate: bool
    dimensions: int | None
    prompt_name: str | None


def parse_embed(body: bytes) -> EmbedRequest:
    """Parse ``{inputs, normalize, truncate, truncation_direction, dimensions, prompt_name}``."""
    data = _object(body)
    texts, single = _texts(data, "inputs")
    _truncation_direction(data)
    return EmbedRequest(
        _model(data),
        texts,
        single,
        _optional(data, "normalize", bool, True),
        _optional(data, "truncate", bool, False),
        _dimensions(data),
        _optional(data, "prompt_name", str, None),
    )


@dataclass(frozen=True)
class RerankRequest:
    """TEI ``POST /rerank``."""

    model: str | None
    query: str
    texts: list[str]
    return_text: bool
    truncate: bool


def parse_rerank(body: bytes) -> RerankRequest:
    """Parse ``{query, texts, raw_scores, return_text, truncate}``."""
    data = _object(body)
    query = data.get("query")
    if not isinstance(query, str):
        raise _bad("`query` is required and must be a string", "query")
    texts, _ = _texts(data, "texts")
    _truncation_direction(data)
    if _optional(data, "raw_scores", bool, False):
        raise _bad(
            "`raw_scores` is not served: the ensemble returns the model's activated score, not its logit", "raw_scores"
        )
    return RerankRequest(
        _model(data),
        query,
        texts,
        _optional(data, "return_text", bool, False),
        _optional(data, "truncate", bool, False),
    )


@dataclass(frozen=True)
class PredictRequest:
    """TEI ``POST /predict``: texts, or (text, pair) rows for a text-pair classifier."""

    model: str | None
    inputs: Any
    truncate: bool

    def rows(self, pair_model: bool) -> tuple[list[str], list[str] | None, bool]:
        """The texts, their pairs (None for a single-text model) and whether one input was given.

        As TEI reads ``inputs``: ``"a"``; ``["a", "b"]``, one pair for a pair model (two texts otherwise); or a
        list of strings, ``[text]`` or ``[text, text_pair]`` rows.
        """
        value = self.inputs
        if isinstance(value, str):
            rows, single = [_row(value)], True
        elif isinstance(value, list) and value:
            if pair_model and len(value) == 2 and all(isinstance(v, str) for v in value):
                rows, single = [(value[0], value[1])], True
            else:
                rows, single = [_row(v) for v in value], False
        else:
            raise _bad("`inputs` is required: a string, a pair, or a non-empty list of them", "inputs")
        if len(rows) > MAX_INPUTS:
            raise _bad(f"`inputs` has {len(rows)} items; at most {MAX_INPUTS} per request", "inputs")
        texts, pairs = [text for text, _ in rows], [pair for _, pair in rows]
        if pair_model:
            if any(p is None for p in pairs):
                raise _bad("this model classifies text pairs: give each input as [text, text_pair]", "inputs")
            return texts, [p or "" for p in pairs], single
        if any(p is not None for p in pairs):
            raise _bad("this model classifies single texts, not pairs", "inputs")
        return texts, None, single


def _row(item: Any) -> tuple[str, str | None]:
    if isinstance(item, str):
        return item, None
    if isinstance(item, list) and len(item) in (1, 2) and all(isinstance(s, str) for s in item):
        return item[0], (item[1] if len(item) == 2 else None)
    raise _bad("each item of `inputs` must be a string, [text] or [text, text_pair]", "inputs")


def parse_predict(body: bytes) -> PredictRequest:
    """Parse ``{inputs, raw_scores, truncate}``."""
    data = _object(body)
    _truncation_direction(data)
    if _optional(data, "raw_scores", bool, False):
        raise _bad("`raw_scores` is not served: the ensemble returns probabilities, not logits", "raw_scores")
    return PredictRequest(_model(data), data.get("inputs"), _optional(data, "truncate", bool, False))


@dataclass(frozen=True)
class TokenizeRequest:
    """TEI ``POST /tokenize``."""

    model: str | None
    texts: list[str]
    single: bool
    add_special_tokens: bool


def parse_tokenize(body: bytes) -> TokenizeRequest:
    """Parse ``{inputs, add_special_tokens}``."""
    data = _object(body)
    texts, single = _texts(data, "inputs")
    return TokenizeRequest(_model(data), texts, single, _optional(data, "add_special_tokens", bool, True))
