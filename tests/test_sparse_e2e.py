"""Sparse and multi-vector embedders through the real server, against their formulas in PyTorch.

One build per kind from the tiny checkpoints of ``tests/tiny_sparse.py``: a SPLADE ``BertForMaskedLM`` with
sentence-transformers' SparseEncoder files (detected as ``sparse-embedding``). Every request mixes short, empty,
non-ASCII and truncated texts, so its rows are padded both in the model step and in the sparse outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_sparse import make_splade

TOLERANCE = 1e-4
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
