"""Triton Python-backend postprocessing: model outputs -> the ensemble's answer.

Classification: ``logits`` -> ``LABEL`` (string), ``SCORE`` and ``PROBABILITIES``, with the
same activation the transformers pipeline picks (softmax, or sigmoid for one label or
multi-label problems). Embedding: ``sentence_embedding`` -> ``EMBEDDING``, L2-normalised when the
checkpoint's sentence-transformers files ask for it. The outputs of all requests in one
``execute`` are processed as one array.

Token classification: ``TEXT``, ``logits`` and the tokenizer's ``input_ids``, ``special_mask``,
``word_ids``, ``offsets`` and ``window_example`` -> ``ENTITIES``, a JSON list per text as the strided
transformers pipeline returns it (``ner.aggregate_windows``: windows aggregated, overlaps merged).
Question answering: ``CONTEXT``, ``span_logits`` and the window
metadata -> ``ANSWER``, ``SCORE``, ``START``, ``END``: the best answer of each pair over all its
windows (``qa.decode_answers``).

Settings come from the config's ``parameters``: ``task``, ``function``, ``labels_file``,
``normalize``, ``threshold``, ``top_k``; ``aggregation_strategy``, ``tokenizer_file`` and
``unk_token`` for token classification; ``max_answer_len`` and ``handle_impossible_answer`` for QA.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # outside the server: importable for tests and build-time checks
    pb_utils = None

try:
    from _common import (
        decode_texts,
        import_sibling,
        model_parameters,
        read_json,
        resolve_version_file,
        respond_per_request,
    )
except ImportError:
    from tritongen.triton_models._common import (
        decode_texts,
        import_sibling,
        model_parameters,
        read_json,
        resolve_version_file,
        respond_per_request,
    )

__all__ = ["TritonPythonModel", "activate", "answer_arrays", "classify", "l2_normalize"]


def activate(logits: np.ndarray, function: str) -> np.ndarray:
    """Turn logits into scores: ``softmax``, ``sigmoid`` or ``none``."""
    logits = logits.astype(np.float32)
    if function == "softmax":
        shifted = logits - logits.max(axis=-1, keepdims=True)
        exp = np.exp(shifted)
        return exp / exp.sum(axis=-1, keepdims=True)
    if function == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    if function == "none":
        return logits
    raise ValueError(f"unknown activation `{function}`; expected softmax, sigmoid or none")


def classify(
    logits: np.ndarray, function: str, labels: Sequence[str], *, threshold: float = 0.5, top_k: int = 0
) -> dict[str, np.ndarray]:
    """Scores, best label and best score per row of ``logits``.

    ``LABELS`` (for multi-label models) is a JSON list of ``{"label", "score"}`` for every
    label scoring at least ``threshold``, best first, at most ``top_k`` of them (0: all).
    """
    probabilities = activate(logits, function)
    best = probabilities.argmax(axis=-1)
    names = np.array([labels[i].encode("utf-8") for i in best], dtype=np.object_).reshape(-1, 1)
    scores = probabilities[np.arange(len(best)), best].reshape(-1, 1).astype(np.float32)
    chosen = []
    for row in probabilities:
        order = [int(i) for i in np.argsort(-row, kind="stable") if row[i] >= threshold]
        order = order[:top_k] if top_k else order
        chosen.append(json.dumps([{"label": labels[i], "score": float(row[i])} for i in order]).encode("utf-8"))
    return {
        "LABEL": names,
        "SCORE": scores,
        "PROBABILITIES": probabilities.astype(np.float32),
        "LABELS": np.array(chosen, dtype=np.object_).reshape(-1, 1),
    }


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Scale rows to unit length, as sentence-transformers' Normalize module does."""
    vectors = vectors.astype(np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def answer_arrays(answers: Sequence[dict | list]) -> dict[str, np.ndarray]:
    """``qa.decode_answers``' best answer per pair as [N, 1] arrays; no span left gives "", 0, -1, -1."""
    best = [a if isinstance(a, dict) else (a[0] if a else None) for a in answers]
    return {
        "ANSWER": np.array([[(b["answer"] if b else "").encode("utf-8")] for b in best], dtype=np.object_),
        "SCORE": np.array([[b["score"] if b else 0.0] for b in best], dtype=np.float32),
        "START": np.array([[b["start"] if b else -1] for b in best], dtype=np.int64),
        "END": np.array([[b["end"] if b else -1] for b in best], dtype=np.int64),
    }


def _input(request: Any, name: str) -> np.ndarray:
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


def _load_tokenizer(path: Any) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


class TritonPythonModel:
    """The postprocessing step of the ensemble."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read the task, activation and labels from the model config."""
        config = json.loads(args["model_config"])
        params = model_parameters(config)
        self.task = params["task"]
        self.input_name = config["input"][0]["name"]
        self.output_names = [out["name"] for out in config["output"]]
        if self.task == "classification":
            self.function = params.get("function", "softmax")
            self.labels = read_json(resolve_version_file(args, params.get("labels_file", "labels.json")))
            self.threshold = float(params.get("threshold", "0.5"))
            self.top_k = int(params.get("top_k", "0"))
        elif self.task == "embedding":
            self.normalize = params.get("normalize", "false") == "true"
        elif self.task == "token-classification":
            self.ner = import_sibling("ner")
            self.labels = read_json(resolve_version_file(args, params.get("labels_file", "labels.json")))
            self.strategy = params.get("aggregation_strategy", "simple")
            self.vocab = self.ner.TokenVocab.from_tokenizer(
                _load_tokenizer(resolve_version_file(args, params.get("tokenizer_file", "tokenizer.json"))),
                unk_token=params.get("unk_token") or None,
            )
        elif self.task == "question-answering":
            self.qa = import_sibling("qa")
            self.max_answer_len = int(params.get("max_answer_len", "15"))
            self.handle_impossible_answer = params.get("handle_impossible_answer", "false") == "true"
        else:
            raise ValueError(f"postprocess task `{self.task}` is not supported")

    def _process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        if self.task == "classification":
            return classify(values, self.function, self.labels, threshold=self.threshold, top_k=self.top_k)
        return {"EMBEDDING": l2_normalize(values) if self.normalize else values.astype(np.float32)}

    def _entities(self, request: Any) -> dict[str, np.ndarray]:
        texts = decode_texts(_input(request, "TEXT"), "TEXT")
        encoded = {name: _input(request, name) for name in ("input_ids", "special_mask", "word_ids", "offsets")}
        entities = self.ner.aggregate_windows(
            _input(request, "logits"), encoded, _input(request, "window_example"), texts, self.labels,
            strategy=self.strategy, tokenizer=self.vocab,
        )  # fmt: skip
        rows = [[json.dumps(row, ensure_ascii=False).encode("utf-8")] for row in entities]
        return {"ENTITIES": np.array(rows, dtype=np.object_)}

    def _answers(self, request: Any) -> dict[str, np.ndarray]:
        contexts = decode_texts(_input(request, "CONTEXT"), "CONTEXT")
        spans = _input(request, "span_logits")
        attention = _input(request, "attention_mask")
        windows = self.qa.QAWindows(
            input_ids=attention,  # decoding reads only its shape
            attention_mask=attention,
            token_type_ids=np.zeros_like(attention),
            example_index=_input(request, "window_example").reshape(-1),
            lengths=attention.sum(axis=1),
            offsets=_input(request, "offsets"),
            sequence_ids=_input(request, "sequence_ids"),
            word_ids=_input(request, "word_ids"),
            p_mask=_input(request, "p_mask").astype(bool),
            num_examples=len(contexts),
            max_seq_len=attention.shape[1],
            doc_stride=0,
        )
        answers = self.qa.decode_answers(
            spans[..., 0], spans[..., 1], windows, contexts,
            max_answer_len=self.max_answer_len, handle_impossible_answer=self.handle_impossible_answer,
        )  # fmt: skip
        return answer_arrays(answers)

    def execute(self, requests: list[Any]) -> list[Any]:
        """Process the outputs of all requests as one array, then split them back."""
        if self.task == "token-classification":
            return respond_per_request(pb_utils, requests, self.output_names, self._entities)
        if self.task == "question-answering":
            return respond_per_request(pb_utils, requests, self.output_names, self._answers)
        arrays = [_input(r, self.input_name) for r in requests]
        merged = self._process(np.concatenate(arrays, axis=0))
        responses = []
        start = 0
        for array in arrays:
            stop = start + array.shape[0]
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(name, merged[name][start:stop]) for name in self.output_names]
                )
            )
            start = stop
        return responses
