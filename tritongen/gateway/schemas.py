"""Request bodies of the OpenAI and Text Embeddings Inference routes: one pydantic model per body.

Each body is a frozen model of the API's own field names, strict JSON types, unknown fields ignored and null as
absent (:class:`Body`); a field TEI and OpenAI shape loosely (a text, token ids, or a list of either) reads through
one validator of its own. :meth:`Body.parse` takes the raw body and returns the model, or raises a 400
:class:`GatewayError` that names the field (OpenAI's ``param``) in the route family's words (:func:`bad`). The
value checks the Cohere, vLLM and decode routes share (:func:`text_list`, :func:`token_ids`) are here too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, model_validator

from tritongen.errors import GatewayError

__all__ = [
    "MAX_INPUTS",
    "QUERY_REFUSED",
    "Body",
    "EmbedRequest",
    "EmbeddingsRequest",
    "PredictRequest",
    "RerankRequest",
    "Row",
    "Rows",
    "SimilarityRequest",
    "SparseRequest",
    "TeiBody",
    "TokenizeRequest",
    "bad",
    "dimensions",
    "field_reader",
    "one_of",
    "text_list",
    "texts_field",
    "token_ids",
]

MAX_INPUTS = 2048  # OpenAI's limit on inputs per embeddings request
Row = str | list[int]  # one input: a text, or the model's own token ids (TEI's ``InputType``)
_DIRECTIONS = {"right": False, "Right": False, "left": True, "Left": True}  # TEI's spellings: keep the end?


def bad(message: str, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    """A 400 that names the field (``param``)."""
    return GatewayError(400, message, param=param, code=code)


def _listed(value: Any, key: str, kinds: str) -> tuple[list[Any], bool]:
    """Field ``key``'s ``value``: a string as ``[it]``, else a non-empty list (400s name ``kinds``); and which."""
    if isinstance(value, str):
        return [value], True
    if value is None:
        raise bad(f"`{key}` is required", key)
    if not isinstance(value, list):
        raise bad(f"`{key}` must be {kinds}", key)
    if not value:
        raise bad(f"`{key}` cannot be empty: give a string or a non-empty list of strings", key, code="empty")
    return value, False


def text_list(value: Any, key: str) -> tuple[list[str], bool]:
    """Field ``key``: a string or a non-empty list of strings; also whether it was one string."""
    value, single = _listed(value, key, "a string or a non-empty list of strings")
    if single:
        return value, True
    if any(isinstance(v, int) or (isinstance(v, list) and v and isinstance(v[0], int)) for v in value):
        raise bad(f"`{key}` holds token ids; this gateway takes text only (the ensemble tokenizes)", key)
    if not all(isinstance(v, str) for v in value):
        raise bad(f"`{key}` must be a string or a list of strings", key)
    if len(value) > MAX_INPUTS:
        raise bad(f"`{key}` has {len(value)} items; at most {MAX_INPUTS} per request", key)
    return value, False


def input_rows(value: Any, key: str) -> tuple[list[Row], bool]:
    """TEI's ``Input`` (field ``key``): a text or a row of token ids, or a non-empty list; and whether one was."""
    value, single = _listed(value, key, "a string, a list of token ids, or a non-empty list of those")
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


B = TypeVar("B", bound="Body")


@dataclass(frozen=True)
class Rows:
    """A loosely shaped input read into rows: each a text or token ids, and whether one input was given."""

    items: list[Row]
    single: bool


def field_reader(key: str, read: Any) -> Any:
    """A field read by ``read(value, key)`` alone: its checks and their words are the route's, not pydantic's."""
    return PlainValidator(lambda value: read(value, key))


def dimensions(value: Any, key: str = "dimensions") -> int:
    """A ``dimensions`` field (OpenAI's, TEI's, Cohere's ``output_dimension``): a whole number, at least 1."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad(f"`{key}` must be of type int", key)
    if value < 1:
        raise bad(f"`{key}` must be at least 1", key)
    return value


def _keeps_end(value: Any, key: str) -> bool:
    """TEI's ``truncation_direction`` (``Left``, ``left``, ``Right``, ``right``): whether a long row keeps its end."""
    if not isinstance(value, str):
        raise bad(f"`{key}` must be of type str", key)
    if value not in _DIRECTIONS:
        raise bad(f"`{key}`: unknown variant `{value}`, expected `Left` or `Right`", key)
    return _DIRECTIONS[value]


