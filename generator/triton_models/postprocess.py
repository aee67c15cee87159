"""Triton Python-backend postprocessing: model outputs -> the ensemble's answer.

Classification: ``logits`` -> ``LABEL`` (string), ``SCORE`` and ``PROBABILITIES``, with the
same activation the transformers pipeline picks (softmax, or sigmoid for one label or
multi-label problems). Embedding: ``sentence_embedding`` -> ``EMBEDDING``, L2-normalised when the
checkpoint's sentence-transformers files ask for it. The outputs of all requests in one
``execute`` are processed as one array.

Settings come from the config's ``parameters``: ``task``, ``function``, ``labels_file``,
``normalize``.
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
    from _common import model_parameters, read_json, resolve_version_file
except ImportError:
    from generator.triton_models._common import model_parameters, read_json, resolve_version_file

__all__ = ["TritonPythonModel", "activate", "classify", "l2_normalize"]


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
        else:
            raise ValueError(f"postprocess task `{self.task}` is not supported")

    def _process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        if self.task == "classification":
            return classify(values, self.function, self.labels, threshold=self.threshold, top_k=self.top_k)
        return {"EMBEDDING": l2_normalize(values) if self.normalize else values.astype(np.float32)}

    def execute(self, requests: list[Any]) -> list[Any]:
        """Process the outputs of all requests as one array, then split them back."""
        arrays = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
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
