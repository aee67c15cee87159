"""The routes: OpenAI ``/v1/embeddings`` and ``/v1/models``, TEI ``/embed``, ``/rerank``, ``/predict``, ``/tokenize``.

A plain Starlette app (no per-request dependency injection or validation layer): each route parses its body
(:mod:`tritongen.gateway.schemas`), resolves the ensemble (:mod:`tritongen.gateway.models`), calls it over the
one gRPC channel (:mod:`tritongen.gateway.triton`) and writes JSON. Every failure leaves as an OpenAI-format
error (:mod:`tritongen.gateway.errors`).
"""

from __future__ import annotations

import base64
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic_core import to_json
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.errors import GatewayError, describe
from tritongen.gateway.auth import check_key
from tritongen.gateway.discovery import local_folder, served_names
from tritongen.gateway.errors import error_response, model_not_found, unavailable
from tritongen.gateway.models import Catalogue, ModelInfo
from tritongen.gateway.schemas import (
    parse_embed,
    parse_embeddings,
    parse_predict,
    parse_rerank,
    parse_tokenize,
)
from tritongen.gateway.triton import TritonClient

__all__ = ["GatewayOptions", "create_app"]

_UNIT_NORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class GatewayOptions:
    """Where Triton is, what the gateway may read, and its defaults.

    ``repository`` is the one Triton serves, as ``serve`` was given it. Where it is a folder here, the gateway
    reads its ensembles' names, tokenizers and labels from it; otherwise (a remote URL, another machine's
    folder, None) it lists the ensembles with Triton's repository index, which needs the admin key
    (``admin_key_file``, else ``$TRITONGEN_ADMIN_KEY``, else the file ``serve`` writes beside the repository).
    """

    triton_url: str = "127.0.0.1:8001"
    repository: Path | str | None = Path("model_repository")
    model: str | None = None  # the default ensemble of every route it can serve
    api_key: str | None = None
    timeout_s: float = 60.0
    admin_key_file: Path | None = None


def _json(payload: object, status: int = 200) -> Response:
    # pydantic_core's serialiser (Rust, shortest round-trip floats) writes a 384-float embedding about 10x
    # faster than the json module; it is installed with pydantic.
    return Response(to_json(payload), status, media_type="application/json")


