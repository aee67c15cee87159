"""End to end: generate repositories, serve them with the real tritonserver, compare with PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritongen.serve.client import infer

pytestmark = pytest.mark.e2e

TEXTS = [
    "I love this movie!",
    "The service was slow and the food arrived cold.",
    "Café au lait — naïve façade in Zürich",
    "東京は日本の首都です",
    "Great job 🎉🔥 see you soon 🙂",
    "",
    "a very long review that keeps going " * 60,
]


@pytest.fixture(scope="module")
def deployment(builds, shared_server, tiny_factory, minilm_path):
    checkpoints = {
        "cls": tiny_factory("bert", "classification"),
        "cls_bpe": tiny_factory("roberta", "classification"),
        "emb": minilm_path,
    }
    server = shared_server.serve(*(builds(path, name) for name, path in checkpoints.items()))
    return server, checkpoints


def _pipeline_probabilities(checkpoint: Path, texts: list[str]) -> np.ndarray:
    from transformers import AutoConfig, pipeline

    pipe = pipeline("text-classification", model=str(checkpoint), top_k=None, device="cpu")
    label2id = {v: int(k) for k, v in AutoConfig.from_pretrained(str(checkpoint)).id2label.items()}
    rows = []
    for result in pipe(texts, truncation=True):
        row = np.zeros(len(label2id), np.float32)
        for item in result:
            row[label2id[item["label"]]] = item["score"]
        rows.append(row)
    return np.stack(rows)


def _sentence_embeddings(checkpoint: Path, texts: list[str], max_length: int) -> np.ndarray:
    """Mean pooling and L2 normalisation, exactly as sentence-transformers does it."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def _url(server, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("name", ["cls", "cls_bpe"])
def test_classification_matches_transformers_pipeline(deployment, name, protocol):
    server, checkpoints = deployment
    rows = infer(TEXTS, name=name, url=_url(server, protocol), protocol=protocol)
    expected = _pipeline_probabilities(checkpoints[name], TEXTS)
    got = np.array([row["PROBABILITIES"] for row in rows], np.float32)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    from transformers import AutoConfig

    id2label = AutoConfig.from_pretrained(str(checkpoints[name])).id2label
    assert [row["LABEL"] for row in rows] == [id2label[int(i)] for i in expected.argmax(axis=1)]
    np.testing.assert_allclose([row["SCORE"] for row in rows], expected.max(axis=1), atol=1e-4)
    # Classification truncates by design (as the pipeline does); the response says where it did.
    assert [row["TRUNCATED"] for row in rows] == [False] * (len(TEXTS) - 1) + [True]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_embedding_matches_sentence_transformers_pooling(deployment, protocol):
    server, checkpoints = deployment
    rows = infer(TEXTS, name="emb", url=_url(server, protocol), protocol=protocol)
    got = np.array([row["EMBEDDING"] for row in rows], np.float32)
    expected = _sentence_embeddings(checkpoints["emb"], TEXTS, max_length=256)
    assert got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert [row["TRUNCATED"] for row in rows] == [False] * (len(TEXTS) - 1) + [True]  # 360 words > 256 tokens


def test_invalid_utf8_gets_an_error_and_server_keeps_serving(deployment):
    server, _ = deployment
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"\xff\xfe broken"]], dtype=np.object_))
    with pytest.raises(InferenceServerException, match="TEXT\\[0\\] is not valid UTF-8"):
        client.infer("cls", [tensor])
    assert client.is_server_live()
    assert infer(["still fine"], name="cls", url=server.grpc_url)[0]["LABEL"]


def test_huge_text_is_truncated_not_rejected(deployment):
    server, _ = deployment
    (row,) = infer(["x" + " word" * 20_000], name="emb", url=server.grpc_url)  # 100,000 characters
    assert len(row["EMBEDDING"]) == 384
    assert abs(np.linalg.norm(row["EMBEDDING"]) - 1.0) < 1e-4
    assert row["TRUNCATED"] is True


def test_batch_of_64_matches_single_requests(deployment):
    server, _ = deployment
    texts = [f"request number {i} says {'good' if i % 2 else 'bad'} things" for i in range(64)]
    batched = infer(texts, name="cls", url=server.http_url, protocol="http")
    singles = [infer([t], name="cls", url=server.grpc_url)[0] for t in texts[:8]]
    assert len(batched) == 64
    for one, many in zip(singles, batched[:8], strict=True):
        assert one["LABEL"] == many["LABEL"]
        np.testing.assert_allclose(one["PROBABILITIES"], many["PROBABILITIES"], atol=1e-5)


def test_batch_above_max_batch_size_is_rejected_cleanly(deployment):
    server, _ = deployment
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("TEXT", [65, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"x"]] * 65, dtype=np.object_))
    with pytest.raises(InferenceServerException, match="batch"):
        client.infer("cls", [tensor])
    assert client.is_server_ready()
