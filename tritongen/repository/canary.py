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

__all__ = [
    "CANARY_FILE",
    "RELATIVE_TOLERANCE",
    "Canary",
    "Recorder",
    "chunks",
    "compare",
    "join",
    "record",
    "tolerance",
]

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
    batch: int = 0  # texts per request, the step's max_batch_size (0: all in one request)

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
            batch=int(data.get("batch", 0)),
        )


@dataclass(frozen=True)
class Recorder:
    """How the build runs the model step for the record.

    ``run`` answers one call's feeds with its outputs by name; ``served_by`` says what runs it, for people; ``batch``
    texts go in one request (the step's ``max_batch_size``; 0: all of them), as the roll-out sends them.
    """

    run: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]
    served_by: str
    batch: int = 0


def chunks(count: int, batch: int) -> list[slice]:
    """The requests ``count`` texts go in, ``batch`` at a time (0: one request)."""
    size = batch if batch > 0 else max(count, 1)
    return [slice(start, start + size) for start in range(0, count, size)]


def join(parts: list[np.ndarray]) -> np.ndarray:
    """Requests' outputs as one array: rows in order, a sequence axis padded with zeros to the widest request."""
    if len(parts) == 1 or parts[0].ndim < 3:
        return np.concatenate(parts, axis=0)
    width = max(p.shape[1] for p in parts)
    return np.concatenate([np.pad(p, [(0, 0), (0, width - p.shape[1])] + [(0, 0)] * (p.ndim - 2)) for p in parts])


def record(
    path: Path,
    recorder: Recorder,
    encoder: Any,
    *,
    inputs: dict[str, Sequence[str]],
    output: str,
    tolerance_of: Callable[[np.ndarray], float],
) -> None:
    """Run the model step (``recorder``) on ``inputs``, request by request, and write ``path``.

    ``inputs``' first is the text, a second the pair; ``tolerance_of(values)`` is the record's tolerance
    (:func:`tolerance`, bound to the precision).
    """
    texts = list(inputs.values())
    encodings = encoder.encode(list(texts[0]), list(texts[1]) if len(texts) > 1 else None)
    parts = [
        np.asarray(recorder.run(encoder.pack(encodings[rows]))[output])
        for rows in chunks(len(encodings), recorder.batch)
    ]
    values = join(parts)
    data = {
        "inputs": {name: list(v) for name, v in inputs.items()},
        "output": output,
        "lengths": [len(e.ids) for e in encodings],
        "tolerance": tolerance_of(values),
        "served_by": recorder.served_by,
        "batch": recorder.batch,
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
