"""Decoder-based embedders below the server: reading their sentence-transformers files, padding on the left,
prompts and DIMENSIONS in the Python steps, and the build stages (export and parity) for Qwen3 and Gemma3."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tests import pb_stub
from tests.pb_stub import Request, texts
from tests.tiny_decoders import QWEN3_PROMPTS, decoder_embedders
from tritongen.builder.pipeline import exported, fold, inspect, parity, render
from tritongen.buildspec import BuildSpec
from tritongen.encoding import TextEncoder
from tritongen.errors import CheckpointError, UnsupportedModelError
from tritongen.gates.parity import ReferenceModel, check_parity
from tritongen.model.checkpoint import inspect_checkpoint
from tritongen.repository.staging import staging
from tritongen.runtimes import get_runtime
from tritongen.runtimes.onnxruntime import backend as ort_model
from tritongen.steps import postprocess, tokenizer
from tritongen.tasks.embedding import postprocess as embedding_postprocess


@pytest.fixture(scope="module")
def checkpoints(checkpoint_cache) -> dict[str, Path]:
    return decoder_embedders(checkpoint_cache)


@pytest.fixture
def _stub_pb_utils(monkeypatch):
    for module in (tokenizer, postprocess, embedding_postprocess, ort_model):
        monkeypatch.setattr(module, "pb_utils", pb_stub)


# --- what the checkpoint declares -----------------------------------------------------------------------------


def test_inspect_reads_lasttoken_prompts_and_dense_when_sentence_transformers_declare_them(checkpoints):
    qwen = inspect_checkpoint(checkpoints["qwen3"]).pooling
    assert (qwen.mode, qwen.normalize, qwen.dense) == ("lasttoken", True, ())
    assert dict(qwen.prompts) == QWEN3_PROMPTS and qwen.default_prompt_name is None
    gemma = inspect_checkpoint(checkpoints["gemma3_text"]).pooling
    assert gemma.mode == "mean"
    assert [(d.in_features, d.out_features, d.bias) for d in gemma.dense] == [(32, 48, False), (48, 32, True)]


def _edit(path: Path, name: str, **changes) -> None:
    file = path / name
    file.write_text(json.dumps({**json.loads(file.read_text()), **changes}))


@pytest.mark.parametrize(
    ("file", "changes", "error", "message"),
    [
        ("2_Dense/config.json", {"activation_function": "torch.nn.modules.activation.Tanh"}, UnsupportedModelError,
         "activation `torch.nn.modules.activation.Tanh`; only identity"),
        ("1_Pooling/config.json", {"include_prompt": False}, UnsupportedModelError, "include_prompt false"),
        ("1_Pooling/config.json", {"pooling_mode_weightedmean_tokens": True}, UnsupportedModelError,
         "pooling_mode_weightedmean_tokens"),
        ("config_sentence_transformers.json", {"default_prompt_name": "passage"}, CheckpointError,
         "default_prompt_name `passage` is not one of the prompts"),
    ],
)  # fmt: skip
def test_inspect_refuses_in_one_line_when_sentence_transformers_files_ask_for_what_we_cannot_serve(
    checkpoints, tmp_path, file, changes, error, message
):
    path = shutil.copytree(checkpoints["gemma3_text"], tmp_path / "ckpt")
    _edit(path, file, **changes)
    with pytest.raises(error, match=message) as caught:
        inspect_checkpoint(path)
    assert "\n" not in str(caught.value)


# --- padding on the left ----------------------------------------------------------------------------------------


def test_text_encoder_pads_and_buckets_on_the_left_when_the_tokenizer_declares_it(checkpoints):
    file = str(checkpoints["qwen3"] / "tokenizer.json")
    left = TextEncoder(file, 64, [8, 16], pad_id=0, padding_side="left")(["ok", "a longer one"])
    right = TextEncoder(file, 64, [8, 16], pad_id=0)(["ok", "a longer one"])
    assert left["input_ids"].shape == right["input_ids"].shape == (2, 8)
    lengths = right["attention_mask"].sum(axis=1)
    for row, n in enumerate(lengths):
        assert left["attention_mask"][row].tolist() == [0] * (8 - n) + [1] * n
        assert left["input_ids"][row, 8 - n :].tolist() == right["input_ids"][row, :n].tolist()
    assert left["input_ids"][0, -1] == right["input_ids"][0, lengths[0] - 1] == 0  # <|endoftext|> appended


def test_onnxruntime_backend_widens_on_the_left_when_requests_are_left_padded():
    first = np.array([[0, 0, 1, 1]])  # a request padded on the left to 4
    second = np.array([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]])  # another, padded to 8
    side = ort_model.padding_side([first, second])
    assert side == "left" and ort_model.padding_side([np.array([[1, 1, 0]])]) == "right"
    merged = ort_model.pad_and_concatenate([first, second], side)
    assert merged[0].tolist() == [0, 0, 0, 0, 0, 0, 1, 1]


# --- the Python steps: prompts and DIMENSIONS -------------------------------------------------------------------


def _args(folder: Path, config: dict) -> dict:
    return {"model_config": json.dumps(config), "model_repository": str(folder), "model_version": "1"}


def _prompting_tokenizer(tmp_path: Path, checkpoint: Path) -> tokenizer.TritonPythonModel:
    (tmp_path / "1").mkdir()
    shutil.copy(checkpoint / "tokenizer.json", tmp_path / "1" / "tokenizer.json")
    params = {"max_length": "64", "buckets": "16", "padding_side": "left", "prompts": json.dumps(QWEN3_PROMPTS)}
    config = {
        "input": [{"name": "TEXT"}, {"name": "PROMPT_NAME"}],
        "output": [{"name": "input_ids"}, {"name": "attention_mask"}, {"name": "TRUNCATED"}, {"name": "TOKEN_COUNT"}],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }
    model = tokenizer.TritonPythonModel()
    model.initialize(_args(tmp_path, config))
    return model


@pytest.mark.usefixtures("_stub_pb_utils")
def test_tokenizer_step_prepends_the_named_prompt_and_refuses_unknown_names_per_request(tmp_path, checkpoints):
    model = _prompting_tokenizer(tmp_path, checkpoints["qwen3"])
    query, plain, bad = model.execute(
        [
            Request({"TEXT": texts("ok", "ok"), "PROMPT_NAME": texts("query", "document")}),
            Request({"TEXT": texts("ok")}),
            Request({"TEXT": texts("ok"), "PROMPT_NAME": texts("passage")}),
        ]
    )
    encoder = model.encoder
    assert query.output("input_ids").tolist() == encoder([QWEN3_PROMPTS["query"] + "ok", "ok"])["input_ids"].tolist()
    assert plain.output("input_ids").tolist() == encoder(["ok"])["input_ids"].tolist()
    prompted = [len(e.ids) for e in encoder.encode([QWEN3_PROMPTS["query"] + "ok", QWEN3_PROMPTS["document"] + "ok"])]
    assert query.output("TOKEN_COUNT").reshape(-1).tolist() == prompted  # what the model reads: the prompt too
    assert bad.error is not None and bad.error.code() == pb_stub.TritonError.INVALID_ARG
    assert bad.error.message() == "PROMPT_NAME `passage` is not one of this model's prompts (document, query)"


def _embedding_postprocess(tmp_path: Path) -> embedding_postprocess.TritonPythonModel:
    config = {
        "input": [{"name": "sentence_embedding"}, {"name": "DIMENSIONS"}],
        "output": [{"name": "EMBEDDING"}],
        "parameters": {"normalize": {"string_value": "true"}},
    }
    model = embedding_postprocess.TritonPythonModel()
    model.initialize(_args(tmp_path, config))
    return model


@pytest.mark.usefixtures("_stub_pb_utils")
def test_postprocess_cuts_and_renormalises_when_dimensions_is_sent_and_refuses_out_of_range(tmp_path):
    model = _embedding_postprocess(tmp_path)
    vectors = np.array([[3.0, 4.0, 12.0], [1.0, 0.0, 0.0]], np.float32)
    cut, whole, zero, wide, mixed = model.execute(
        [
            Request({"sentence_embedding": vectors, "DIMENSIONS": np.array([[2], [2]], np.int32)}),
            Request({"sentence_embedding": vectors[:1]}),
            Request({"sentence_embedding": vectors[:1], "DIMENSIONS": np.array([[0]], np.int32)}),
            Request({"sentence_embedding": vectors[:1], "DIMENSIONS": np.array([[4]], np.int32)}),
            Request({"sentence_embedding": vectors, "DIMENSIONS": np.array([[1], [2]], np.int32)}),
        ]
    )
    np.testing.assert_allclose(cut.output("EMBEDDING"), [[0.6, 0.8], [1.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(whole.output("EMBEDDING"), [[3 / 13, 4 / 13, 12 / 13]], rtol=1e-6)
    assert zero.error.message() == "DIMENSIONS must be between 1 and 3, got 0"
    assert wide.error.message() == "DIMENSIONS must be between 1 and 3, got 4"
    assert "same for every row" in mixed.error.message()
    assert all(r.error.code() == pb_stub.TritonError.INVALID_ARG for r in (zero, wide, mixed))


# --- the build stages ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plans(checkpoints, tmp_path_factory):
    repo = tmp_path_factory.mktemp("decoder_stages") / "repo"
    quiet = Console(quiet=True)
    return {
        arch: inspect(BuildSpec(model=str(path), name=arch.replace("3_text", ""), repository=repo), quiet)
        for arch, path in checkpoints.items()
    }


@pytest.mark.parametrize("arch", ["qwen3", "gemma3_text"])
def test_parity_passes_on_both_padding_sides_when_mixed_lengths_share_one_batch(plans, arch):
    """The parity texts (1 to 64 tokens, three truncated) run as one bucket-padded batch against PyTorch one by one.

    The served side is the tokenizer's (left for Qwen3); the other side must pass too: pooling reads the mask.
    """
    plan, quiet = plans[arch], Console(quiet=True)
    assert plan.tokenizer_facts["padding_side"] == ("left" if arch == "qwen3" else "right")
    with staging(plan.spec.repository, list(plan.names.values())) as work, exported(plan, work, quiet) as onnx:
        served = parity(plan, onnx, quiet)
        other = TextEncoder(
            str(work.version_dir(plan.names["tokenizer"]) / "tokenizer.json"), plan.max_length, plan.buckets,
            pad_id=plan.pad_id, input_names=plan.inputs,
            padding_side="right" if onnx.encoder.padding_side == "left" else "left",
        )  # fmt: skip
        model = ReferenceModel(plan.module, plan.hf_tokenizer, other, plan.max_length)
        flipped = check_parity(model, onnx.fp32_path, tolerance=1e-4)
        folded_plan = dataclasses.replace(plan, spec=dataclasses.replace(plan.spec, fold=True))
        folding = fold(folded_plan, get_runtime(plan.spec.runtime), onnx, quiet)
    lengths = {row.tokens for row in served.rows}
    assert min(lengths) <= 3 and max(lengths) == plan.max_length and len(lengths) >= 8
    assert served.passed and flipped.passed, (served.max_abs_diff, flipped.max_abs_diff)
    assert not folding.folded and "not tensor math" in folding.why


def test_render_maps_optional_prompt_name_to_the_tokenizer_and_dimensions_to_the_postprocess(plans):
    configs = {step: config for step, (_, config) in render(plans["qwen3"]).items()}
    ensemble = configs["ensemble"]
    assert [(t.name, t.optional) for t in ensemble.input] == [
        ("TEXT", True), ("TOKEN_IDS", True), ("TRUNCATE_LEFT", True), ("PROMPT_NAME", True), ("DIMENSIONS", True),
    ]  # fmt: skip
    assert [t.name for t in configs["tokenizer"].input] == ["TEXT", "TOKEN_IDS", "TRUNCATE_LEFT", "PROMPT_NAME"]
    assert [(t.name, t.optional) for t in configs["postprocess"].input] == [
        ("sentence_embedding", False), ("DIMENSIONS", True),
    ]  # fmt: skip
    assert list(ensemble.output[0].dims) == [-1]
    assert configs["tokenizer"].parameters["padding_side"].string_value == "left"
