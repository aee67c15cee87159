"""The catalogue: which served ensemble can answer which route, read from Triton's own model configs.

An ensemble is described by its config (inputs, outputs, ``max_batch_size``, its steps) and by its steps'
configs (``normalize``, ``max_length``, ``tokenizer_file``, ``labels_file`` parameters). Where the gateway can
read the repository folder, it also loads the tokenizer step's ``tokenizer.json`` (for ``/tokenize`` and honest
token counts) and the labels (for ``/predict``). :class:`Catalogue` resolves all of it at start, again at most
once a second when asked (``/health``, ``/v1/models``), and looks up a model a request names that it does not
know. Which names to ask Triton about is :mod:`tritongen.gateway.discovery`'s business.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.configs.model_config import ModelConfig
from tritongen.configs.model_config import Tensor as ConfigTensor
from tritongen.configs.parser import from_proto
from tritongen.contract import (
    EMBEDDING,
    PROBABILITIES,
    SCORE,
    SPARSE_INDICES,
    SPARSE_VALUES,
    TEXT,
    TEXT_PAIR,
)
from tritongen.errors import GatewayError
from tritongen.gateway.direct import DirectPath, direct_path
from tritongen.gateway.errors import model_not_found, unsupported_route
from tritongen.parameters import (
    EmbeddingParameters,
    EnsembleParameters,
    LabelsParameters,
    PromptParameters,
    StrideParameters,
    TokenizerFileParameters,
    TokenizerParameters,
)

__all__ = ["ROUTES", "ROUTE_NEEDS", "Catalogue", "Fetch", "ModelInfo", "Names", "Needs", "describe_models"]


@dataclass(frozen=True)
class Needs:
    """What a route needs of an ensemble: public tensors it sends and reads (``tritongen.contract``), and why not.

    ``one_score``: a single score per text pair (a cross-encoder with one label, not a pair classifier), else
    ``many_labels`` (``{labels}``: their count); ``tokenizer``: the tokenizer step's ``tokenizer.json``, which the
    gateway reads itself.
    """

    inputs: tuple[str, ...] = (TEXT,)
    outputs: tuple[str, ...] = ()
    refusal: str = ""
    one_score: bool = False
    many_labels: str = ""
    tokenizer: bool = False


_PAIR_SCORER = Needs(
    (TEXT, TEXT_PAIR), (SCORE,), "re-ranking needs a text-pair scorer (inputs TEXT and TEXT_PAIR, output SCORE)",
    one_score=True, many_labels="it classifies pairs into {labels} labels; re-ranking needs one score per pair",
)  # fmt: skip
_SCORER_OR_EMBEDDER = "scoring needs a one-score text-pair model or an embedder (whose cosine it takes)"
_EMBEDDER = Needs(outputs=(EMBEDDING,), refusal="it outputs no EMBEDDING (it is not an embedding model)")

# Route -> what serves it: any one of its needs, in order (the first one's refusal explains a miss). A model says
# what it serves by the tensors its ensemble's config declares, which its task chose.
ROUTE_NEEDS: dict[str, tuple[Needs, ...]] = {
    "embeddings": (_EMBEDDER,),
    "rerank": (_PAIR_SCORER,),
    "predict": (Needs(outputs=(PROBABILITIES,), refusal="it outputs no PROBABILITIES (it is no classifier)"),),
    "tokenize": (Needs(refusal="the gateway cannot read its tokenizer step's tokenizer.json", tokenizer=True),),
    "sparse": (
        Needs(
            outputs=(SPARSE_INDICES, SPARSE_VALUES),
            refusal="it outputs no SPARSE_INDICES and SPARSE_VALUES (it is not a sparse embedding model)",
        ),
    ),
    "score": (
        dataclasses.replace(_PAIR_SCORER, refusal=_SCORER_OR_EMBEDDER, many_labels=_SCORER_OR_EMBEDDER),
        _EMBEDDER,
    ),
    "text": (Needs(),),
}
ROUTES = tuple(ROUTE_NEEDS)
_REFRESH_INTERVAL_S = 1.0  # health probes and /v1/models calls share one read of the configs a second


@dataclass(frozen=True)
class TensorType:
    """One input or output: its KServe datatype (``BYTES``, ``FP32``, ...) and dims without the batch."""

    datatype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ModelInfo:
    """What one ensemble takes and gives, and the files of its steps the gateway could read."""

    name: str
    max_batch_size: int
    inputs: Mapping[str, TensorType]
    outputs: Mapping[str, TensorType]
    normalized: bool | None = None  # None: no step says (the gateway then looks at the vectors)
    labels: tuple[str, ...] | None = None
    tokenizer: Any = None  # tokenizers.Tokenizer, truncating as the tokenizer step does
    steps: tuple[str, ...] = field(default=())
    max_length: int | None = None  # the tokenizer step's, where its config says
    pooling: str | None = None  # an embedder's pooling, where the ensemble's config says (TEI's /info)
    instances: int = 1  # the most instances any of its steps has: how many calls it works on at once
    prompts: Mapping[str, str] = field(default_factory=dict)  # its tokenizer step's, by name (TEI's prompt_name)
    default_prompt: str = ""  # the one a text gets when a request names none
    direct: DirectPath | None = None  # how the gateway runs its Python steps itself (tritongen.gateway.direct)
    _why: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)  # why_not, once per route

    @property
    def kind(self) -> str:
        """TEI's model type: ``reranker``, ``classifier``, ``sparse`` (SPLADE pooling) or ``embedding``."""
        if self.why_not("rerank") is None:
            return "reranker"
        if PROBABILITIES in self.outputs:
            return "classifier"
        return "sparse" if self.why_not("sparse") is None else "embedding"

    @property
    def num_labels(self) -> int | None:
        """The width of ``PROBABILITIES``, if the ensemble outputs it."""
        probabilities = self.outputs.get(PROBABILITIES)
        return probabilities.dims[-1] if probabilities else None

    def why_not(self, route: str) -> str | None:
        """None if this ensemble can serve ``route`` (:data:`ROUTE_NEEDS`), else the reason it cannot."""
        if route not in self._why:  # every request asks; the answer is the ensemble's, fixed
            if TEXT not in self.inputs:
                self._why[route] = "it takes no TEXT input"
            else:
                reasons = [self._unmet(needs) for needs in ROUTE_NEEDS[route]]  # KeyError: a route declaring nothing
                self._why[route] = None if None in reasons else reasons[0]
        return self._why[route]

    def _unmet(self, needs: Needs) -> str | None:
        if any(name not in self.inputs for name in needs.inputs) or any(n not in self.outputs for n in needs.outputs):
            return needs.refusal
        if needs.tokenizer and self.tokenizer is None:
            return needs.refusal
        if needs.one_score and (self.num_labels or 1) != 1:
            return needs.many_labels.format(labels=self.num_labels)
        return None


