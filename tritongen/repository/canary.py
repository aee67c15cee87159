"""What a version must answer before it takes traffic: the model step's outputs on the parity texts.

The build runs the published model file on the parity texts, encoded as the tokenizer step
encodes them, and records the outputs in ``canary.json`` next to ``parity.json`` (the
ensemble's version folder). A roll-out sends the same texts through the new version's steps
in the server and compares the model step's outputs with the record (:func:`compare`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CANARY_FILE", "Canary", "compare", "record"]

CANARY_FILE = "canary.json"


@dataclass(frozen=True)
class Canary:
    """A recorded canary: the ensemble inputs to send and the model step output to expect.

    ``lengths`` are each text's real tokens: outputs with a sequence axis are compared on those
    only, since padding columns are not part of the answer.
    """

    inputs: dict[str, list[str]]
    output: str
    values: np.ndarray
    lengths: tuple[int, ...]
    tolerance: float

    @classmethod
    def load(cls, path: Path) -> Canary:
        """Read ``canary.json``; OSError, ValueError or KeyError when it is missing or malformed."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(
            inputs={k: list(v) for k, v in data["inputs"].items()},
            output=data["output"],
            values=np.asarray(data["values"], dtype=np.float32),
            lengths=tuple(int(n) for n in data["lengths"]),
            tolerance=float(data["tolerance"]),
        )


def record(
    path: Path,
    onnx_path: Path,
    encoder: Any,
    *,
    inputs: dict[str, Sequence[str]],
    output: str,
    tolerance: float,
) -> None:
    """Run ``onnx_path`` on ``inputs`` (the first is the text, a second the pair) and write ``path``."""
    import onnxruntime as ort

    texts = list(inputs.values())
    encodings = encoder.encode(list(texts[0]), list(texts[1]) if len(texts) > 1 else None)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (values,) = session.run([output], encoder.pack(encodings))
    data = {
        "inputs": {name: list(v) for name, v in inputs.items()},
        "output": output,
        "lengths": [len(e.ids) for e in encodings],
        "tolerance": tolerance,
        "values": values.astype(np.float32).tolist(),
    }
    Path(path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def compare(canary: Canary, served: np.ndarray) -> str | None:
    """None when ``served`` matches the record within its tolerance; else why not, in a few words."""
    expected = canary.values
    if served.shape[0] != expected.shape[0] or served.shape[2:] != expected.shape[2:]:
        return f"`{canary.output}` has shape {list(served.shape)}, the build recorded {list(expected.shape)}"
    diffs = [0.0]
    for row, length in enumerate(canary.lengths):
        got, want = served[row], expected[row]
        if want.ndim >= 2:  # a sequence axis: real tokens only
            got, want = got[:length], want[:length]
        if got.shape != want.shape:
            return f"`{canary.output}` row {row} has shape {list(got.shape)}, the build recorded {list(want.shape)}"
        diffs.append(float(np.abs(got.astype(np.float32) - want).max(initial=0.0)))
    worst = float(np.max(diffs))  # NaN propagates, unlike max()
    if not worst <= canary.tolerance:  # NaN fails too
        return f"`{canary.output}` differs from the build's by up to {worst:.2e} (tolerance {canary.tolerance:.0e})"
    return None
