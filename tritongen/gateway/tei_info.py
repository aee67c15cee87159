"""Text Embeddings Inference's routes about the model and its tokenizer: ``GET /info``, ``/tokenize``, ``/decode``.

``/info`` describes one ensemble (``?model=NAME``, or ``GET /models/{model}/info``, where Hugging Face's
``InferenceClient.get_endpoint_info`` asks; else the default) with TEI's fields, from what Triton's configs say.
"""

from __future__ import annotations

import importlib.metadata
from typing import Annotated, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.contract import EMBEDDING, PROBABILITIES, SCORE, SPARSE_VALUES
from tritongen.gateway.core import Gateway, json_response
from tritongen.gateway.errors import Family
from tritongen.gateway.models import ModelInfo
from tritongen.gateway.schemas import Body, TokenizeRequest, bad, field_reader, token_ids
from tritongen.gateway.tokens import decode as decode_ids

__all__ = ["routes"]

_OUTPUT = {"embedding": EMBEDDING, "classifier": PROBABILITIES, "reranker": SCORE, "sparse": SPARSE_VALUES}


def _version() -> str:
    try:
        return importlib.metadata.version("tritongen")
    except importlib.metadata.PackageNotFoundError:  # a copy of the package, as the gateway image carries it
        return "unknown"


def _model_type(model: ModelInfo) -> dict[str, object]:
    kind = model.kind
    if kind in ("embedding", "sparse"):  # the build writes the pooling into the ensemble's config
        return {"embedding": {"pooling": model.pooling or ("splade" if kind == "sparse" else "unknown")}}
    labels = model.labels or tuple(f"LABEL_{i}" for i in range(model.num_labels or 1))
    id2label = {str(i): label for i, label in enumerate(labels)}
    return {kind: {"id2label": id2label, "label2id": {label: i for i, label in enumerate(labels)}}}


def info_of(model: ModelInfo, gateway: Gateway) -> dict[str, object]:
    """TEI's ``Info`` of ``model`` with ``gateway``'s router settings; what it cannot know, TEI's examples."""
    max_length = model.max_length or 0
    batch = model.max_batch_size if model.max_batch_size > 0 else None
    output = model.outputs.get(_OUTPUT[model.kind])
    dtype = {"FP32": "float32", "FP16": "float16"}.get(output.datatype, output.datatype.lower()) if output else ""
    return {
        "model_id": model.name,
        "model_sha": None,
        "model_dtype": dtype,
        "served_model_name": gateway.served_name(model),
        "model_type": _model_type(model),
        "max_concurrent_requests": gateway.options.max_concurrent_requests,
        "max_input_length": max_length,
        "max_batch_tokens": max_length * (batch or 1),
        "max_batch_requests": batch,
        "max_client_batch_size": gateway.options.max_client_batch_size,
        "auto_truncate": gateway.options.auto_truncate,
        "tokenization_workers": 0,
        "version": _version(),
        "sha": None,
        "docker_label": None,
    }


async def info(gateway: Gateway, request: Request) -> Response:
    """``GET /info``."""
    model = await gateway.model_for(request, request.query_params.get("model") or None, "text")
    return json_response(info_of(model, gateway))


async def tokenize(gateway: Gateway, request: Request) -> Response:
    """``POST /tokenize``: the tokens the ensemble's tokenizer step makes of each input."""
    req = TokenizeRequest.parse(await request.body())
    model = await gateway.model_for(request, req.model, "tokenize")
    name = req.prompt_name or model.default_prompt  # as the tokenizer step prompts a text
    if name and name not in model.prompts:
        known = ", ".join(sorted(model.prompts)) or "none"
        raise bad(f"`prompt_name` `{name}` is not one of `{model.name}`'s prompts ({known})", "prompt_name")
    texts = [model.prompts.get(name, "") + text for text in req.texts]
    encodings = model.tokenizer.encode_batch(texts, add_special_tokens=req.add_special_tokens)
    out = []
    for text, encoding in zip(texts, encodings, strict=True):
        tokens = []
        for token_id, token, special, (start, stop) in zip(
            encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets, strict=True
        ):
            if special:
                tokens.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
            else:
                piece = text[start:stop]
                tokens.append({"id": token_id, "text": piece, "special": False, "start": start, "stop": stop})
        out.append(tokens)
    return json_response(out)


def _id_rows(value: Any, key: str) -> list[list[int]]:
    if value == []:
        raise bad(f"`{key}` cannot be empty", key, code="empty")
    rows = token_ids(value, key)
    if rows is None:
        raise bad(f"`{key}` must be a list of token ids or a list of such lists", key)
    return rows


class DecodeRequest(Body):
    """TEI's ``POST /decode``: ``{ids, skip_special_tokens}``."""

    ids: Annotated[list[list[int]], field_reader("ids", _id_rows)]
    skip_special_tokens: bool = True


async def decode(gateway: Gateway, request: Request) -> Response:
    """``POST /decode``: ``{ids, skip_special_tokens}`` -> ``[text, ...]`` with the build's tokenizer."""
    req = DecodeRequest.parse(await request.body())
    model = await gateway.model_for(request, req.model, "tokenize")
    return json_response(decode_ids(model, req.ids, req.skip_special_tokens))


def routes(gateway: Gateway) -> list[Route]:
    """TEI's model and tokenizer routes, bound to ``gateway``."""
    return [
        gateway.route("/info", info, Family.TEI, "GET"),
        gateway.route("/models/{model}/info", info, Family.TEI, "GET"),
        gateway.route("/tokenize", tokenize, Family.TEI, inference=False),
        gateway.route("/decode", decode, Family.TEI, inference=False),
    ]
