"""Which ensembles the gateway answers itself, calling their model step alone (``tritongen.gateway.direct``).

The decision is read from the configs Triton serves and the step folders on disk, so these tests build both by
hand: a plain embedder, a folded one, and each thing that must send the call through the ensemble instead. That
the vectors are the ensemble's bit for bit is checked against a real server in ``test_gateway.py``.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

import tritongen.encoding
import tritongen.vectors
from tritongen.configs.model_config import EnsembleStep, ModelConfig, Tensor
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
from tritongen.gateway.direct import direct_path
from tritongen.parameters import (
    EmbeddingParameters,
    PromptParameters,
    StrideParameters,
    TokenizerFileParameters,
    TokenizerParameters,
)

NAME = "emb"
PACKED = ("input_ids", "attention_mask")
FLAGS = (Tensor(TRUNCATED, "TYPE_BOOL", (1,)), Tensor(TOKEN_COUNT, "TYPE_INT32", (1,)))  # the tokenizer step's own


def _tensor(name: str, data_type: str = "TYPE_INT64", dims: tuple[int, ...] = (-1,)) -> Tensor:
    return Tensor(name, data_type, dims)


def _configs(
    *, folded: bool = False, tokenizer_parameters: dict[str, str] | None = None, post_inputs: tuple[str, ...] = ()
) -> tuple[ModelConfig, dict[str, ModelConfig]]:
    """An embedder's ensemble and its steps, as the build wires them."""
    settings = TokenizerParameters(max_length=16, padding="longest").to_parameters()
    tokenizer = ModelConfig(
        f"{NAME}_tokenizer",
        8,
        (_tensor(TEXT, "TYPE_STRING", (1,)), _tensor(TRUNCATE_LEFT, "TYPE_BOOL", (1,))),
        (*(_tensor(n) for n in PACKED), *FLAGS),
        backend="python",
        parameters={**settings, **TokenizerFileParameters().to_parameters(), **(tokenizer_parameters or {})},
    )
    pooled = EMBEDDING if folded else "sentence_embedding"
    model = ModelConfig(f"{NAME}_model", 8, tuple(_tensor(n) for n in PACKED), (_tensor(pooled, "TYPE_FP32", (4,)),))
    steps = [
        EnsembleStep(
            tokenizer.name,
            {TEXT: TEXT, TRUNCATE_LEFT: TRUNCATE_LEFT},
            {n: n for n in (*PACKED, TRUNCATED, TOKEN_COUNT)},
        ),
        EnsembleStep(model.name, {n: n for n in PACKED}, {pooled: pooled}),
    ]
    typed = {tokenizer.name: tokenizer, model.name: model}
    if not folded:
        post = ModelConfig(
            f"{NAME}_postprocess",
            8,
            (_tensor(pooled, "TYPE_FP32", (4,)), *(_tensor(n, "TYPE_INT32", (1,)) for n in post_inputs)),
            (_tensor(EMBEDDING, "TYPE_FP32", (4,)),),
            backend="python",
            parameters=EmbeddingParameters(normalize=True).to_parameters(),
        )
        steps.append(EnsembleStep(post.name, {pooled: pooled, **{n: n for n in post_inputs}}, {EMBEDDING: EMBEDDING}))
        typed[post.name] = post
    ensemble = ModelConfig(
        NAME,
        8,
        (_tensor(TEXT, "TYPE_STRING", (1,)), _tensor(TRUNCATE_LEFT, "TYPE_BOOL", (1,))),
        (
            _tensor(EMBEDDING, "TYPE_FP32", (4,)),
            _tensor(TRUNCATED, "TYPE_BOOL", (1,)),
            _tensor(TOKEN_COUNT, "TYPE_INT32", (1,)),
        ),
        platform="ensemble",
        steps=tuple(steps),
    )
    return ensemble, typed


@pytest.fixture
def repository(tmp_path: Path, minilm_path: Path) -> Path:
    """The step folders the gateway reads: the tokenizer's file and the helper files the build copies."""
    for step, modules in ((f"{NAME}_tokenizer", (tritongen.encoding,)), (f"{NAME}_postprocess", (tritongen.vectors,))):
        package = tmp_path / "repo" / step / "1" / "_tritongen_step"
        package.mkdir(parents=True)
        for module in modules:
            shutil.copyfile(module.__file__, package / Path(module.__file__).name)
    shutil.copyfile(minilm_path / "tokenizer.json", tmp_path / "repo" / f"{NAME}_tokenizer" / "1" / "tokenizer.json")
    return tmp_path / "repo"


VERSIONS = {f"{NAME}_tokenizer": 1, f"{NAME}_model": 1, f"{NAME}_postprocess": 1}


def test_a_plain_embedder_is_answered_by_its_model_step_with_the_steps_own_encoding(repository):
    ensemble, typed = _configs()
    path = direct_path(ensemble, typed, VERSIONS, repository)
    assert path is not None and path.step == f"{NAME}_model" and path.output == "sentence_embedding" and path.normalize
    assert path.serves({TEXT: ["a"]}) and path.serves({TOKEN_IDS: [[1]], TRUNCATE_LEFT: [True]})
    assert not path.serves({TEXT: ["a"], PROMPT_NAME: ["query"]}) and not path.serves({TEXT: ["a"], DIMENSIONS: [2]})
    arrays, given = path.encode({TEXT: ["hello world", "a much longer text than the first one is"]})
    assert list(arrays) == list(PACKED) and arrays["input_ids"].shape[0] == 2
    assert arrays["input_ids"].shape[1] == int(given[TOKEN_COUNT].max())  # padded to the longest row
    assert np.allclose(np.linalg.norm(path.finish(np.array([[3.0, 4.0, 0.0, 0.0]])), axis=1), 1.0)


def test_a_folded_embedder_is_answered_by_its_model_step_without_normalising_again(repository):
    ensemble, typed = _configs(folded=True)
    path = direct_path(ensemble, typed, VERSIONS, repository)
    assert path is not None and path.output == EMBEDDING and not path.normalize
    assert np.array_equal(path.finish(np.array([[3.0, 4.0, 0.0, 0.0]])), np.array([[3.0, 4.0, 0.0, 0.0]], np.float32))


@pytest.mark.parametrize(
    "case",
    ["prompts", "windows", "dimensions", "another encoding", "no repository", "smaller model batch"],
)
def test_an_ensemble_whose_steps_the_gateway_cannot_run_as_they_run_goes_through_the_ensemble(repository, case):
    tokenizer_parameters = {
        "prompts": PromptParameters({"query": "query: "}).to_parameters(),
        "windows": StrideParameters(stride=4).to_parameters(),
    }.get(case)
    ensemble, typed = _configs(
        tokenizer_parameters=tokenizer_parameters, post_inputs=(DIMENSIONS,) if case == "dimensions" else ()
    )
    if case == "another encoding":  # a repository built by another release of tritongen
        copy = repository / f"{NAME}_tokenizer" / "1" / "_tritongen_step" / "encoding.py"
        copy.write_text(copy.read_text() + "\n# another release\n")
    if case == "smaller model batch":
        typed[f"{NAME}_model"] = dataclasses.replace(typed[f"{NAME}_model"], max_batch_size=4)
    assert direct_path(ensemble, typed, VERSIONS, None if case == "no repository" else repository) is None