def _datatype(enum_name: str) -> str:
    """``TYPE_STRING`` -> ``BYTES``, ``TYPE_FP32`` -> ``FP32`` (the KServe names infer requests use)."""
    name = enum_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _tensors(items: Sequence[ConfigTensor]) -> dict[str, TensorType]:
    return {t.name: TensorType(_datatype(t.data_type), t.dims) for t in items}


def _typed(configs: Mapping[str, Any]) -> dict[str, ModelConfig]:
    """The typed configs of the messages Triton served; one no typed config can hold (not ours) is left out."""
    typed = {}
    for name, message in configs.items():
        try:
            typed[name] = from_proto(message)
        except ValueError:  # several instance groups, or an instance kind other than CPU and GPU
            continue
    return typed


def _step_file(repository: Path | None, step: str, version: int | None, filename: str) -> Path | None:
    if repository is None or version is None:
        return None
    path = repository / step / str(version) / filename
    return path if path.is_file() else None


def _load_tokenizer(path: Path | None, max_length: int | None) -> Any:
    if path is None:
        return None
    return _tokenizer(str(path), path.stat().st_mtime_ns, max_length)


@functools.lru_cache(maxsize=32)
def _tokenizer(path: str, mtime_ns: int, max_length: int | None) -> Any:
    """Read once per file version: health probes refresh the catalogue every few seconds, the file rarely changes."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()
    if max_length:
        tokenizer.enable_truncation(max_length)
    return tokenizer


def describe_models(
    configs: Mapping[str, Any], versions: Mapping[str, int], repository: Path | None
) -> dict[str, ModelInfo]:
    """``ModelInfo`` of every ensemble among ``configs`` (model name -> the ``ModelConfig`` message Triton serves).

    The messages are read as typed configs (:func:`tritongen.configs.parser.from_proto`); the steps' files from disk.
    """
    models = {}
    typed = _typed(configs)
    for name, config in typed.items():
        if config.platform != "ensemble":
            continue
        normalized, labels, tokenizer, max_length = None, None, None, None
        prompts, default_prompt = {}, ""
        for model in config.step_models:
            step, version = typed.get(model), versions.get(model)
            if step is None:
                continue
            if step.sets(EmbeddingParameters):
                normalized = step.read(EmbeddingParameters).normalize
            labels_path = (
                _step_file(repository, model, version, step.read(LabelsParameters).labels_file)
                if step.sets(LabelsParameters)
                else None
            )
            if labels_path is not None:
                labels = tuple(json.loads(labels_path.read_text(encoding="utf-8")))
            if not step.sets(TokenizerParameters):
                continue
            length = step.read(TokenizerParameters).max_length
            max_length = length if max_length is None else max_length
            if step.sets(PromptParameters):
                prompted = step.read(PromptParameters)
                prompts, default_prompt = prompted.prompts, prompted.default_prompt_name
            if tokenizer is None:
                # A windowed step (a `stride` between windows: long_text chunk, NER) reads every token of a text.
                cut = None if step.sets(StrideParameters) else length
                tokenizer_file = step.read(TokenizerFileParameters).tokenizer_file
                tokenizer = _load_tokenizer(_step_file(repository, model, version, tokenizer_file), cut)
        models[name] = ModelInfo(
            name,
            config.max_batch_size,
            _tensors(config.inputs),
            _tensors(config.outputs),
            normalized,
            labels,
            tokenizer,
            config.step_models,
            max_length,
            config.read(EnsembleParameters).pooling,
            max((typed[m].instances for m in config.step_models if m in typed), default=1),
            prompts,
            default_prompt or "",
            direct_path(config, typed, versions, repository),
        )
    return models


Names = Callable[[], Awaitable[list[str]]]
Fetch = Callable[[Collection[str]], Awaitable[tuple[dict[str, Any], dict[str, int]]]]


class Catalogue:
    """The served ensembles: read at start, refreshed on demand, and looked up when a request names another.

    ``names()`` says which ensembles to look for (it may fail: listing them can need the admin key);
    ``fetch(names)`` reads the configs and versions of those Triton serves.
    """

    def __init__(
        self,
        names: Names,
        fetch: Fetch,
        repository: Path | None,
        default: str | None = None,
        *,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self._names, self._fetch, self._repository, self._default = names, fetch, repository, default
        self._aliases = dict(aliases or {})  # a name the default is also served under (served_model_name)
        self._models: dict[str, ModelInfo] = {}
        self._lock = asyncio.Lock()
        self._refreshed_at = float("-inf")
        self.problem: str | None = None  # why the last refresh could not list the served ensembles

    @property
    def models(self) -> dict[str, ModelInfo]:
        """The ensembles known now, by name."""
        return self._models

    async def refresh(self, *, force: bool = True) -> None:
        """Read the served ensembles from Triton again (at most once a second unless ``force``).

        When they cannot be listed, the ones already known and the default are still read, so that a
        gateway without the admin key keeps serving the models it was told about; with none, it raises.
        """
        async with self._lock:
            if not force and time.monotonic() - self._refreshed_at < _REFRESH_INTERVAL_S:
                return
            known = {*self._models, *([self._default] if self._default else [])}
            try:
                names, self.problem = {*await self._names(), *known}, None
            except GatewayError as exc:
                self.problem = exc.message
                if not known:
                    raise
                names = known
            configs, versions = await self._fetch(names)
            self._models = describe_models(configs, versions, self._repository)
            self._refreshed_at = time.monotonic()

    def canonical(self, name: str) -> str:
        """The ensemble ``name`` stands for: the default for its alias (``served_model_name``), else itself."""
        return self._aliases.get(name, name)

    async def lookup(self, name: str) -> ModelInfo | None:
        """Ask Triton for ``name`` alone (its config is open to every client); remember it if served."""
        async with self._lock:
            configs, versions = await self._fetch([name])
            found = describe_models(configs, versions, self._repository).get(name)
            if found is not None:
                self._models = {**self._models, name: found}
            return found

    async def resolve(self, name: str | None, route: str, label: str) -> ModelInfo:
        """The ensemble ``name`` (or the default for ``route``), checked to serve it; ``label`` names the route."""
        if name is None:
            return await self._default_for(route, label)
        name = self.canonical(name)
        model = self._models.get(name) or await self.lookup(name)
        if model is None:
            raise model_not_found(name, list(self._models))
        why = model.why_not(route)
        if why:
            raise unsupported_route(name, label, why)
        return model

    async def _default_for(self, route: str, label: str) -> ModelInfo:
        if self._default is not None and self._default in self._models:
            model = self._models[self._default]
            if model.why_not(route) is None:
                return model
        if not self._models:
            await self.refresh(force=False)
        able = sorted(name for name, model in self._models.items() if model.why_not(route) is None)
        if len(able) == 1:
            return self._models[able[0]]
        if not able:
            raise GatewayError(400, f"no served ensemble can serve {label}", param="model", code="unsupported_model")
        raise GatewayError(
            400,
            f"several ensembles can serve {label} ({', '.join(able)}); name one with `model`",
            param="model",
            code="model_required",
        )