def _l2(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def _unit(model: ModelInfo, vectors: np.ndarray) -> bool:
    if model.normalized is not None:
        return model.normalized
    return bool(np.all(np.abs(np.linalg.norm(vectors, axis=1) - 1.0) < _UNIT_NORM_TOLERANCE))


class Gateway:
    """The routes' state: the Triton client, the catalogue and the key."""

    def __init__(self, options: GatewayOptions) -> None:
        self.options = options
        self._key = options.api_key.encode() if options.api_key else None
        self.client: TritonClient | None = None
        self.catalogue = Catalogue(self._names, self._configs, local_folder(options.repository), options.model)

    async def _names(self) -> list[str]:
        assert self.client is not None
        return await served_names(self.client, self.options.repository, self.options.admin_key_file)

    async def _configs(self, names: Collection[str]) -> tuple[dict, dict]:
        assert self.client is not None
        return await self.client.configs(names)

    # -- plumbing -------------------------------------------------------------------------------------------

    def endpoint(self, handler: Callable[[Request], Awaitable[Response]], *, auth: bool = True) -> Callable:
        """``handler`` with the key check, and every failure as an OpenAI-format error."""

        async def run(request: Request) -> Response:
            try:
                if auth and self._key is not None:
                    check_key(self._key, request.headers.get("authorization"))
                return await handler(request)
            except GatewayError as exc:
                if exc.code == "model_not_found" or "unknown model" in exc.message:  # unloaded or renamed: re-read
                    with contextlib.suppress(GatewayError):
                        await self.catalogue.refresh(force=False)
                return error_response(exc)
            except Exception as exc:  # a bug of ours: one line in the log, no traceback to the client
                print(f"gateway: internal error on {request.url.path}: {describe(exc)}", file=sys.stderr, flush=True)
                return error_response(GatewayError(500, f"internal error: {describe(exc)}", type="server_error"))

        return run

    async def _infer(
        self, model: ModelInfo, inputs: dict, outputs: list[str], *, truncated: bool = False
    ) -> dict[str, np.ndarray]:
        """Run ``model``; with ``truncated``, also ask for ``TRUNCATED`` where the ensemble has it."""
        assert self.client is not None
        if truncated and "TRUNCATED" in model.outputs:
            outputs = [*outputs, "TRUNCATED"]
        return await self.client.infer(model, inputs, outputs)

    @staticmethod
    def _refuse_truncated(model: ModelInfo, result: dict[str, np.ndarray], field: str) -> None:
        """TEI's ``truncate: false``: a text longer than the model is an error (413), not silently cut."""
        truncated = result.get("TRUNCATED")
        if truncated is None or not truncated.any():
            return
        index = int(np.flatnonzero(truncated.reshape(-1))[0])
        limit = model.tokenizer.truncation["max_length"] if model.tokenizer is not None else None
        longer = f"longer than the model's {limit} tokens" if limit else "longer than the model takes"
        raise GatewayError(
            413,
            f"`{field}` item {index} is {longer}; send `truncate: true` to use its first tokens",
            param=field,
            code="input_too_long",
        )

    def _usage(self, model: ModelInfo, texts: list[str]) -> dict[str, int]:
        tokens = sum(len(e.ids) for e in model.tokenizer.encode_batch(texts)) if model.tokenizer is not None else 0
        return {"prompt_tokens": tokens, "total_tokens": tokens}

    async def _embed(
        self,
        model: ModelInfo,
        texts: list[str],
        dimensions: int | None,
        prompt_name: str | None,
        *,
        truncated: bool = False,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The embeddings of ``texts``, shortened to ``dimensions`` by the ensemble or here (renormalised)."""
        width = model.outputs["EMBEDDING"].dims[-1]
        if dimensions is not None and width > 0 and dimensions > width:
            raise GatewayError(
                400,
                f"`dimensions` is {dimensions}, but `{model.name}` embeds into {width}",
                param="dimensions",
                code="invalid_dimensions",
            )
        inputs: dict[str, list] = {"TEXT": texts}
        if dimensions is not None and "DIMENSIONS" in model.inputs:
            inputs["DIMENSIONS"] = [dimensions] * len(texts)
        if prompt_name is not None:
            if "PROMPT_NAME" not in model.inputs:
                raise GatewayError(400, f"`{model.name}` declares no prompts", param="prompt_name", code="no_prompts")
            inputs["PROMPT_NAME"] = [prompt_name] * len(texts)
        result = await self._infer(model, inputs, ["EMBEDDING"], truncated=truncated)
        vectors = result["EMBEDDING"]
        if dimensions is not None and "DIMENSIONS" not in model.inputs and dimensions != vectors.shape[1]:
            if not _unit(model, vectors):
                raise GatewayError(
                    400,
                    f"`{model.name}` does not normalise its embeddings, so they cannot be shortened "
                    "(only normalised, Matryoshka-style embeddings keep their meaning when cut)",
                    param="dimensions",
                    code="invalid_dimensions",
                )
            vectors = _l2(vectors[:, :dimensions])
        return vectors, result

    # -- OpenAI ---------------------------------------------------------------------------------------------

    async def embeddings(self, request: Request) -> Response:
        """``POST /v1/embeddings``."""
        req = parse_embeddings(await request.body())
        model = await self.catalogue.resolve(req.model, "embeddings", "/v1/embeddings")
        vectors, _ = await self._embed(model, req.texts, req.dimensions, req.prompt_name)
        if req.base64:
            little = vectors.astype("<f4", copy=False)
            encoded = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
        else:
            encoded = vectors.tolist()
        data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)]
        return _json({"object": "list", "data": data, "model": model.name, "usage": self._usage(model, req.texts)})

    async def list_models(self, request: Request) -> Response:
        """``GET /v1/models``: the ensembles that take text."""
        await self.catalogue.refresh(force=False)
        names = sorted(name for name, m in self.catalogue.models.items() if "TEXT" in m.inputs)
        return _json({"object": "list", "data": [_model_entry(name) for name in names]})

    async def get_model(self, request: Request) -> Response:
        """``GET /v1/models/{model}``."""
        name = request.path_params["model"]
        if name not in self.catalogue.models and await self.catalogue.lookup(name) is None:
            raise model_not_found(name, list(self.catalogue.models))
        return _json(_model_entry(name))

    # -- Text Embeddings Inference --------------------------------------------------------------------------

    async def embed(self, request: Request) -> Response:
        """``POST /embed``: ``[[float, ...], ...]``."""
        req = parse_embed(await request.body())
        model = await self.catalogue.resolve(req.model, "embeddings", "/embed")
        if not req.normalize and model.normalized:
            raise GatewayError(
                400,
                f"`{model.name}` normalises its embeddings (the checkpoint says so); "
                "`normalize: false` cannot be served",
                param="normalize",
                code="invalid_normalize",
            )
        vectors, result = await self._embed(
            model, req.texts, req.dimensions, req.prompt_name, truncated=not req.truncate
        )
        if not req.truncate:
            self._refuse_truncated(model, result, "inputs")
        if req.normalize and not model.normalized:
            vectors = _l2(vectors)
        return _json(vectors.tolist())

    async def rerank(self, request: Request) -> Response:
        """``POST /rerank``: ``[{index, score, text?}]``, best first."""
        req = parse_rerank(await request.body())
        model = await self.catalogue.resolve(req.model, "rerank", "/rerank")
        inputs = {"TEXT": [req.query] * len(req.texts), "TEXT_PAIR": req.texts}
        result = await self._infer(model, inputs, ["SCORE"], truncated=not req.truncate)
        if not req.truncate:
            self._refuse_truncated(model, result, "texts")
        scores = result["SCORE"].reshape(-1).tolist()
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        ranked = [
            {"index": i, "score": scores[i], **({"text": req.texts[i]} if req.return_text else {})} for i in order
        ]
        return _json(ranked)

    async def predict(self, request: Request) -> Response:
        """``POST /predict``: every label with its probability, best first (a list of those per input)."""
        req = parse_predict(await request.body())
        model = await self.catalogue.resolve(req.model, "predict", "/predict")
        texts, pairs, single = req.rows("TEXT_PAIR" in model.inputs)
        inputs = {"TEXT": texts, **({"TEXT_PAIR": pairs} if pairs is not None else {})}
        result = await self._infer(model, inputs, ["PROBABILITIES"], truncated=not req.truncate)
        if not req.truncate:
            self._refuse_truncated(model, result, "inputs")
        probabilities = result["PROBABILITIES"]
        labels = model.labels or tuple(f"LABEL_{i}" for i in range(probabilities.shape[1]))
        rows = [
            [{"label": labels[j], "score": row[j]} for j in sorted(range(len(row)), key=lambda j: -row[j])]
            for row in probabilities.tolist()
        ]
        return _json(rows[0] if single else rows)

    async def tokenize(self, request: Request) -> Response:
        """``POST /tokenize``: the tokens the ensemble's tokenizer step makes of each input."""
        req = parse_tokenize(await request.body())
        model = await self.catalogue.resolve(req.model, "tokenize", "/tokenize")
        encodings = model.tokenizer.encode_batch(req.texts, add_special_tokens=req.add_special_tokens)
        out = []
        for text, encoding in zip(req.texts, encodings):
            tokens = []
            for token_id, token, special, (start, stop) in zip(
                encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets
            ):
                if special:
                    tokens.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
                else:
                    tokens.append(
                        {"id": token_id, "text": text[start:stop], "special": False, "start": start, "stop": stop}
                    )
            out.append(tokens)
        return _json(out)

    async def health(self, request: Request) -> Response:
        """``GET /health``: 200 when Triton is ready and serves an ensemble the gateway can see (no key, for probes).

        Triton's readiness alone is not enough: a gateway that cannot list the served ensembles (the admin
        key missing or refused) or finds none of them answers every route with an error.
        """
        assert self.client is not None
        if not await self.client.ready():
            raise unavailable(f"the Triton server at {self.client.url} is not ready")
        try:
            await self.catalogue.refresh(force=False)
        except GatewayError as exc:
            raise unavailable(exc.message) from None
        if not self.catalogue.models:
            raise unavailable(
                self.catalogue.problem
                or f"the Triton server at {self.client.url} serves none of the ensembles of {self.options.repository}"
            )
        return _json({"status": "ok"})

    async def live(self, request: Request) -> Response:
        """``GET /livez``: 200 while the gateway runs, whatever Triton's state (a liveness probe)."""
        return _json({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Open the gRPC channel and read the catalogue at start; close the channel at exit."""
        self.client = TritonClient(self.options.triton_url, self.options.timeout_s)
        try:
            await self.catalogue.refresh()
            names = ", ".join(sorted(self.catalogue.models)) or "none yet"
            problem = f" ({self.catalogue.problem})" if self.catalogue.problem else ""
            print(f"gateway: Triton at {self.options.triton_url} serves {names}{problem}", flush=True)
        except GatewayError as exc:  # Triton may come up later; the first request reads the catalogue again
            print(f"gateway: {exc.message}; will retry on the first request", flush=True)
        try:
            yield
        finally:
            await self.client.close()


def _model_entry(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "tritongen"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
    code = "not_found" if exc.status_code == 404 else None
    return error_response(GatewayError(exc.status_code, message.get(exc.status_code, str(exc.detail)), code=code))


def create_app(options: GatewayOptions) -> Starlette:
    """The gateway's ASGI app."""
    gateway = Gateway(options)
    routes = [
        Route("/v1/embeddings", gateway.endpoint(gateway.embeddings), methods=["POST"]),
        Route("/embeddings", gateway.endpoint(gateway.embeddings), methods=["POST"]),
        Route("/v1/models", gateway.endpoint(gateway.list_models), methods=["GET"]),
        Route("/v1/models/{model:path}", gateway.endpoint(gateway.get_model), methods=["GET"]),
        Route("/embed", gateway.endpoint(gateway.embed), methods=["POST"]),
        Route("/rerank", gateway.endpoint(gateway.rerank), methods=["POST"]),
        Route("/predict", gateway.endpoint(gateway.predict), methods=["POST"]),
        Route("/tokenize", gateway.endpoint(gateway.tokenize), methods=["POST"]),
        Route("/health", gateway.endpoint(gateway.health, auth=False), methods=["GET"]),
        Route("/livez", gateway.endpoint(gateway.live, auth=False), methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error}, lifespan=gateway.lifespan)
