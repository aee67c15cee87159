"""ModernBERT and EuroBERT through the real server: classification, embeddings and token classification.

Tiny random checkpoints of each (``tests/tiny_checkpoints.py``): ModernBERT with a global layer, then a
sliding-window layer whose 16-token window is shorter than the 64-token rows, rotary positions and a
byte-level BPE framed by ``[CLS]``/``[SEP]``; EuroBERT with rotary positions, grouped-query attention and a
Llama-3 BPE framed by ``<|begin_of_text|>``/``<|end_of_text|>`` (which also pads). Each request mixes short,
empty and over-long texts, so rows of one batch are padded differently; the served outputs must equal
transformers' (its pipelines, and sentence-transformers' mean pooling). NomicBERT (rotary, SwiGLU, two
segments) and T5's encoder (relative position buckets, ``T5EncoderModel`` as sentence-transformers saves it)
are served as embedders the same way.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.serve.test_e2e import _pipeline_probabilities
from tests.tasks.test_ner_qa_e2e import NER_TEXTS, _same_entities, _strided_pipeline
from tests.tiny_ner import make_token_classifier
from tritongen.builder.spec import load_spec
from tritongen.serve.client import infer
from tritongen.tasks.token_classification import stride_of

pytestmark = pytest.mark.e2e

ARCHS = ("modernbert", "eurobert")
MAX_LENGTH = 64  # four times ModernBERT's tiny local window
TEXTS = [
    "I love this movie!",
    "",
    "The service was slow and the food arrived cold, but the café in Zürich made up for it 🙂.",
    "東京は日本の首都です",
    "ok",
    "a very long review that keeps going " * 30,  # past 64 tokens: truncated
]
# ensemble -> (arch, task, aggregation strategy for token classification)
EMBEDDERS = (*ARCHS, "nomic_bert", "t5")
BUILDS = {f"{arch}_{task}": (arch, task) for arch in ARCHS for task in ("cls", "emb", "ner")}
BUILDS.update({f"{arch}_emb": (arch, "emb") for arch in EMBEDDERS})
STRATEGY = {"modernbert": "simple", "eurobert": "first"}  # `first` merges subwords: the BPE's word boundaries


@pytest.fixture(scope="module")
def checkpoints(tiny_factory, checkpoint_cache):
    paths = {}
    for name, (arch, task) in BUILDS.items():
        if task == "ner":
            paths[name] = checkpoint_cache(make_token_classifier, arch, seed=4, max_length=MAX_LENGTH)
        else:
            paths[name] = tiny_factory(arch, "classification" if task == "cls" else "embedding", max_length=MAX_LENGTH)
    return paths


@pytest.fixture(scope="module")
def served(checkpoints, builds, shared_server):
    built = []
    for name, (arch, task) in BUILDS.items():
        settings = {"aggregation_strategy": STRATEGY[arch]} if task == "ner" else {}
        built.append(builds(checkpoints[name], name, **settings))
        parity = built[-1].result.parity
        assert parity.passed and parity.max_abs_diff <= 1e-4, name
    return shared_server.serve(*built)


@pytest.mark.parametrize("arch", ARCHS)
def test_classification_matches_transformers_pipeline_when_batch_mixes_lengths(served, checkpoints, arch):
    name = f"{arch}_cls"
    rows = infer(TEXTS, name=name, url=served.grpc_url)
    expected = _pipeline_probabilities(checkpoints[name], TEXTS)
    got = np.array([row["PROBABILITIES"] for row in rows], np.float32)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert [row["TRUNCATED"] for row in rows] == [False] * (len(TEXTS) - 1) + [True]


def _sentence_embeddings(checkpoint, texts: list[str], arch: str) -> np.ndarray:
    """Mean pooling and L2 normalisation over transformers' encoder, as sentence-transformers computes them."""
    import torch
    from transformers import AutoModel, AutoTokenizer, T5EncoderModel

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    model = (T5EncoderModel if arch == "t5" else AutoModel).from_pretrained(str(checkpoint)).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


@pytest.mark.parametrize("arch", EMBEDDERS)
def test_embedding_matches_sentence_transformers_pooling_when_batch_mixes_lengths(served, checkpoints, arch):
    name = f"{arch}_emb"
    rows = infer(TEXTS, name=name, url=served.grpc_url)
    got = np.array([row["EMBEDDING"] for row in rows], np.float32)
    expected = _sentence_embeddings(checkpoints[name], TEXTS, arch)
    assert got.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(got, expected, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_token_classification_matches_strided_pipeline(served, checkpoints, arch):
    from transformers import pipeline

    name = f"{arch}_ner"
    strategy = STRATEGY[arch]
    stride = stride_of(load_spec(model="x", aggregation_strategy=strategy), MAX_LENGTH)
    pipe = pipeline("token-classification", model=str(checkpoints[name]), aggregation_strategy=strategy)
    rows = [
        row for i in range(0, len(NER_TEXTS), 4) for row in infer(NER_TEXTS[i : i + 4], name=name, url=served.grpc_url)
    ]
    found = 0
    for text, row in zip(NER_TEXTS, rows, strict=True):
        got = json.loads(row["ENTITIES"])
        _same_entities(got, _strided_pipeline(pipe, text, stride))
        found += len(got)
    assert found > 10  # random heads label many tokens: the comparison is not vacuous
