"""The gateway's shared state and plumbing: the Triton client, the catalogue, the key, and the helpers the routes share.

Each API family's routes are a module of their own (:mod:`~tritongen.gateway.openai`,
:mod:`~tritongen.gateway.tei`, :mod:`~tritongen.gateway.vllm`, :mod:`~tritongen.gateway.cohere`); each route
parses its body, resolves the ensemble through :class:`Gateway`, calls it through the one Triton client (on
Triton's HTTP port) and writes JSON, and every failure leaves in its family's error shape
(:mod:`tritongen.gateway.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic_core import to_json
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tritongen.contract import (
    DIMENSIONS,
    EMBEDDING,
    PROMPT_NAME,
    TEXT,
    TOKEN_COUNT,
    TOKEN_IDS,
    TRUNCATE_LEFT,
    TRUNCATED,
)
from tritongen.errors import GatewayError, describe
from tritongen.gateway.auth import check_key
from tritongen.gateway.batcher import SPREAD_LENGTH, Batcher, Call, cut_calls, merged_contexts, row_lengths
from tritongen.gateway.direct import DirectPath
from tritongen.gateway.discovery import local_folder, served_names
from tritongen.gateway.errors import Family, error_response, unavailable
from tritongen.gateway.metrics import CONTENT_TYPE, FAILURES, GatewayMetrics
from tritongen.gateway.models import Catalogue, ModelInfo
from tritongen.gateway.schemas import Row, bad
from tritongen.gateway.tokens import check_ids, texts_from_ids
from tritongen.gateway.tracing import DEFAULT_SERVICE, Tracing
from tritongen.gateway.triton import TritonClient, stack_rows
from tritongen.vectors import matryoshka_cut

__all__ = ["Gateway", "GatewayOptions", "json_response"]

_UNIT_NORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class GatewayOptions:
    """Where Triton is, what the gateway may read, and its defaults.

    ``repository`` is the one Triton serves, as ``serve`` was given it. Where it is a folder here, the gateway
    reads its ensembles' names, tokenizers and labels from it; otherwise (a remote URL, another machine's
    folder, None) it lists the ensembles with Triton's repository index, which needs the admin key
    (``admin_key_file``, else ``$TRITONGEN_ADMIN_KEY``, else the file ``serve`` writes beside the repository).
    """

    triton_url: str = "127.0.0.1:8001"  # Triton's gRPC port: the catalogue, the admin APIs
    triton_http_url: str = "127.0.0.1:8000"  # Triton's HTTP port: inference
    repository: Path | str | None = Path("model_repository")
    model: str | None = None  # the default ensemble of every route it can serve
    api_key: str | None = None
    timeout_s: float = 60.0
    admin_key_file: Path | None = None
    # Text Embeddings Inference's router settings, with its 1.9 defaults (router/src/main.rs):
    auto_truncate: bool = True  # a request without `truncate` gets its text's first tokens
    max_client_batch_size: int = 32  # inputs per request on TEI's routes (OpenAI's and Cohere's keep their own)
    payload_limit: int = 2_000_000  # bytes of a request body
    max_concurrent_requests: int = 512  # inference requests in flight; more get 429
    served_model_name: str | None = None  # what the default model is called in answers (and may be asked for)
    default_prompt_name: str | None = None  # the prompt embedding requests get when they name none
    # Triton calls of one kind in flight before requests wait to go together (tritongen.gateway.batcher);
    # None: per ensemble, its steps' most instances plus one; 0: every request its own call, at once.
    max_triton_calls: int | None = None
    # The calls a big request is cut into (tritongen.gateway.batcher.cut_calls); None: per ensemble, its steps' most
    # instances; 1: never cut.
    spread_calls: int | None = None
    # OpenTelemetry: where spans go (an OTLP/HTTP collector; None: no tracing) and the service they name.
    otlp_endpoint: str | None = None
    otlp_service_name: str = DEFAULT_SERVICE
    # Where an embedder allows it, the gateway encodes and normalises itself and calls the model step alone
    # (tritongen.gateway.direct); False: every call goes through the ensemble.
    direct: bool = True


# Between the calls a big request is cut into (tritongen.gateway.batcher.cut_calls): sent together, they reach the one
# tokenizer instance together, which batches them, and the model step's dynamic batcher then merges them again into
# one batch on one instance. A few milliseconds apart, the first is tokenised alone and runs while the next is.
STAGGER_S = 0.002


def json_response(payload: object, status: int = 200) -> Response:
    """``payload`` as a JSON response."""
    # pydantic_core's serialiser (Rust, shortest round-trip floats) writes a 384-float embedding about 10x
    # faster than the json module; it is installed with pydantic.
    return Response(to_json(payload), status, media_type="application/json")


@dataclass
class _Record:
    """What handling one request learned, for its metrics: the ensemble it ran and the inputs it sent."""

    model: str = ""
    rows: int = 0


_RECORD: contextvars.ContextVar[_Record | None] = contextvars.ContextVar("tritongen_gateway_request", default=None)


def _failure(error: GatewayError) -> str:
    """TEI's ``err`` label of ``te_request_failure`` for ``error``."""
    if error.code in FAILURES:
        return FAILURES[error.code]
    return "validation" if error.status in (400, 404, 413, 422) else "backend"


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
        self.metrics = GatewayMetrics()
        self.tracing = Tracing(options.otlp_endpoint, options.otlp_service_name) if options.otlp_endpoint else None
        self.batcher = Batcher(self._send, options.max_triton_calls, self.metrics)
        self._in_flight = 0  # inference requests being answered (max_concurrent_requests)
        aliases = {options.served_model_name: options.model} if options.served_model_name and options.model else {}
        self.catalogue = Catalogue(
            self._names, self._configs, local_folder(options.repository), options.model, aliases=aliases
        )

    async def _send(
        self, model: ModelInfo, inputs: Mapping[str, Sequence[Any]], outputs: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """One Triton call: the ensemble, or its model step alone, its Python steps run here (:mod:`~.direct`).

        Where tracing is on, the call is a span under the request's, whose context Triton gets too.
        """
        direct = model.direct if self.options.direct else None
        direct = direct if direct is not None and direct.serves(inputs) else None
        if self.tracing is None:
            return await self._call(model, direct, inputs, outputs)
        links = [context.run(self.tracing.current) for context in merged_contexts()]
        called = model.name if direct is None else direct.step
        with self.tracing.call(called, len(next(iter(inputs.values()))), links) as headers:
            return await self._call(model, direct, inputs, outputs, headers)

    async def _call(
        self,
        model: ModelInfo,
        direct: DirectPath | None,
        inputs: Mapping[str, Sequence[Any]],
        outputs: Sequence[str],
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, np.ndarray]:
        if direct is None:
            return await self.triton.infer(model, inputs, outputs, headers)
        started = time.perf_counter()
        try:  # a big call's tokenisation off the event loop (the Rust tokenizer lets the GIL go)
            if sum(row_lengths(inputs)) < SPREAD_LENGTH:
                encode = direct.encode(inputs)
            else:
                encode = await asyncio.to_thread(direct.encode, inputs)
        except ValueError as exc:  # a token id outside the vocabulary, where the gateway could not check it before
            raise bad(str(exc), "inputs") from None
        self.metrics.encoded(model.name, time.perf_counter() - started)
        arrays, given = encode
        given[EMBEDDING] = direct.finish(await self.triton.infer_step(direct.step, arrays, direct.output, headers))
        return {name: given[name] for name in outputs}

    async def _names(self) -> list[str]:
        return await served_names(self.triton, self.options.repository, self.options.admin_key_file)

    async def _configs(self, names: Collection[str]) -> tuple[dict, dict]:
        return await self.triton.configs(names)

    # -- plumbing -------------------------------------------------------------------------------------------

    @property
    def triton(self) -> TritonClient:
        """The open client (the lifespan opens it before the first request)."""
        assert self.client is not None
        return self.client

    def route(
        self,
        path: str,
        handler: Callable[[Gateway, Request], Awaitable[Response]],
        family: Family,
        method: str = "POST",
        *,
        inference: bool = True,
    ) -> Route:
        """A route at ``path`` answered by ``handler(self, request)``, its errors in ``family``'s shape.

        An ``inference`` route counts against ``max_concurrent_requests`` (TEI's permits: not ``/info``,
        ``/tokenize``, ``/decode``).
        """
        limited = inference and method == "POST"
        bound = self.endpoint(functools.partial(handler, self), family, limited=limited, name=path if limited else "")
        return Route(path, bound, methods=[method])

    def served_name(self, model: ModelInfo) -> str:
        """What ``model`` is called in answers: ``served_model_name`` for the default model, else its name."""
        if self.options.served_model_name and model.name == self.options.model:
            return self.options.served_model_name
        return model.name

    def client_batch(self, count: int, field: str) -> None:
        """TEI's limit on inputs per request (``max_client_batch_size``), its message and status."""
        limit = self.options.max_client_batch_size
        if count > limit:
            raise GatewayError(
                422, f"batch size {count} > maximum allowed batch size {limit}", param=field, code="batch_too_large"
            )

    async def model_for(self, request: Request, name: str | None, route: str) -> ModelInfo:
        """The ensemble ``name`` (or the default) that can serve ``route``, what ``request``'s path needs.

        A path under ``/models/{model}`` names it; errors name the path called.
        """
        model = await self.catalogue.resolve(request.path_params.get("model") or name, route, request.scope["path"])
        record = _RECORD.get()
        if record is not None:  # the metrics' model label, for its failures too
            record.model = model.name
        return model

    def endpoint(
        self,
        handler: Callable[[Request], Awaitable[Response]],
        family: Family = Family.OPENAI,
        *,
        auth: bool = True,
        limited: bool = False,
        name: str = "",
    ) -> Callable:
        """``handler`` with the key check, the body's size limit, and every failure as an error of ``family``'s shape.

        ``limited``: the request takes one of ``max_concurrent_requests`` permits, or gets 429 at once. A ``name``d
        route (an inference route, by its path) is counted and timed in the metrics (:mod:`~.metrics`).
        """

        async def run(request: Request) -> Response:
            record = _Record()
            token = _RECORD.set(record) if name else None
            started = time.perf_counter()
            try:
                if auth and self._key is not None:
                    check_key(self._key, request.headers.get("authorization"))
                await self._check_size(request)
                if not limited:
                    return await handler(request)
                if self._in_flight >= self.options.max_concurrent_requests:
                    raise GatewayError(429, "Model is overloaded", type="overloaded", code="overloaded")
                self._in_flight += 1
                try:
                    if self.tracing is None or not name:
                        response = await handler(request)
                    else:
                        with self.tracing.request(request.method, name, request.headers) as span:
                            response = await handler(request)
                            span.set_attribute("http.response.status_code", response.status_code)
                finally:
                    self._in_flight -= 1
                if name:
                    self.metrics.answered(record.model, name, record.rows, time.perf_counter() - started)
                return response
            except GatewayError as exc:
                if name:
                    self.metrics.failed(record.model, name, record.rows, _failure(exc))
                if exc.code == "model_not_found":  # unloaded or renamed: read the catalogue again
                    with contextlib.suppress(GatewayError):
                        await self.catalogue.refresh(force=False)
                return error_response(exc, family)
            except Exception as exc:  # a bug of ours: one line in the log, no traceback to the client
                if name:
                    self.metrics.failed(record.model, name, record.rows, "backend")
                print(f"gateway: internal error on {request.url.path}: {describe(exc)}", file=sys.stderr, flush=True)
                internal = GatewayError(500, f"internal error: {describe(exc)}", type="server_error")
                return error_response(internal, family)
            finally:
                if token is not None:
                    _RECORD.reset(token)

        return run

    async def _check_size(self, request: Request) -> None:
        """413 for a body over ``payload_limit`` bytes, whether it says its length or not."""
        limit = self.options.payload_limit
        declared = request.headers.get("content-length", "")
        too_big = (declared.isdigit() and int(declared) > limit) or (
            request.method == "POST" and not declared and len(await request.body()) > limit
        )
        if too_big:
            raise GatewayError(
                413, f"the request body is over the {limit}-byte limit", type="invalid_request_error",
                code="payload_too_large",
            )  # fmt: skip

    async def infer(
        self,
        model: ModelInfo,
        inputs: dict,
        outputs: list[str],
        *,
        truncate: bool | None = None,
        left: bool = False,
        field: str = "inputs",
    ) -> dict[str, np.ndarray]:
        """Run ``model``, cutting long rows as ``truncate`` says (None: ``auto_truncate``), at their start if ``left``.

        ``TEXT``'s rows are texts, or token ids where the route takes them (:meth:`calls`). Not truncating, a row
        longer than the model is an error naming its item of ``field`` (TEI's ``truncate: false``), not silently
        cut: the ensemble says which rows it cut in ``TRUNCATED``. The answer has the ensemble's ``TOKEN_COUNT``
        too where it gives one (:meth:`usage` reads it).
        """
        cut = self.options.auto_truncate if truncate is None else truncate
        refuse = not cut and TRUNCATED in model.outputs
        asked = [*outputs, *([TRUNCATED] if refuse else []), *([TOKEN_COUNT] if TOKEN_COUNT in model.outputs else [])]
        per_row = all(len(model.outputs[name].dims) <= 1 for name in asked if name in model.outputs)
        parts = model.instances if self.options.spread_calls is None else self.options.spread_calls
        whole = self.calls(model, inputs, left, field)
        calls = cut_calls(whole, parts if per_row else 1, model.max_batch_size)
        stagger = STAGGER_S if len(calls) > len(whole) else 0.0
        record = _RECORD.get()
        if record is not None:
            record.model, record.rows = model.name, record.rows + sum(len(rows) for rows, _ in calls)
        if len(calls) == 1:
            result = await self.batcher.submit(model, calls[0][1], asked)
        else:  # texts and ids apart, big calls cut (:func:`cut_calls`): the rows back in the request's order
            sent = (self._submit_after(i * stagger, model, part, asked) for i, (_, part) in enumerate(calls))
            parts = await asyncio.gather(*sent)
            order = np.argsort(np.concatenate([rows for rows, _ in calls]), kind="stable")
            result = {name: stack_rows([part[name] for part in parts])[order] for name in parts[0]}
        if TOKEN_COUNT in result:
            self.metrics.lengths(model.name, result[TOKEN_COUNT].reshape(-1).tolist())
        if refuse:
            self._refuse_truncated(model, result, field)
        return result

    async def _submit_after(
        self, delay: float, model: ModelInfo, inputs: Mapping[str, Sequence[Any]], outputs: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """One call of a cut request, submitted ``delay`` seconds on (:data:`STAGGER_S`)."""
        if delay:
            await asyncio.sleep(delay)
        return await self.batcher.submit(model, inputs, outputs)

    def calls(self, model: ModelInfo, inputs: dict[str, list], left: bool, field: str) -> list[Call]:
        """The Triton calls ``inputs`` make, each with the request rows it answers.

        Rows of ``TEXT`` that are token ids go as ``TOKEN_IDS`` where the ensemble takes them (checked against the
        vocabulary here where the gateway has the tokenizer, else by the tokenizer step), in a call beside the
        texts'; an ensemble built without ``TOKEN_IDS`` gets the ids' text, which must encode back to them.
        ``left`` sends ``TRUNCATE_LEFT`` for every row, where the ensemble takes it.
        """
        count = len(next(iter(inputs.values())))
        if left:
            if TRUNCATE_LEFT not in model.inputs:
                raise bad(
                    f"`{model.name}` cannot keep the end of a long input (`truncation_direction: Left`): its first "
                    "step cuts inputs its own way, or it was built before it could (rebuild it)",
                    "truncation_direction",
                )
            inputs = {**inputs, TRUNCATE_LEFT: [True] * count}
        rows: list[Row] = inputs.get(TEXT, [])
        ids = [i for i, row in enumerate(rows) if not isinstance(row, str)]
        if not ids:
            return [(list(range(count)), inputs)]
        if TOKEN_IDS not in model.inputs:
            texts = list(rows)
            for index, text in zip(ids, texts_from_ids(model, [rows[i] for i in ids], field), strict=True):
                texts[index] = text
            return [(list(range(count)), {**inputs, TEXT: texts})]
        if model.tokenizer is not None:
            check_ids(model, rows, field)
        texts = [i for i in range(count) if isinstance(rows[i], str)]
        calls = []
        for indices, name in ((texts, TEXT), (ids, TOKEN_IDS)):
            if indices:  # the ids take no prompt (the ids are what the model reads)
                dropped = (TEXT, PROMPT_NAME) if name == TOKEN_IDS else (TEXT,)
                part = {k: [v[i] for i in indices] for k, v in inputs.items() if k not in dropped}
                part[name] = [rows[i] for i in indices]
                calls.append((indices, part))
        return calls

    @staticmethod
    def _refuse_truncated(model: ModelInfo, result: dict[str, np.ndarray], field: str) -> None:
        """A text longer than the model is an error (413; TEI's 422 on its routes), not silently cut."""
        truncated = result.get(TRUNCATED)
        if truncated is None or not truncated.any():
            return
        index = int(np.flatnonzero(truncated.reshape(-1))[0])
        limit = model.max_length
        longer = f"longer than the model's {limit} tokens" if limit else "longer than the model takes"
        raise GatewayError(
            413,
            f"`{field}` item {index} is {longer}; send `truncate: true` to use its first tokens",
            param=field,
            code="input_too_long",
        )

    @staticmethod
    def usage(model: ModelInfo, result: Mapping[str, np.ndarray], texts: Sequence[Any]) -> dict[str, int]:
        """OpenAI's usage: the tokens the ensemble read, its ``TOKEN_COUNT`` of each text of ``result`` summed.

        The gateway does not tokenise again. Only an ensemble built before ``TOKEN_COUNT`` existed has ``texts``
        (strings or pairs) counted by its tokenizer step's ``tokenizer.json``, where the gateway can read it
        (else 0).
        """
        counts = result.get(TOKEN_COUNT)
        if counts is not None:
            tokens = int(counts.sum())
        elif model.tokenizer is not None:
            ids = sum(len(t) for t in texts if isinstance(t, list))  # token-id rows, counted as sent
            strings = [t for t in texts if not isinstance(t, list)]  # texts, and pairs as tuples
            tokens = ids + sum(len(e.ids) for e in model.tokenizer.encode_batch(strings))
        else:
            tokens = 0
        return {"prompt_tokens": tokens, "total_tokens": tokens}

    async def embed(
        self,
        model: ModelInfo,
        texts: Sequence[Row],
        dimensions: int | None = None,
        prompt_name: str | None = None,
        *,
        truncate: bool | None = None,
        left: bool = False,
        field: str = "inputs",
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The embeddings of ``texts`` (or token-id rows), shortened to ``dimensions`` by the ensemble or here.

        Long rows are cut as :meth:`infer` says; ``prompt_name`` None takes ``default_prompt_name`` where the
        model has prompts. A vector shortened here is renormalised.
        """
        width = model.outputs[EMBEDDING].dims[-1]
        if dimensions is not None and width > 0 and dimensions > width:
            raise GatewayError(
                400,
                f"`dimensions` is {dimensions}, but `{model.name}` embeds into {width}",
                param="dimensions",
                code="invalid_dimensions",
            )
        inputs: dict[str, list] = {TEXT: list(texts)}
        if dimensions is not None and DIMENSIONS in model.inputs:
            inputs[DIMENSIONS] = [dimensions] * len(texts)
        self.add_prompt(model, inputs, prompt_name, len(texts))
        result = await self.infer(model, inputs, [EMBEDDING], truncate=truncate, left=left, field=field)
        vectors = result[EMBEDDING]
        if dimensions is not None and DIMENSIONS not in model.inputs and dimensions != vectors.shape[1]:
            if not _unit(model, vectors):
                raise GatewayError(
                    400,
                    f"`{model.name}` does not normalise its embeddings, so they cannot be shortened "
                    "(only normalised, Matryoshka-style embeddings keep their meaning when cut)",
                    param="dimensions",
                    code="invalid_dimensions",
                )
            vectors = matryoshka_cut(vectors, dimensions, normalize=True)
        return vectors, result

    def add_prompt(self, model: ModelInfo, inputs: dict[str, list], prompt_name: str | None, rows: int) -> None:
        """``PROMPT_NAME`` for ``rows`` texts: the one asked for, else ``default_prompt_name`` where it has prompts.

        Rows of token ids take no prompt (the ids are what the model reads), so naming one beside them is refused.
        """
        if prompt_name is not None and any(not isinstance(row, str) for row in inputs.get(TEXT, ())):
            raise bad("`prompt_name` cannot be used with token ids: put the prompt's tokens in the ids", "prompt_name")
        if prompt_name is None and self.options.default_prompt_name and PROMPT_NAME in model.inputs:
            prompt_name = self.options.default_prompt_name
        if prompt_name is None:
            return
        if PROMPT_NAME not in model.inputs:
            raise GatewayError(400, f"`{model.name}` declares no prompts", param="prompt_name", code="no_prompts")
        inputs[PROMPT_NAME] = [prompt_name] * rows

    async def health(self, request: Request) -> Response:
        """``GET /health``: 200 when Triton is ready and serves an ensemble the gateway can see (no key, for probes).

        Triton's readiness alone is not enough: a gateway that cannot reach Triton's HTTP port (inference), cannot
        list the served ensembles (the admin key missing or refused) or finds none of them answers every route
        with an error.
        """
        if not await self.triton.ready():
            raise unavailable(f"the Triton server at {self.triton.url} is not ready")
        if not await self.triton.http_ready():
            raise unavailable(
                f"Triton's HTTP port at {self.triton.http_url}, which inference goes to, does not answer ready "
                "(--triton-http-url)"
            )
        try:
            await self.catalogue.refresh(force=False)
        except GatewayError as exc:
            raise unavailable(exc.message) from None
        if not self.catalogue.models:
            raise unavailable(
                self.catalogue.problem
                or f"the Triton server at {self.triton.url} serves none of the ensembles of {self.options.repository}"
            )
        return json_response({"status": "ok"})

    async def live(self, request: Request) -> Response:
        """``GET /livez``: 200 while the gateway runs, whatever Triton's state (a liveness probe)."""
        return json_response({"status": "ok"})

    async def scrape(self, request: Request) -> Response:
        """``GET /metrics``: the gateway's Prometheus metrics (no key, as TEI serves them to its scraper)."""
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Open the Triton client and read the catalogue at start; close its connections at exit."""
        self.client = TritonClient(self.options.triton_url, self.options.triton_http_url, self.options.timeout_s)
        try:
            await self.catalogue.refresh()
            names = ", ".join(sorted(self.catalogue.models)) or "none yet"
            problem = f" ({self.catalogue.problem})" if self.catalogue.problem else ""
            where = f"{self.options.triton_url} (inference at {self.options.triton_http_url})"
            print(f"gateway: Triton at {where} serves {names}{problem}", flush=True)
            direct = sorted(name for name, model in self.catalogue.models.items() if model.direct is not None)
            if direct and self.options.direct:
                alone = ", ".join(direct)
                print(f"gateway: runs the Python steps itself, calling the model step alone, for {alone}", flush=True)
        except GatewayError as exc:  # Triton may come up later; the first request reads the catalogue again
            print(f"gateway: {exc.message}; will retry on the first request", flush=True)
        if self.tracing is not None:
            print(f"gateway: traces go to {self.tracing.url} (OTLP/HTTP)", flush=True)
        try:
            yield
        finally:
            await self.batcher.close()
            await self.client.close()
            if self.tracing is not None:
                self.tracing.shutdown()
