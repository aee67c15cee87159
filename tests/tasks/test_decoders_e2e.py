"""End to end: decoder-based embedders (Qwen3-Embedding and EmbeddingGemma style) through the real tritonserver.

Qwen3: last-token pooling, left padding, prompts, Matryoshka ``DIMENSIONS``; Gemma3: bidirectional attention,
mean pooling, two Dense modules. Every request mixes short and long texts (one truncated), so a padding-side
bug in the tokenizer step or the model backend cannot hide; the reference is the checkpoint's transformers
tokenizer and PyTorch model, one unpadded text at a time, pooled as sentence-transformers pools.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.tiny_decoders import QWEN3_PROMPTS, decoder_embedders

pytestmark = pytest.mark.e2e

TEXTS = [
    "ok",
    "The service was slow and the food arrived cold.",
    "東京は日本の首都です 🙂",
    "",
    "a very long review that keeps going " * 30,  # truncated at 64 tokens
    "Café au lait, naïve façade",
]
TOLERANCE = 1e-4


def reference(path: Path, texts: list[str], prompt: str = "", dimensions: int | None = None) -> np.ndarray:
    """sentence-transformers' encode, one text at a time: tokenizer, model, pooling, Dense, Normalize, cut."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path)).eval()
    modules = json.loads((path / "modules.json").read_text())
    pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    rows = []
    for text in texts:
        encoded = tokenizer(prompt + text, truncation=True, max_length=64, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**encoded).last_hidden_state[0]
        vector = hidden[-1] if pooling["pooling_mode_lasttoken"] else hidden.mean(dim=0)
        for module in modules:
            if module["type"].endswith("Dense"):
                weights = load_file(str(path / module["path"] / "model.safetensors"))
                vector = vector @ weights["linear.weight"].T + weights.get("linear.bias", 0)
        vector = vector.numpy()
        if dimensions:
            vector = vector[:dimensions]
        rows.append(vector / max(np.linalg.norm(vector), 1e-12))  # as torch's F.normalize
    return np.stack(rows)


@pytest.fixture(scope="module")
def checkpoints(checkpoint_cache) -> dict[str, Path]:
    made = decoder_embedders(checkpoint_cache)  # the ones tests/tasks/test_decoders.py inspects and exports
    return {"qwen3_emb": made["qwen3"], "gemma_emb": made["gemma3_text"]}


@pytest.fixture(scope="module")
def server(checkpoints, builds, shared_server):
    return shared_server.serve(*(builds(path, name, max_batch_size=16) for name, path in checkpoints.items()))


def _request(protocol: str, server, name: str, texts: list[str], prompt: str | None = None, dims: int | None = None):
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(server.grpc_url if protocol == "grpc" else server.http_url)
    rows = len(texts)
    arrays = [("TEXT", np.array([t.encode() for t in texts], dtype=np.object_).reshape(rows, 1), "BYTES")]
    if prompt is not None:
        arrays.append(("PROMPT_NAME", np.array([prompt.encode()] * rows, dtype=np.object_).reshape(rows, 1), "BYTES"))
    if dims is not None:
        arrays.append(("DIMENSIONS", np.full((rows, 1), dims, dtype=np.int32), "INT32"))
    tensors = []
    for tensor_name, array, dtype in arrays:
        tensor = module.InferInput(tensor_name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    try:
        result = client.infer(name, tensors)
        return result.as_numpy("EMBEDDING"), result.as_numpy("TRUNCATED")
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_qwen3_embedding_matches_pytorch_when_left_padded_with_prompt_and_dimensions(server, checkpoints, protocol):
    path = checkpoints["qwen3_emb"]
    served, truncated = _request(protocol, server, "qwen3_emb", TEXTS, prompt="query", dims=16)
    expected = reference(path, TEXTS, prompt=QWEN3_PROMPTS["query"], dimensions=16)
    assert served.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(served, expected, atol=TOLERANCE)
    assert truncated.reshape(-1).tolist() == _too_long(path, TEXTS, QWEN3_PROMPTS["query"])
    assert truncated[4] and not truncated[0]


def _too_long(path: Path, texts: list[str], prompt: str) -> list[bool]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return [len(tokenizer(prompt + text)["input_ids"]) > 64 for text in texts]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_qwen3_embedding_matches_pytorch_when_no_optional_input_is_sent(server, checkpoints, protocol):
    served, _ = _request(protocol, server, "qwen3_emb", TEXTS)
    np.testing.assert_allclose(served, reference(checkpoints["qwen3_emb"], TEXTS), atol=TOLERANCE)
    query, _ = _request(protocol, server, "qwen3_emb", TEXTS[:2], prompt="query")
    assert np.abs(query - served[:2]).max() > 1e-2  # the prompt changes the embedding (not a no-op)


def test_gemma3_mean_pooled_dense_embedding_matches_pytorch_with_document_prompt(server, checkpoints):
    from tests.tiny_decoders import GEMMA_PROMPTS

    served, _ = _request("grpc", server, "gemma_emb", TEXTS, prompt="document")
    expected = reference(checkpoints["gemma_emb"], TEXTS, prompt=GEMMA_PROMPTS["document"])
    np.testing.assert_allclose(served, expected, atol=TOLERANCE)
    full, _ = _request("http", server, "gemma_emb", TEXTS, dims=8)
    np.testing.assert_allclose(full, reference(checkpoints["gemma_emb"], TEXTS, dimensions=8), atol=TOLERANCE)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_prompt_name_and_dimensions_get_per_request_errors_when_sent(server, checkpoints, protocol):
    with pytest.raises(InferenceServerException, match=r"PROMPT_NAME `passage`.*document, query"):
        _request(protocol, server, "qwen3_emb", ["a", "b"], prompt="passage")
    for dims in (0, 33):
        with pytest.raises(InferenceServerException, match=rf"DIMENSIONS must be between 1 and 32, got {dims}"):
            _request(protocol, server, "qwen3_emb", ["a", "b"], dims=dims)
    served, _ = _request(protocol, server, "qwen3_emb", TEXTS[:2], dims=32)  # the server keeps serving
    np.testing.assert_allclose(served, reference(checkpoints["qwen3_emb"], TEXTS[:2]), atol=TOLERANCE)
