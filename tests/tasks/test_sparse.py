"""Sparse and multi-vector embeddings without a build: the layout read, detection, settings and the steps' math."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import pb_stub
from tritongen.builder.spec import load_spec
from tritongen.errors import SpecError, UnsupportedModelError
from tritongen.gates.accuracy import TokenCosineGate
from tritongen.model.checkpoint import Checkpoint, Pooling, Splade, _read_pooling
from tritongen.steps import postprocess
from tritongen.steps.sparse import pad_rows, token_weights, vocabulary_rows
from tritongen.tasks import detect_task, get_task
from tritongen.tasks.multi_embedding import postprocess as multi_postprocess
from tritongen.tasks.sparse_embedding import postprocess as sparse_postprocess
from tritongen.tasks.sparse_embedding.settings import SparseSettings

SPLADE_POOLING = "sentence_transformers.sparse_encoder.models.SpladePooling"  # the 5.0 name; 5.4 moved it to modules


def _splade_layout(folder: Path, pooling: dict, transformer: str = "sentence_transformers.models.Transformer") -> Path:
    (folder / "1_SpladePooling").mkdir(parents=True)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": transformer},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": SPLADE_POOLING},
    ]
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "1_SpladePooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    return folder


def _checkpoint(architecture: str, pooling: Pooling | None = None) -> Checkpoint:
    config = {"model_type": "bert", "architectures": [architecture], "hidden_size": 32, "vocab_size": 100}
    return Checkpoint(path=Path("/ckpt"), config=config, pooling=pooling or Pooling())


# --- what the checkpoint declares ------------------------------------------------------------------------------


def test_read_pooling_reads_splade_strategy_and_activation_when_sparse_encoder_layout(tmp_path):
    layout = _splade_layout(
        tmp_path,
        {"pooling_strategy": "sum", "activation_function": "log1p_relu", "word_embedding_dimension": 100},
        transformer="sentence_transformers.sparse_encoder.models.MLMTransformer",
    )
    assert _read_pooling(layout).splade == Splade("sum", "log1p_relu")


def test_read_pooling_refuses_unknown_splade_strategy_in_one_line(tmp_path):
    layout = _splade_layout(tmp_path, {"pooling_strategy": "mean", "activation_function": "relu"})
    with pytest.raises(UnsupportedModelError, match=r"pooling_strategy `mean`.*supported: max or sum"):
        _read_pooling(layout)


def test_detect_picks_sparse_embedding_only_when_the_layout_says_so():
    layout = Pooling(from_sentence_transformers=True, splade=Splade())
    assert detect_task(_checkpoint("BertForMaskedLM", layout)).name == "sparse-embedding"
    with pytest.raises(UnsupportedModelError, match="cannot tell the task"):
        detect_task(_checkpoint("BertForMaskedLM"))  # a bare fill-mask model: asked for by name only
    assert get_task("sparse-embedding").has_head(_checkpoint("DistilBertForMaskedLM"))


def test_bind_gives_vocabulary_row_and_sparse_outputs_with_section_settings():
    spec = load_spec(model="m", sparse_top_k=8, sparse_threshold=0.25)
    plan = get_task("sparse-embedding").bind(spec, _checkpoint("BertForMaskedLM"), inputs=["input_ids"], row_length=64)
    assert plan.onnx_output.dims == (100,)
    assert [(t.name, t.data_type, t.dims) for t in plan.ensemble_outputs] == [
        ("SPARSE_INDICES", "TYPE_INT64", (-1,)),
        ("SPARSE_VALUES", "TYPE_FP32", (-1,)),
        ("TRUNCATED", "TYPE_BOOL", (1,)),
        ("TOKEN_COUNT", "TYPE_INT32", (1,)),
    ]
    assert (plan.postprocess_parameters["top_k"], plan.postprocess_parameters["threshold"]) == ("8", "0.25")


@pytest.mark.parametrize("name", ["sparse-embedding", "multi-embedding"])
def test_sparse_tasks_read_the_sparse_section_and_stop_at_max_seq_length_when_the_layout_has_one(name):
    task = get_task(name)
    assert task.settings(load_spec(model="m", sparse_top_k=8)).top_k == 8
    assert "tritongen.steps.sparse" in task.helper_modules
    assert task.max_length(_checkpoint("BertForMaskedLM", Pooling(max_seq_length=128)), 512, None) == 128
    assert task.max_length(_checkpoint("BertForMaskedLM"), 512, None) == 512


def test_a_splade_checkpoint_asked_for_as_a_dense_embedding_is_refused_in_one_line():
    layout = Pooling(from_sentence_transformers=True, splade=Splade())
    with pytest.raises(SpecError, match=r"sparse \(SPLADE\) encoder.*--task sparse-embedding"):
        get_task("embedding").bind(
            load_spec(model="m"), _checkpoint("BertForMaskedLM", layout), inputs=["input_ids"], row_length=64
        )


@pytest.mark.parametrize("settings", [{"top_k": -1}, {"threshold": -0.5}])
def test_sparse_settings_refused_when_negative(settings):
    with pytest.raises(SpecError, match="sparse"):
        SparseSettings(**settings)


# --- the steps' math ---------------------------------------------------------------------------------------------


def test_vocabulary_rows_keep_nonzero_then_top_k_then_threshold_sorted_by_index():
    weights = np.array([[0.0, 0.5, 0.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    (indices, values), (empty_indices, _) = vocabulary_rows(weights)
    assert indices.tolist() == [1, 3, 4] and values.tolist() == [0.5, 2.0, 1.0] and empty_indices.size == 0
    (indices, values), _ = vocabulary_rows(weights, top_k=2)
    assert indices.tolist() == [3, 4] and values.tolist() == [2.0, 1.0]
    (indices, _), _ = vocabulary_rows(weights, threshold=0.75)
    assert indices.tolist() == [3, 4]


def test_pad_rows_pads_to_longest_with_minus_one_and_zero_and_never_empty():
    rows = [(np.array([2, 7]), np.array([0.5, 1.5])), (np.array([], dtype=np.int64), np.array([], dtype=np.float32))]
    indices, values = pad_rows(rows)
    assert indices.tolist() == [[2, 7], [-1, -1]] and values.tolist() == [[0.5, 1.5], [0.0, 0.0]]
    assert indices.dtype == np.int64 and values.dtype == np.float32
    indices, values = pad_rows(rows[1:])
    assert indices.tolist() == [[-1]] and values.tolist() == [[0.0]]


def test_token_weights_merge_per_id_by_max_and_skip_unused_ids_and_zeros():
    ids = np.array([0, 17, 9, 17, 2, 1, 5])
    weights = np.array([3.0, 0.25, 0.0, 0.75, 4.0, 9.0, 0.5], dtype=np.float32)
    indices, values = token_weights(weights, ids, unused=(0, 1, 2, 3))
    assert indices.tolist() == [5, 17] and values.tolist() == [0.5, 0.75]


def test_sparse_postprocess_pads_each_request_to_its_own_longest_text():
    step = sparse_postprocess.TritonPythonModel()
    step.setup({"top_k": "0", "threshold": "0.0"}, {})
    weights = np.array([[1, 0, 0], [1, 1, 1], [0, 0, 2]], dtype=np.float32)
    first, second = step.process(weights, [2, 1])
    assert first["SPARSE_INDICES"].tolist() == [[0, -1, -1], [0, 1, 2]]
    assert second["SPARSE_INDICES"].tolist() == [[2]] and second["SPARSE_VALUES"].tolist() == [[2.0]]


def test_detect_picks_multi_embedding_when_both_head_files_sit_beside_the_encoder(tmp_path):
    config = {"model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"], "hidden_size": 32}
    checkpoint = Checkpoint(path=tmp_path, config=config, pooling=Pooling(from_sentence_transformers=True))
    (tmp_path / "sparse_linear.pt").write_bytes(b"")
    assert detect_task(checkpoint).name == "embedding"  # one head file is not BGE-M3
    (tmp_path / "colbert_linear.pt").write_bytes(b"")
    assert detect_task(checkpoint).name == "multi-embedding"


def _m3_step() -> multi_postprocess.TritonPythonModel:
    step = multi_postprocess.TritonPythonModel()
    step.setup({"hidden_size": "2", "colbert_dim": "3", "unused_token_ids": "[0, 1, 2, 3]"}, {})
    step.input_name, step.output_names = "token_vectors", list(multi_postprocess.SPARSE + multi_postprocess.COLBERTS)
    return step


def _m3_request() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two texts: <s> 7 9 7 </s> and <s> </s> <pad> <pad> <pad>; each token row [sparse, v0, v1, v2]."""
    packed = np.zeros((2, 5, 4), dtype=np.float32)
    packed[0] = [[5, 3, 4, 0], [0.5, 1, 0, 0], [0, 0, 2, 0], [0.75, 0, 0, 3], [9, 0, 0, 4]]
    packed[1, :2] = [[5, 0, 2, 0], [1, 1, 0, 0]]
    ids = np.array([[0, 7, 9, 7, 2], [0, 2, 1, 1, 1]])
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    return packed, ids, mask


