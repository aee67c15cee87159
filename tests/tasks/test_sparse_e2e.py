"""Sparse and multi-vector embedders through the real server, against their formulas in PyTorch.

One build per kind from the tiny checkpoints of ``tests/tiny_sparse.py``: a SPLADE ``BertForMaskedLM`` with
sentence-transformers' SparseEncoder files (detected as ``sparse-embedding``), and an XLM-R with BGE-M3's head
files (detected as ``multi-embedding``), against FlagEmbedding's formulas. Every request mixes short, empty,
non-ASCII and truncated texts, so its rows are padded both in the model step and in the sparse outputs.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from tests.tiny_sparse import make_bge_m3, make_splade
from tritongen.bench.st_peer import st_executable

TOLERANCE = 1e-4
M3_OUTPUTS = ["EMBEDDING", "SPARSE_INDICES", "SPARSE_VALUES", "COLBERT", "COLBERT_LENGTH", "TRUNCATED"]
TEXTS = ["hello world", "", "Café au lait, naïve Ünïcödé 🎉 and emoji", "word " * 100, "ok ok ok ok"]


def _grpc_infer(url: str, name: str, texts: list[str], outputs: list[str]) -> dict[str, np.ndarray]:
    """One request of ``texts`` asking for ``outputs`` only (Triton's requested outputs)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        tensor = grpcclient.InferInput("TEXT", [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array([t.encode("utf-8") for t in texts], dtype=np.object_).reshape(-1, 1))
        result = client.infer(name, [tensor], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
        return {o: result.as_numpy(o) for o in outputs if result.as_numpy(o) is not None}
    finally:
        client.close()


def _splade_reference(path, texts: list[str], max_length: int) -> list[np.ndarray]:
    """max over real tokens of log(1 + relu(MLM logits)), one text at a time, in PyTorch."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForMaskedLM.from_pretrained(str(path)).eval()
    rows = []
    for text in texts:
        batch = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits[0]
        rows.append(torch.log1p(torch.relu(logits)).amax(dim=0).numpy())
    return rows


def _assert_sparse_rows(indices: np.ndarray, values: np.ndarray, expected: list[tuple[np.ndarray, np.ndarray]]):
    """Each row: the expected indices (ascending), values within the tolerance, then -1/0 padding to the widest."""
    assert indices.shape == values.shape == (len(expected), max(len(i) for i, _ in expected))
    for row, (want_indices, want_values) in enumerate(expected):
        n = len(want_indices)
        np.testing.assert_array_equal(indices[row, :n], want_indices)
        np.testing.assert_allclose(values[row, :n], want_values, atol=TOLERANCE, rtol=0)
        assert (indices[row, n:] == -1).all() and (values[row, n:] == 0).all()


@pytest.mark.e2e
def test_sparse_embedding_matches_splade_formula_when_request_mixes_lengths(checkpoint_cache, builds, shared_server):
    checkpoint = checkpoint_cache(make_splade)
    built = builds(checkpoint, "splade")  # detected from the SparseEncoder files
    assert built.result.task == "sparse-embedding"
    served = shared_server.serve(built)
    answer = _grpc_infer(served.grpc_url, "splade", TEXTS, ["SPARSE_INDICES", "SPARSE_VALUES", "TRUNCATED"])

    reference = _splade_reference(checkpoint, TEXTS, built.result.max_length)
    expected = [(np.flatnonzero(row), row[np.flatnonzero(row)]) for row in reference]
    _assert_sparse_rows(answer["SPARSE_INDICES"], answer["SPARSE_VALUES"], expected)
    assert answer["TRUNCATED"].reshape(-1).tolist() == [False, False, False, True, False]


# sentence-transformers' own SparseEncoder on the checkpoint, in .venv-st: one JSON row of (indices, values) per text.
_SPARSE_ENCODER = """
import json, sys
import numpy as np
from sentence_transformers import SparseEncoder
rows = SparseEncoder(sys.argv[1], device="cpu").encode(json.loads(sys.argv[2]), convert_to_tensor=True)
rows = rows.to_dense().numpy()
print(json.dumps([[np.flatnonzero(r).tolist(), r[np.flatnonzero(r)].tolist()] for r in rows]))
"""


@pytest.mark.skipif(st_executable() is None, reason="no .venv-st (make st-venv)")
def test_splade_module_matches_sparse_encoder_when_layout_asks_sum_and_log1p_relu(checkpoint_cache, tmp_path):
    """The layout read and the pooling in the graph are sentence-transformers' own, on its non-default settings."""
    import torch
    from transformers import AutoTokenizer

    from tritongen.model.checkpoint import inspect_checkpoint
    from tritongen.tasks import get_task

    checkpoint = checkpoint_cache(make_splade, strategy="sum", activation="log1p_relu")
    copy = shutil.copytree(checkpoint, tmp_path / "splade")
    config = json.loads((copy / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # the venv's transformers 4 has no TokenizersBackend
    (copy / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    command = [str(st_executable()), "-c", _SPARSE_ENCODER, str(copy), json.dumps(TEXTS)]
    expected = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1])

    module = get_task("sparse-embedding").load_module(inspect_checkpoint(checkpoint))
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    for text, (indices, values) in zip(TEXTS, expected, strict=True):
        batch = tokenizer(text, truncation=True, max_length=64, return_tensors="pt")
        with torch.no_grad():
            row = module(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0].numpy()
        assert np.flatnonzero(row).tolist() == indices
        # A sum of one term per token, each rounded differently by the two stacks' kernels (the order of float32
        # sums differs between AVX2 and AVX-512): its tolerance grows by 1e-5 a token. Measured at 64 tokens:
        # 7.6e-5 with AVX-512, 2.3e-4 with AVX2 kernels (make test-avx2); a wrong pooling is off by whole units.
        tolerance = TOLERANCE + 1e-5 * batch["input_ids"].shape[1]
        np.testing.assert_allclose(row[indices], values, atol=tolerance, rtol=1e-5)


def _bge_m3_reference(path, texts: list[str], max_length: int) -> list[dict]:
    """BGEM3FlagModel's three outputs, one text at a time: CLS normalised; relu(sparse_linear) per token, the max
    per token id without the cls, eos, pad and unk ids (``_process_token_weights``); colbert_linear of the tokens
    after the first, normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path)).eval()
    heads = {}
    for name in ("sparse_linear", "colbert_linear"):
        state = torch.load(str(path / f"{name}.pt"), map_location="cpu", weights_only=True)
        heads[name] = torch.nn.Linear(state["weight"].shape[1], state["weight"].shape[0])
        heads[name].load_state_dict(state)
    special = tokenizer.special_tokens_map
    unused = {tokenizer.convert_tokens_to_ids(special[t]) for t in ("cls_token", "eos_token", "pad_token", "unk_token")}
    rows = []
    for text in texts:
        batch = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state[0]
            weights = torch.relu(heads["sparse_linear"](hidden)).squeeze(-1).tolist()
            colbert = torch.nn.functional.normalize(heads["colbert_linear"](hidden[1:]), dim=-1).numpy()
        lexical: dict[int, float] = {}
        for weight, token in zip(weights, batch["input_ids"][0].tolist(), strict=True):
            if token not in unused and weight > 0:
                lexical[token] = max(weight, lexical.get(token, 0.0))
        ordered = sorted(lexical)
        rows.append({
            "dense": torch.nn.functional.normalize(hidden[0], dim=-1).numpy(),
            "sparse": (np.array(ordered, dtype=np.int64), np.array([lexical[i] for i in ordered], dtype=np.float32)),
            "colbert": colbert,
        })  # fmt: skip
    return rows


@pytest.mark.e2e
def test_multi_embedding_matches_bge_m3_formulas_and_answers_requested_subsets(checkpoint_cache, builds, shared_server):
    checkpoint = checkpoint_cache(make_bge_m3, colbert_dim=24)  # a ColBERT width other than the hidden size
    built = builds(checkpoint, "bge_m3")  # detected from the head files
    assert built.result.task == "multi-embedding"
    url = shared_server.serve(built).grpc_url
    answer = _grpc_infer(url, "bge_m3", TEXTS, M3_OUTPUTS)
    reference = _bge_m3_reference(checkpoint, TEXTS, built.result.max_length)

    np.testing.assert_allclose(answer["EMBEDDING"], [r["dense"] for r in reference], atol=TOLERANCE, rtol=0)
    _assert_sparse_rows(answer["SPARSE_INDICES"], answer["SPARSE_VALUES"], [r["sparse"] for r in reference])
    lengths = [len(r["colbert"]) for r in reference]
    assert answer["COLBERT_LENGTH"].reshape(-1).tolist() == lengths
    assert answer["COLBERT"].shape == (len(TEXTS), max(lengths), 24)
    for row, expected in zip(answer["COLBERT"], reference, strict=True):
        np.testing.assert_allclose(row[: len(expected["colbert"])], expected["colbert"], atol=TOLERANCE, rtol=0)
        assert not row[len(expected["colbert"]) :].any()
    assert answer["TRUNCATED"].reshape(-1).tolist() == [False, False, False, True, False]

    subset = _grpc_infer(url, "bge_m3", TEXTS[:2], ["COLBERT_LENGTH", "SPARSE_VALUES"])
    assert sorted(subset) == ["COLBERT_LENGTH", "SPARSE_VALUES"]
    assert subset["COLBERT_LENGTH"].reshape(-1).tolist() == lengths[:2]
