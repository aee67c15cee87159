"""Rerankers through the real server: a Qwen3-Reranker-style decoder against the model card's formula in PyTorch,
and a BERT-style cross-encoder (one logit, ``text-pair-classification``) against PyTorch.

The decoder's requests mix short and truncated documents, so its right-padded rows have very different lengths;
the reference runs the model card's code, which pads on the left, so a padding-side bug cannot hide.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_rerankers import make_qwen3_reranker
from tests.tiny_variants import make_cross_encoder
from tritongen.cli import main
from tritongen.errors import ServerError
from tritongen.model.checkpoint import inspect_checkpoint
from tritongen.serve.client import infer
from tritongen.tasks import detect_task
from tritongen.tasks.reranking import DEFAULT_INSTRUCTION, PROMPT_PREFIX, PROMPT_SUFFIX, format_pair

SCORE_TOLERANCE = 1e-4
ROW_LENGTH = 256  # the tiny reranker's max_position_embeddings and model_max_length
INSTRUCTION = "Judge whether the document is about the same city"
PAIRS = [  # (query, document): short, non-ASCII, empty document, and one cut at the row length
    ("what is the capital of China?", "The capital of China is Beijing."),
    ("café in Zürich 🎉", "Le café est fermé 😞, mais la pâtisserie à São Paulo est ouverte."),
    ("東京は大きい", ""),
    ("ok", "word " * 400),
    ("Explain gravity", "Gravity is a force that attracts two bodies towards each other."),
]


@pytest.fixture(scope="module")
def checkpoints(checkpoint_cache):
    return {"qwen3": checkpoint_cache(make_qwen3_reranker), "cross": checkpoint_cache(make_cross_encoder)}


@pytest.fixture(scope="module")
def served(checkpoints, builds, shared_server):
    return shared_server.serve(
        builds(checkpoints["qwen3"], "rr_qwen3", task="reranking"),
        builds(checkpoints["qwen3"], "rr_qwen3_instruct", task="reranking", rerank_instruction=INSTRUCTION),
        builds(checkpoints["cross"], "rr_cross"),  # detected: text-pair-classification, one label
    )


def _model_card_scores(path, pairs, instruction: str) -> tuple[list[float], list[bool]]:
    """The Qwen3-Reranker model card's code: left padding, last position's yes/no logits, P(yes)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
    prefix = tokenizer.encode(PROMPT_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(PROMPT_SUFFIX, add_special_tokens=False)
    texts = [format_pair(instruction, q, d) for q, d in pairs]
    budget = ROW_LENGTH - len(prefix) - len(suffix)
    inputs = tokenizer(texts, padding=False, truncation="longest_first", return_attention_mask=False, max_length=budget)
    full = tokenizer(texts, add_special_tokens=False)["input_ids"]
    truncated = [len(f) > budget for f in full]
    inputs["input_ids"] = [prefix + ids + suffix for ids in inputs["input_ids"]]
    batch = tokenizer.pad(inputs, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # the batch really is padded
    with torch.no_grad():
        logits = model(**batch).logits[:, -1, :]
    pair = torch.stack([logits[:, no], logits[:, yes]], dim=1)
    return torch.nn.functional.log_softmax(pair, dim=1)[:, 1].exp().tolist(), truncated


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("name", "instruction"), [("rr_qwen3", DEFAULT_INSTRUCTION), ("rr_qwen3_instruct", INSTRUCTION)]
)
def test_reranker_score_matches_model_card_formula_when_documents_have_mixed_lengths(
    served, checkpoints, name, instruction
):
    rows = infer([q for q, _ in PAIRS], name=name, url=served.grpc_url, inputs={"TEXT_PAIR": [d for _, d in PAIRS]})
    expected, truncated = _model_card_scores(checkpoints["qwen3"], PAIRS, instruction)
    np.testing.assert_allclose([r["SCORE"] for r in rows], expected, atol=SCORE_TOLERANCE)
    assert [r["TRUNCATED"] for r in rows] == truncated == [False, False, False, True, False]
    assert np.ptp(expected) > 0.05  # the random model tells the pairs apart: the comparison is not vacuous


@pytest.mark.e2e
def test_reranker_scores_do_not_depend_on_the_batch_when_sent_one_pair_at_a_time_over_http(served):
    alone = [
        infer([q], name="rr_qwen3", url=served.http_url, protocol="http", inputs={"TEXT_PAIR": [d]})[0]["SCORE"]
        for q, d in PAIRS
    ]
    together = infer(
        [q for q, _ in PAIRS], name="rr_qwen3", url=served.grpc_url, inputs={"TEXT_PAIR": [d for _, d in PAIRS]}
    )
    np.testing.assert_allclose(alone, [r["SCORE"] for r in together], atol=1e-5)


@pytest.mark.e2e
def test_reranker_request_gets_invalid_argument_when_document_missing(served):
    with pytest.raises(ServerError, match=r"INVALID_ARGUMENT.*missing required input.*TEXT_PAIR"):
        infer(["a query"], name="rr_qwen3", url=served.grpc_url)
    assert 0 < infer(["q"], name="rr_qwen3", url=served.grpc_url, inputs={"TEXT_PAIR": ["d"]})[0]["SCORE"] < 1


@pytest.mark.e2e
def test_cross_encoder_reranker_score_matches_pytorch_sigmoid(served, checkpoints):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    assert detect_task(inspect_checkpoint(str(checkpoints["cross"]))).name == "text-pair-classification"
    rows = infer(
        [q for q, _ in PAIRS], name="rr_cross", url=served.grpc_url, inputs={"TEXT_PAIR": [d for _, d in PAIRS]}
    )
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints["cross"]))
    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoints["cross"])).eval()
    expected = []
    for query, document in PAIRS:
        segments = (query, document) if document else (query,)
        inputs = tokenizer(*segments, truncation=True, return_tensors="pt", return_token_type_ids=True)
        with torch.no_grad():
            expected.append(torch.sigmoid(model(**inputs).logits[0, 0]).item())
    np.testing.assert_allclose([r["SCORE"] for r in rows], expected, atol=SCORE_TOLERANCE)


