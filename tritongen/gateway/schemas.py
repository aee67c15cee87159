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
    "MAX_INPUTS",
    "EmbedRequest",
    "EmbeddingsRequest",
    "PredictRequest",
    "RerankRequest",
    "Row",
    "SimilarityRequest",
    "SparseRequest",
    "TokenizeRequest",
    "bad",
    "body_object",
    "dimensions_field",
    "input_rows",
    "model_name",
    "optional",
    "parse_embed",
    "parse_embeddings",
    "parse_predict",
    "parse_rerank",
    "parse_similarity",
    "parse_sparse",
    "parse_tokenize",
    "text_list",
    "token_ids",
    "truncation_direction",
]

MAX_INPUTS = 2048  # OpenAI's limit on inputs per embeddings request
Row = str | list[int]  # one input: a text, or the model's own token ids (TEI's ``InputType``)
_DIRECTIONS = {"right": False, "Right": False, "left": True, "Left": True}  # TEI's spellings: keep the end?


def bad(message: str, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    """A 400 that names the field (``param``)."""
    return GatewayError(400, message, param=param, code=code)


def body_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"the request body is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise bad("the request body must be a JSON object")
    return data


def _listed(data: dict[str, Any], key: str, kinds: str) -> tuple[list[Any], bool]:
    """``data[key]``: a string as ``[it]``, else a non-empty list (400s name ``kinds``); whether it was a string."""
    value = data.get(key)
    if isinstance(value, str):
        return [value], True
    if value is None:
        raise bad(f"`{key}` is required", key)
    if not isinstance(value, list):
        raise bad(f"`{key}` must be {kinds}", key)
    if not value:
        raise bad(f"`{key}` cannot be empty: give a string or a non-empty list of strings", key, code="empty")
    return value, False


def text_list(data: dict[str, Any], key: str) -> tuple[list[str], bool]:
    """A string or a non-empty list of strings; also whether it was one string."""
    value, single = _listed(data, key, "a string or a non-empty list of strings")
    if single:
        return value, True
    if any(isinstance(v, int) or (isinstance(v, list) and v and isinstance(v[0], int)) for v in value):
        raise bad(f"`{key}` holds token ids; this gateway takes text only (the ensemble tokenizes)", key)
    if not all(isinstance(v, str) for v in value):
        raise bad(f"`{key}` must be a string or a list of strings", key)
    if len(value) > MAX_INPUTS:
        raise bad(f"`{key}` has {len(value)} items; at most {MAX_INPUTS} per request", key)
    return value, False


def input_rows(data: dict[str, Any], key: str) -> tuple[list[Row], bool]:
    """TEI's ``Input``: a text or a row of token ids, or a non-empty list of them; also whether one was given."""
    value, single = _listed(data, key, "a string, a list of token ids, or a non-empty list of those")
    if single:
        return value, True
    if all(_is_id(v) for v in value):
        return [list(value)], True
    rows: list[Row] = []
    for item in value:
        if isinstance(item, str):
            rows.append(item)
        elif isinstance(item, list) and all(_is_id(v) for v in item):
            if not item:
                raise bad(f"`{key}` item {len(rows)} is an empty list of token ids", key, code="empty")
            rows.append(list(item))
        else:
            raise bad(f"each item of `{key}` must be a string or a list of token ids (integers from 0)", key)
    if len(rows) > MAX_INPUTS:
        raise bad(f"`{key}` has {len(rows)} items; at most {MAX_INPUTS} per request", key)
    return rows, False


def optional(data: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """``data[key]`` if it is of ``kind``, ``default`` if absent or null; a 400 otherwise."""
    value = data.get(key, default)
    if value is None:
        return default
    # bool is an int in Python: a bool where an int is wanted (or the reverse) is refused
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise bad(f"`{key}` must be {'a boolean' if kind is bool else f'of type {kind.__name__}'}", key)
    return value


def model_name(data: dict[str, Any]) -> str | None:
    """The ``model`` field, None if absent or empty."""
    model = optional(data, "model", str, None)
    return model or None


def dimensions_field(data: dict[str, Any]) -> int | None:
    """``dimensions``: at least 1 where given."""
    dimensions = optional(data, "dimensions", int, None)
    if dimensions is not None and dimensions < 1:
        raise bad("`dimensions` must be at least 1", "dimensions")
    return dimensions


def truncation_direction(data: dict[str, Any]) -> bool:
    """Whether TEI's ``truncation_direction`` (``Left``, ``left``, ``Right``, ``right``) keeps a long row's end."""
    direction = optional(data, "truncation_direction", str, "right")
    if direction not in _DIRECTIONS:
        raise bad(
            f"`truncation_direction`: unknown variant `{direction}`, expected `Left` or `Right`", "truncation_direction"
        )
    return _DIRECTIONS[direction]


def token_ids(value: Any, key: str) -> list[list[int]] | None:
    """OpenAI's token-id input, ``[int, ...]`` or ``[[int, ...], ...]``, as rows; None for any other value."""
    if not isinstance(value, list) or not value:
        return None
    rows = [value] if all(_is_id(v) for v in value) else value
    if not all(isinstance(row, list) and row and all(_is_id(v) for v in row) for row in rows):
        return None
    if len(rows) > MAX_INPUTS:
        raise bad(f"`{key}` has {len(rows)} items; at most {MAX_INPUTS} per request", key)
    return rows


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class EmbeddingsRequest:
    """OpenAI ``POST /v1/embeddings``: each row a text or token ids (as TEI's ``Input`` mixes them)."""

    model: str | None
    texts: list[Row]
    dimensions: int | None
    base64: bool
    prompt_name: str | None


def parse_embeddings(body: bytes) -> EmbeddingsRequest:
    """Parse ``{input, model, dimensions, encoding_format, user}`` (``user`` is ignored)."""
    data = body_object(body)
    rows, _ = input_rows(data, "input")
    encoding = optional(data, "encoding_format", str, "float")
    if encoding not in ("float", "base64"):
        raise bad("`encoding_format` must be `float` or `base64`", "encoding_format")
    prompt_name = optional(data, "prompt_name", str, None)
    return EmbeddingsRequest(model_name(data), rows, dimensions_field(data), encoding == "base64", prompt_name)


@dataclass(frozen=True)
class EmbedRequest:
    """TEI ``POST /embed``: its rows are texts or token ids."""

    model: str | None
    texts: list[Row]
    single: bool
    normalize: bool
    truncate: bool | None  # None: the gateway's auto_truncate
    dimensions: int | None
    prompt_name: str | None
    left: bool = False  # truncation_direction Left: a long row keeps its end


def _tei_inputs(body: bytes) -> tuple[dict[str, Any], list[Row], bool, bool]:
    """A TEI body with rows in ``inputs``: the object, its rows, whether one was given, and whether to keep ends.

    ``truncation_direction`` is read here, after ``inputs``: the routes' other fields are their own.
    """
    data = body_object(body)
    rows, single = input_rows(data, "inputs")
    return data, rows, single, truncation_direction(data)


def parse_embed(body: bytes) -> EmbedRequest:
    """Parse ``{inputs, normalize, truncate, truncation_direction, dimensions, prompt_name}``."""
    data, rows, single, left = _tei_inputs(body)
    return EmbedRequest(
        model_name(data),
        rows,
        single,
        optional(data, "normalize", bool, True),
        optional(data, "truncate", bool, None),
        dimensions_field(data),
        optional(data, "prompt_name", str, None),
        left,
    )


@dataclass(frozen=True)
class RerankRequest:
    """TEI ``POST /rerank``."""

    model: str | None
    query: str
    texts: list[str]
    return_text: bool
    truncate: bool | None  # None: the gateway's auto_truncate
    left: bool = False  # truncation_direction Left


def parse_rerank(body: bytes) -> RerankRequest:
    """Parse ``{query, texts, raw_scores, return_text, truncate}``."""
    data = body_object(body)
    query = data.get("query")
    if not isinstance(query, str):
        raise bad("`query` is required and must be a string", "query")
    texts, _ = text_list(data, "texts")
    left = truncation_direction(data)
    if optional(data, "raw_scores", bool, False):
        raise bad(
            "`raw_scores` is not served: the ensemble returns the model's activated score, not its logit", "raw_scores"
        )
    return RerankRequest(
        model_name(data),
        query,
        texts,
        optional(data, "return_text", bool, False),
        optional(data, "truncate", bool, None),
        left,
    )


@dataclass(frozen=True)
class PredictRequest:
    """TEI ``POST /predict``: texts, or (text, pair) rows for a text-pair classifier."""

    model: str | None
    inputs: Any
    truncate: bool | None  # None: the gateway's auto_truncate
    left: bool = False  # truncation_direction Left

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
            raise bad("`inputs` is required: a string, a pair, or a non-empty list of them", "inputs")
        if len(rows) > MAX_INPUTS:
            raise bad(f"`inputs` has {len(rows)} items; at most {MAX_INPUTS} per request", "inputs")
        texts, pairs = [text for text, _ in rows], [pair for _, pair in rows]
        if pair_model:
            if any(p is None for p in pairs):
                raise bad("this model classifies text pairs: give each input as [text, text_pair]", "inputs")
            return texts, [p or "" for p in pairs], single
        if any(p is not None for p in pairs):
            raise bad("this model classifies single texts, not pairs", "inputs")
        return texts, None, single


def _row(item: Any) -> tuple[str, str | None]:
    if isinstance(item, str):
        return item, None
    if isinstance(item, list) and len(item) in (1, 2) and all(isinstance(s, str) for s in item):
        return item[0], (item[1] if len(item) == 2 else None)
    raise bad("each item of `inputs` must be a string, [text] or [text, text_pair]", "inputs")


def parse_predict(body: bytes) -> PredictRequest:
    """Parse ``{inputs, raw_scores, truncate}``."""
    data = body_object(body)
    left = truncation_direction(data)
    if optional(data, "raw_scores", bool, False):
        raise bad("`raw_scores` is not served: the ensemble returns probabilities, not logits", "raw_scores")
    return PredictRequest(model_name(data), data.get("inputs"), optional(data, "truncate", bool, None), left)


@dataclass(frozen=True)
class SparseRequest:
    """TEI ``POST /embed_sparse``."""

    model: str | None
    texts: list[Row]
    truncate: bool | None  # None: the gateway's auto_truncate
    prompt_name: str | None
    left: bool = False  # truncation_direction Left


def parse_sparse(body: bytes) -> SparseRequest:
    """Parse ``{inputs, truncate, truncation_direction, prompt_name}``."""
    data, rows, _, left = _tei_inputs(body)
    return SparseRequest(
        model_name(data), rows, optional(data, "truncate", bool, None), optional(data, "prompt_name", str, None), left
    )


@dataclass(frozen=True)
class SimilarityRequest:
    """TEI ``POST /similarity``: ``source_sentence`` set against each of ``sentences``."""

    model: str | None
    source: str
    sentences: list[str]
    truncate: bool | None  # None: the gateway's auto_truncate
    prompt_name: str | None
    left: bool = False  # truncation_direction Left


def parse_similarity(body: bytes) -> SimilarityRequest:
    """Parse ``{inputs: {source_sentence, sentences}, parameters: {truncate, truncation_direction, prompt_name}}``."""
    data = body_object(body)
    inputs = data.get("inputs")
    if not isinstance(inputs, dict) or not isinstance(inputs.get("source_sentence"), str):
        raise bad("`inputs` must be {source_sentence: string, sentences: [string, ...]}", "inputs")
    sentences, _ = text_list({"inputs.sentences": inputs.get("sentences")}, "inputs.sentences")
    parameters = data.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise bad("`parameters` must be an object", "parameters")
    return SimilarityRequest(
        model_name(data), inputs["source_sentence"], sentences, optional(parameters, "truncate", bool, None),
        optional(parameters, "prompt_name", str, None), truncation_direction(parameters),
    )  # fmt: skip


@dataclass(frozen=True)
class TokenizeRequest:
    """TEI ``POST /tokenize``."""

    model: str | None
    texts: list[str]
    single: bool
    add_special_tokens: bool
    prompt_name: str | None = None


def parse_tokenize(body: bytes) -> TokenizeRequest:
    """Parse ``{inputs, add_special_tokens, prompt_name}``."""
    data = body_object(body)
    texts, single = text_list(data, "inputs")
    return TokenizeRequest(
        model_name(data), texts, single, optional(data, "add_special_tokens", bool, True),
        optional(data, "prompt_name", str, None),
    )  # fmt: skip
