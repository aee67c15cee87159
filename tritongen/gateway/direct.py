"""The ensemble's Python steps run in the gateway: texts encoded here, the model step called, vectors normalised here.

Every request through an ensemble costs Triton its frontend, the tokenizer step's Python stub and the postprocess
step's: two hand-offs between processes of about 0.3 to 0.8 ms each, where a short text's tokenisation takes
0.05 ms. The gateway already parses the request and holds the tokenizer, so for an embedder it can do the
steps' work itself and send the model step its rows: Triton then runs only the native model step.

It does so only where that is the same computation, checked when the catalogue reads the ensemble:

- the ensemble is a plain embedder, ``TEXT`` (and optionally ``TOKEN_IDS``, ``TRUNCATE_LEFT``) through a
  tokenizer step into the model step, whose pooled output either is ``EMBEDDING`` (the postprocess folded into
  the graph) or goes through an embedding postprocess step that takes nothing else (no ``DIMENSIONS``, no windows);
- the tokenizer step cuts no windows and puts no prompt in front of a text;
- its helper package holds this very ``encoding.py`` (:mod:`tritongen.encoding`, the encoding and packing the
  step runs), and the postprocess step's this very ``vectors.py`` (its normalisation): a repository built by
  another release of tritongen is served through its ensemble, as before.

The rows are then packed by the step's own code with the step's own settings, so the model step computes
the same rows and the embeddings are bit-equal to the ensemble's (the tests compare them). Anything else a call
carries (a prompt name, ``DIMENSIONS``) goes through the ensemble. ``--through-ensemble`` turns this off.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tritongen.encoding
import tritongen.vectors
from tritongen.configs.model_config import ModelConfig
from tritongen.contract import EMBEDDING, TEXT, TOKEN_COUNT, TOKEN_IDS, TRUNCATE_LEFT, TRUNCATED
from tritongen.encoding import ENCODER_OUTPUTS, TextEncoder, serial, truncated
from tritongen.parameters import (
    EmbeddingParameters,
    PromptParameters,
    StrideParameters,
    TokenizerFileParameters,
    TokenizerParameters,
)
from tritongen.vectors import l2_normalize

__all__ = ["DirectPath", "direct_path"]

_TAKES = frozenset({TEXT, TOKEN_IDS, TRUNCATE_LEFT})  # the ensemble inputs the gateway encodes itself
_FROM_TOKENIZER = frozenset({TRUNCATED, TOKEN_COUNT})  # the ensemble outputs its tokenizer step gives
_HELPERS = "_tritongen_step"  # the step's helper package (tritongen.steps.helpers, which the gateway does not import)


@dataclass(frozen=True)
class DirectPath:
    """How the gateway answers one ensemble itself: its tokenizer step's encoder, then its model step."""

    step: str  # the model step Triton runs
    encoder: TextEncoder
    feeds: Mapping[str, str]  # the model step's input -> the packed array it reads
    output: str  # the model step's output: the pooled vectors
    normalize: bool  # whether the postprocess step normalises them (False where the graph folds it)

    def serves(self, inputs: Mapping[str, Any]) -> bool:
        """Whether a call of these ensemble inputs can go this way (a prompt or ``DIMENSIONS`` cannot)."""
        return inputs.keys() <= _TAKES

    def encode(self, inputs: Mapping[str, Sequence[Any]]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The model step's inputs for one call's rows, and the tokenizer step's own outputs of them.

        Rows are texts (``TEXT``) or token ids (``TOKEN_IDS``, checked against the vocabulary: ValueError), cut
        at their start where ``TRUNCATE_LEFT`` says, as the step cuts them.
        """
        left = [bool(v) for v in inputs[TRUNCATE_LEFT]] if TRUNCATE_LEFT in inputs else None
        if TOKEN_IDS in inputs:
            encodings = self.encoder.from_ids(inputs[TOKEN_IDS], left)
        else:
            serial(len(inputs[TEXT]))  # as the step: a few texts on this thread, not the tokenizer's pool
            encodings = self.encoder.encode(inputs[TEXT], None, left)
        packed = self.encoder.pack(encodings)
        arrays = {name: packed[source] for name, source in self.feeds.items()}
        return arrays, {TRUNCATED: truncated(encodings), TOKEN_COUNT: self.encoder.counts(encodings)}

    def finish(self, values: np.ndarray) -> np.ndarray:
        """``EMBEDDING`` of the model step's output, as the postprocess step makes it."""
        return l2_normalize(values) if self.normalize else values.astype(np.float32)


def _same_file(folder: Path, module: Any) -> bool:
    """Whether the step's helper package holds ``module``'s very source (the code this gateway would run)."""
    copy = folder / _HELPERS / Path(module.__file__).name
    return copy.is_file() and copy.read_bytes() == Path(module.__file__).read_bytes()


@functools.lru_cache(maxsize=32)
def _encoder(path: str, mtime_ns: int, settings: TokenizerParameters, names: tuple[str, ...]) -> TextEncoder:
    """Read once per file version: the catalogue is read again every second under health probes."""
    return TextEncoder.configured(path, settings, names)


def direct_path(
    ensemble: ModelConfig, typed: Mapping[str, ModelConfig], versions: Mapping[str, int], repository: Path | None
) -> DirectPath | None:
    """The way around ``ensemble``'s Python steps, or None where it would not compute the same (module docs)."""
    if repository is None or EMBEDDING not in {t.name for t in ensemble.outputs} or len(ensemble.steps) not in (2, 3):
        return None
    first, model, *rest = ensemble.steps
    tokenizer, step = typed.get(first.model_name), typed.get(model.model_name)
    version = versions.get(first.model_name)
    if tokenizer is None or step is None or version is None or not tokenizer.sets(TokenizerParameters):
        return None
    if 0 < step.max_batch_size < ensemble.max_batch_size:  # a call the ensemble takes in one, the step would refuse
        return None
    if tokenizer.sets(StrideParameters) or (
        tokenizer.sets(PromptParameters) and tokenizer.read(PromptParameters).prompts
    ):
        return None
    if any(k != v or k not in _TAKES for k, v in first.input_map.items()) or {t.name for t in ensemble.inputs} - _TAKES:
        return None
    folder = repository / first.model_name / str(version)
    tokenizer_file = folder / tokenizer.read(TokenizerFileParameters).tokenizer_file
    if not tokenizer_file.is_file() or not _same_file(folder, tritongen.encoding):
        return None
    packed = {tensor: name for name, tensor in first.output_map.items() if name in ENCODER_OUTPUTS}
    if any(tensor not in packed for tensor in model.input_map.values()) or len(model.output_map) != 1:
        return None
    ((output, pooled),) = model.output_map.items()
    normalize = False
    if rest:
        (post,) = rest
        last = typed.get(post.model_name)
        post_version = versions.get(post.model_name)
        if last is None or post_version is None or not last.sets(EmbeddingParameters):
            return None
        if (
            list(post.input_map.values()) != [pooled]
            or len(last.inputs) != 1
            or dict(post.output_map) != {EMBEDDING: EMBEDDING}
        ):
            return None
        if not _same_file(repository / post.model_name / str(post_version), tritongen.vectors):
            return None
        normalize = last.read(EmbeddingParameters).normalize
    elif pooled != EMBEDDING:
        return None
    given = {tensor for name, tensor in first.output_map.items() if name == tensor and name in _FROM_TOKENIZER}
    if {t.name for t in ensemble.outputs} - given - {EMBEDDING}:
        return None
    names = tuple(packed[tensor] for tensor in model.input_map.values())
    settings = tokenizer.read(TokenizerParameters)
    encoder = _encoder(str(tokenizer_file), tokenizer_file.stat().st_mtime_ns, settings, names)
    feeds = {name: packed[tensor] for name, tensor in model.input_map.items()}
    return DirectPath(model.model_name, encoder, feeds, output, normalize)
