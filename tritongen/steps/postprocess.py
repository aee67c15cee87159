"""Triton Python-backend postprocessing: model outputs -> the ensemble's answer.

The shared part of every task's postprocess step: the base classes a task's ``postprocess.py``
(``tritongen/tasks/<task>/``) subclasses, and the maps they share (``activate``, ``classify``; the vector
maths, ``l2_normalize`` and ``matryoshka_cut``, is ``_common``'s). :class:`BatchedPostprocess` maps the
outputs of all requests in one ``execute`` as one array; :class:`RequestPostprocess` decodes one request at a
time (windows of one request belong together).
Settings come from the config's ``parameters``; the task's step reads its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from _tritongen_step._common import PerRequestStep, model_parameters, pb_utils, read_json, resolve_version_file
from _tritongen_step.contract import LABEL, LABELS, PROBABILITIES, SCORE
from _tritongen_step.parameters import LabelsParameters
from _tritongen_step.vectors import softmax

__all__ = [
    "BatchedPostprocess",
    "RequestPostprocess",
    "TritonPythonModel",
    "activate",
    "classify",
    "input_array",
]


def activate(logits: np.ndarray, function: str) -> np.ndarray:
    """Turn logits into scores: ``softmax``, ``sigmoid`` or ``none``."""
    logits = logits.astype(np.float32)
    if function == "softmax":
        return softmax(logits)
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
        LABEL: names,
        SCORE: scores,
        PROBABILITIES: probabilities.astype(np.float32),
        LABELS: np.array(chosen, dtype=np.object_).reshape(-1, 1),
    }


def input_array(request: Any, name: str) -> np.ndarray:
    """Input ``name`` of ``request`` as a numpy array."""
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    """Base of the postprocess steps: reads the config, then :meth:`setup` reads the task's parameters.

    A task's ``postprocess.py`` (``tritongen/tasks/<task>/``) subclasses :class:`BatchedPostprocess` (all
    requests' outputs as one array) or :class:`RequestPostprocess` (one request at a time); this module is
    copied next to its ``model.py``.
    """

    def initialize(self, args: dict[str, str]) -> None:
        """Read the output names and the task's parameters from the model config."""
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_names = [out["name"] for out in config["output"]]
        self.setup(model_parameters(config), args)

    def setup(self, params: dict[str, str], args: dict[str, str]) -> None:
        """Read the task's parameters; files resolve with ``resolve_version_file(args, name)``."""

    def labels(self, params: dict[str, str], args: dict[str, str]) -> list[str]:
        """The label names the build wrote (``labels_file``), in id order."""
        return read_json(resolve_version_file(args, LabelsParameters.from_parameters(params).labels_file))


class BatchedPostprocess(TritonPythonModel):
    """A postprocess step that maps the model output of all requests at once, row by row."""

    def process(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """The outputs for ``values`` (the model output of every request, concatenated)."""
        raise NotImplementedError

    def execute(self, requests: list[Any]) -> list[Any]:
        """Process the outputs of all requests as one array, then split them back."""
        arrays = [input_array(r, self.input_name) for r in requests]
        merged = self.process(np.concatenate(arrays, axis=0))
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


class RequestPostprocess(PerRequestStep, TritonPythonModel):
    """A postprocess step that decodes one request at a time (its windows belong together)."""