def _input_rows(value: Any, key: str) -> Rows:
    return Rows(*input_rows(value, key))


def _texts(value: Any, key: str) -> Rows:
    return Rows(*text_list(value, key))


def texts_field(key: str) -> Any:
    """A field that is a string or a non-empty list of strings (:func:`text_list`), read as the list."""
    return field_reader(key, lambda value, name: text_list(value, name)[0])


Dimensions = Annotated[int | None, field_reader("dimensions", dimensions)]
Direction = Annotated[bool, field_reader("truncation_direction", _keeps_end)]  # True: Left, a long row keeps its end

_TYPES = {"bool_type": "a boolean", "string_type": "of type str", "int_type": "of type int", "float_type": "a number"}


def _model(value: Any) -> str | None:
    """The ``model`` field: None if empty."""
    if not isinstance(value, str):
        raise bad("`model` must be of type str", "model")
    return value or None


Model = Annotated[str | None, PlainValidator(_model)]


class Body(BaseModel):
    """A request body: the API's field names, strict JSON types, unknown fields ignored, null as absent."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    # A field's own words where it is absent or of the wrong type (``query``: "is required and must be a string").
    refusals: ClassVar[dict[str, str]] = {}

    model: Model = None

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise bad("the request body must be a JSON object")
        return {key: value for key, value in data.items() if value is not None}

    @classmethod
    def parse(cls: type[B], body: bytes) -> B:
        """The body as this model; a 400 naming the field (in the route's words) where it is not."""
        try:
            return cls.model_validate_json(body)
        except ValidationError as exc:
            if exc.errors(include_url=False)[0]["type"] == "json_invalid":
                raise _not_json(body) from None
            raise _bad_from(exc, said=cls.refusals) from None


class TeiBody(Body):
    """A TEI body's options for long rows: whether to cut them (``truncate``) and which end to keep."""

    truncate: bool | None = None  # None: the gateway's auto_truncate
    truncation_direction: Direction = False

    @property
    def left(self) -> bool:
        """Whether a long row keeps its end (``truncation_direction: Left``)."""
        return self.truncation_direction


def _not_json(body: bytes) -> GatewayError:
    """The 400 for a body that is no JSON, in the standard parser's words (what the gateway always said)."""
    try:
        json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return bad(f"the request body is not valid JSON ({exc})")
    return bad("the request body is not valid JSON")


def _bad_from(exc: ValidationError, within: str = "", said: dict[str, str] | None = None) -> GatewayError:
    """A pydantic error as the gateway words it: the first one, naming its field (inside ``within``, if given).

    ``said``: a field's own words for it (:attr:`Body.refusals`).
    """
    error = exc.errors(include_url=False)[0]
    kind, where = error["type"], (within,) * bool(within) + tuple(error["loc"])
    if said and where and str(where[0]) in said:
        return bad(said[str(where[0])], str(where[0]))
    if kind == "model_type" and within:
        return bad(f"`{within}` must be an object", within)
    if not where:
        return bad("the request body must be a JSON object")
    key = ".".join(str(part) for part in where)
    if kind == "missing":
        return bad(f"`{key}` is required", key)
    if kind in _TYPES:
        return bad(f"`{key}` must be {_TYPES[kind]}", key)
    return bad(f"`{key}` is invalid: {error['msg']}", key)


class EmbeddingsRequest(Body):
    """OpenAI ``POST /v1/embeddings``: each row a text or token ids (as TEI's ``Input`` mixes them)."""

    input: Annotated[Rows, field_reader("input", _input_rows)]
    dimensions: Dimensions = None
    encoding_format: Annotated[str, field_reader("encoding_format", lambda v, k: one_of(v, k, ("float", "base64")))] = (
        "float"
    )
    prompt_name: str | None = None

    @property
    def base64(self) -> bool:
        """Whether the embeddings go back base64-encoded."""
        return self.encoding_format == "base64"


def one_of(value: Any, key: str, choices: tuple[str, ...]) -> str:
    """A string field that takes one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        named = " or ".join(f"`{c}`" for c in choices) if len(choices) == 2 else f"one of {', '.join(choices)}"
        raise bad(f"`{key}` must be {named}", key)
    return value


class _TeiRows(TeiBody):
    """A TEI body with rows in ``inputs``: texts or token ids, one or a list."""

    inputs: Annotated[Rows, field_reader("inputs", _input_rows)]
    prompt_name: str | None = None

    @property
    def texts(self) -> list[Row]:
        """The rows."""
        return self.inputs.items

    @property
    def single(self) -> bool:
        """Whether one input was given (TEI then answers one row, not a list)."""
        return self.inputs.single


class EmbedRequest(_TeiRows):
    """TEI ``POST /embed``."""

    normalize: bool = True
    dimensions: Dimensions = None


class SparseRequest(_TeiRows):
    """TEI ``POST /embed_sparse``."""


_SCORE = "the model's activated score, not its logit"
QUERY_REFUSED = "`query` is required and must be a string"


class RerankRequest(TeiBody):
    """TEI ``POST /rerank``: ``raw_scores`` is refused (the ensemble gives the activated score)."""

    refusals: ClassVar[dict[str, str]] = {"query": QUERY_REFUSED}

    query: str
    texts: Annotated[list[str], texts_field("texts")]
    return_text: bool = False
    raw_scores: Annotated[bool, field_reader("raw_scores", lambda v, k: _not_raw(v, k, _SCORE))] = False


def _not_raw(value: Any, key: str, served: str) -> bool:
    if not isinstance(value, bool):
        raise bad(f"`{key}` must be a boolean", key)
    if value:
        raise bad(f"`{key}` is not served: the ensemble returns {served}", key)
    return value


class PredictRequest(TeiBody):
    """TEI ``POST /predict``: texts, or (text, pair) rows for a text-pair classifier."""

    inputs: Any = None
    raw_scores: Annotated[
        bool, field_reader("raw_scores", lambda v, k: _not_raw(v, k, "probabilities, not logits"))
    ] = False

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


class SimilarityParameters(TeiBody):
    """TEI ``/similarity``'s ``parameters``: ``truncate``, ``truncation_direction``, ``prompt_name``."""

    prompt_name: str | None = None


class _Similarity(BaseModel):
    """``{source_sentence, sentences}``."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    source_sentence: str
    sentences: Annotated[list[str], texts_field("inputs.sentences")]


def _similarity_inputs(value: Any, key: str) -> _Similarity:
    if not isinstance(value, dict) or not isinstance(value.get("source_sentence"), str):
        raise bad("`inputs` must be {source_sentence: string, sentences: [string, ...]}", key)
    try:
        return _Similarity.model_validate(value)
    except ValidationError as exc:
        raise _bad_from(exc, key) from None


def _similarity_parameters(value: Any, key: str) -> SimilarityParameters:
    if not isinstance(value, dict):
        raise bad("`parameters` must be an object", key)
    try:
        return SimilarityParameters.model_validate({k: v for k, v in value.items() if v is not None})
    except ValidationError as exc:
        raise _bad_from(exc) from None  # named as TEI names them: `truncate`, not `parameters.truncate`


class SimilarityRequest(Body):
    """TEI ``POST /similarity``: ``source_sentence`` against each of ``sentences``; options in ``parameters``."""

    inputs: Annotated[_Similarity, field_reader("inputs", _similarity_inputs)]
    parameters: Annotated[SimilarityParameters, field_reader("parameters", _similarity_parameters)] = (
        SimilarityParameters()
    )

    @property
    def source(self) -> str:
        """The sentence the others are set against."""
        return self.inputs.source_sentence

    @property
    def sentences(self) -> list[str]:
        """The sentences set against it."""
        return self.inputs.sentences

    @property
    def truncate(self) -> bool | None:
        """``parameters.truncate``; None: the gateway's auto_truncate."""
        return self.parameters.truncate

    @property
    def left(self) -> bool:
        """``parameters.truncation_direction`` is Left."""
        return self.parameters.left

    @property
    def prompt_name(self) -> str | None:
        """``parameters.prompt_name``."""
        return self.parameters.prompt_name


class TokenizeRequest(Body):
    """TEI ``POST /tokenize``."""

    inputs: Annotated[Rows, field_reader("inputs", _texts)]
    add_special_tokens: bool = True
    prompt_name: str | None = None

    @property
    def texts(self) -> list[str]:
        """The texts."""
        return [str(t) for t in self.inputs.items]

    @property
    def single(self) -> bool:
        """Whether one text was given."""
        return self.inputs.single