def test_multi_postprocess_gives_bge_m3_outputs_padded_within_the_request():
    out = _m3_step().process(*_m3_request(), {"EMBEDDING", *multi_postprocess.SPARSE, *multi_postprocess.COLBERTS})
    np.testing.assert_allclose(out["EMBEDDING"], [[0.6, 0.8], [0.0, 1.0]])
    assert out["SPARSE_INDICES"].tolist() == [[7], [-1]] and out["SPARSE_VALUES"].tolist() == [[0.75], [0.0]]
    assert out["COLBERT_LENGTH"].tolist() == [[4], [1]] and out["COLBERT"].shape == (2, 4, 3)
    np.testing.assert_allclose(out["COLBERT"][0], [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1]])
    np.testing.assert_allclose(out["COLBERT"][1], [[1, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])


def test_multi_postprocess_computes_only_the_outputs_a_request_asks_for(monkeypatch):
    for module in (multi_postprocess, postprocess):
        monkeypatch.setattr(module, "pb_utils", pb_stub)
    packed, ids, mask = _m3_request()
    tensors = {"token_vectors": packed, "input_ids": ids, "attention_mask": mask}
    step = _m3_step()
    monkeypatch.setattr(step, "colbert", lambda *a: pytest.fail("COLBERT was not asked for"))
    (response,) = step.execute([pb_stub.Request(tensors, requested=("SPARSE_VALUES",))])
    assert [t.name() for t in response.output_tensors] == ["SPARSE_VALUES"]
    assert response.output("SPARSE_VALUES").tolist() == [[0.75], [0.0]]


def test_token_cosine_gate_takes_each_texts_worst_real_token_and_ignores_padding():
    reference = np.array([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]], [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]])
    candidate = np.concatenate([reference, np.zeros((2, 2, 2))], axis=1)  # served at a wider bucket
    candidate[0, 1] = [1.0, 1.0]  # 45 degrees off on a real token
    candidate[1, 2] = [-1.0, 0.0]  # wrong on padding only
    mask = np.array([[True, True, True], [True, False, False]])
    (cosine,) = TokenCosineGate().compare(reference, candidate, mask)
    np.testing.assert_allclose(cosine, [np.sqrt(0.5), 1.0])