def test_detect_task_leaves_causal_lms_to_be_named(checkpoints, tmp_path, capsys):
    with pytest.raises(Exception, match="cannot tell the task"):
        detect_task(inspect_checkpoint(str(checkpoints["qwen3"])))
    argv = ["build", "--model", str(checkpoints["cross"]), "--task", "reranking", "--repository", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "task `reranking` needs a *ForCausalLM checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_last_token_answers_agree_when_rows_are_padded_left_or_right(checkpoints):
    """The graph finds the last real token from the mask: right and left padding give the unpadded logits."""
    import torch
    from transformers import AutoTokenizer

    from tritongen.tasks import get_task

    module = get_task("reranking").load_module(inspect_checkpoint(str(checkpoints["qwen3"])))
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints["qwen3"]))
    rows = [tokenizer.encode(format_pair(DEFAULT_INSTRUCTION, q, d)) for q, d in PAIRS[:3]]
    width = max(len(r) for r in rows) + 3
    with torch.no_grad():
        alone = torch.cat([module(torch.tensor([r]), torch.ones(1, len(r), dtype=torch.long)) for r in rows])
        for side in ("right", "left"):
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, r in enumerate(rows):
                span = slice(0, len(r)) if side == "right" else slice(width - len(r), width)
                ids[i, span], mask[i, span] = torch.tensor(r), 1
            torch.testing.assert_close(module(ids, mask), alone, atol=1e-4, rtol=0)


def test_build_exits_2_when_reranker_tokenizer_has_no_yes_token(checkpoints, tiny_factory, tmp_path, capsys):
    import shutil

    # A Qwen3 reranker whose tokenizer is swapped for the tiny RoBERTa's (no `yes` token in its vocabulary).
    model = shutil.copytree(checkpoints["qwen3"], tmp_path / "qwen3")
    roberta = tiny_factory("roberta")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(roberta / name, model / name)
    argv = ["build", "--model", str(model), "--task", "reranking", "--repository", str(tmp_path / "r")]
    assert main(argv) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("error: a reranker's tokenizer needs `yes` and `no` as single tokens")
    assert not (tmp_path / "r").exists()
