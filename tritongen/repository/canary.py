"""What a version must answer before it takes traffic: the model step's outputs on the parity texts.

The build runs the published model step on the parity texts, encoded as the tokenizer step encodes
them and sent as the roll-out sends them (one request), the way the node runs it: through the
native backend where one is at hand, else in process with the session settings its config gives.
It records the outputs, what ran them and a tolerance in ``canary.json`` next to ``parity.json`` (the
ensemble's version folder). A roll-out sends the same texts through the new version's steps in the
server and compares the model step's outputs with the record (:func:`compare`).

The tolerance follows the precision the step computes in (:func:`tolerance`): the build's parity
tolerance for FP32, and a share of the output's scale for FP16 and INT8, whose results move with the
kernels of the node that runs them (another CPU's, a GPU's, another runtime release's). A broken
version (other weights, another tokenizer) moves them by whole units.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CANARY_FILE", "RELATIVE_TOLERANCE", "Canary", "compare", "record", "tolerance"]

CANARY_FILE = "canary.json"
# By precision: the share of the recorded output's largest magnitude a served version may differ by.
RELATIVE_TOLERANCE = {"fp32": 0.0, "fp16": 1e-2, "int8": 5e-2}


def tolerance(precision: str, parity_tolerance: float, values: np.ndarray) -> float:
    """The canary's absolute tolerance for outputs ``values`` computed in ``precision``."""
    scale = float(np.abs(values.astype(np.float32)).max(initial=0.0))
    return max(parity_tolerance, RELATIVE_TOLERANCE.get(precision, 0.0) * scale)


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
    run: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]],
    encoder: Any,
    *,
    inputs: dict[str, Sequence[str]],
    output: str,
    tolerance_of: Callable[[np.ndarray], float],
    served_by: str,
) -> None:
    """Run the model step (``run``: one call's feeds -> its outputs) on ``inputs`` and write ``path``.

    ``inputs``' first is the text, a second the pair; ``tolerance_of(values)`` is the record's tolerance
    (:func:`tolerance`, bound to the precision); ``served_by`` says what ran the step, for people.
    """
    texts = list(inputs.values())
    encodings = encoder.encode(list(texts[0]), list(texts[1]) if len(texts) > 1 else None)
    values = np.asarray(run(encoder.pack(encodings))[output])
    data = {
        "inputs": {name: list(v) for name, v in inputs.items()},
        "output": output,
        "lengths": [len(e.ids) for e in encodings],
        "tolerance": tolerance_of(values),
        "served_by": served_by,
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
        return f"`{canary.output}` differs from the build's by up to {worst:.2e} (tolerance {canary.tolerance:.1e})"
    return None
