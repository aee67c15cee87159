"""Building repositories from tiny checkpoints of every supported architecture."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.tiny_checkpoints import ARCHITECTURES
from tritongen.builder.pipeline import build_repository
from tritongen.buildspec import BuildSpec
from tritongen.errors import ParityError
from tritongen.model.export import onnx_io

# Models that embed no second segment: no token-type table (DistilBERT, MPNet), one type (RoBERTa, XLM-R), or
# type_vocab_size 0 (DeBERTa-v3 layout); ModernBERT and EuroBERT take no type ids at all.
WITHOUT_TOKEN_TYPES = {"distilbert", "roberta", "xlm-roberta", "mpnet", "deberta-v2", "modernbert", "eurobert"}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_build_passes_parity_when_tokenizer_declares_no_limit_nor_inputs(arch, tiny_factory, builds):
    """The tokenizer says nothing (model_max_length 1e30, no model_input_names), as transformers 5 saves it.

    The length limit (64 tokens, whatever the position scheme: RoBERTa and MPNet number positions from
    padding_idx + 1) and the inputs (type ids where the model embeds two segments) come from the model, and
    the parity texts longer than the model run at that limit. Every architecture's build is checked in the
    container's ONNX Runtime too.
    """
    built = builds(tiny_factory(arch, declare_limits=False), "clf", container_check=True)
    repo, result = built.repository, built.result
    assert result.task == "classification"
    assert result.max_length == 64
    assert result.parity.passed
    assert result.parity.max_abs_diff <= 1e-4
    assert any(row.truncated and row.tokens == 64 for row in result.parity.rows)
    inputs, outputs = onnx_io(repo / "clf_model" / "1" / "model.onnx")
    expected = ["input_ids", "attention_mask"] + ([] if arch in WITHOUT_TOKEN_TYPES else ["token_type_ids"])
    assert inputs == expected
    assert outputs == ["logits"]
    model = onnx.load(str(repo / "clf_model" / "1" / "model.onnx"))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert all(d.dim_param for d in dims), "batch and sequence axes must be dynamic"
    labels = json.loads((repo / "clf_postprocess" / "1" / "labels.json").read_text())
    assert labels == ["negative", "neutral", "positive"]
    assert "Parity against PyTorch: **PASSED**" in built.card()
    container = built.record()["container_runtimes"][built.record()["container"]]
    assert container.get("passed") or "make compat-venv" in container.get("skipped", ""), container


@pytest.mark.parametrize("arch", ["bert", "roberta", "xlm-roberta", "mpnet"])
def test_build_detects_embedding_task_from_sentence_transformers_files(arch, tiny_factory, builds):
    built = builds(tiny_factory(arch, "embedding"), f"{arch.replace('-', '_')}_emb")
    assert built.result.task == "embedding"
    assert built.result.parity.passed
    config = (built.repository / f"{built.name}_postprocess" / "config.pbtxt").read_text()
    assert 'key: "normalize"' in config and 'string_value: "true"' in config


def test_build_publishes_nothing_when_parity_fails(tiny_factory, tmp_path):
    repo = tmp_path / "repo"
    spec = BuildSpec(model=str(tiny_factory("bert")), name="clf", repository=repo, parity_tolerance=1e-15)
    with pytest.raises(ParityError, match=r"max abs diff .* > tolerance 1e-15"):
        build_repository(spec)
    assert not repo.exists() or not any(repo.iterdir())


def test_rebuild_adds_next_version_and_keeps_previous(tiny_factory, builds, tmp_path):
    model = tiny_factory("distilbert", declare_limits=False)
    repo = builds.copy(builds(model, "clf"), into=tmp_path / "repo")  # version 1, as the test above built it
    assert build_repository(BuildSpec(model=str(model), name="clf", repository=repo)).version == 2
    for model in ("clf", "clf_tokenizer", "clf_model", "clf_postprocess"):
        assert sorted(p.name for p in (repo / model).iterdir()) == ["1", "2", "config.pbtxt"]
    assert (repo / "clf_tokenizer" / "2" / "tokenizer.json").is_file()
