"""Baseline (c), the ceiling: the served model file in process, in its runtime, tokenisation included.

The build's runtime opens the file (``Runtime.ceiling_session``): ``model.onnx`` in ONNX Runtime, ``model.xml``
in OpenVINO at its default precision, as the backend runs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritongen.encoding import TextEncoder
from tritongen.runtimes import Runtime

__all__ = ["CeilingPoint", "ceiling_session", "measure_ceiling"]

Session = Callable[[dict[str, Any]], object]  # one batch's feeds in, its outputs (unread) out


@dataclass(frozen=True)
class CeilingPoint:
    """Throughput of one in-process batch size."""

    batch_size: int
    throughput: float


def ceiling_session(runtime: Runtime, version_dir: Path) -> Session | None:
    """The served file in the model step's ``version_dir``, opened in process by the build's ``runtime``.

    None where that runtime cannot run its file in process here (a TensorRT plan).
    """
    return runtime.ceiling_session(version_dir / runtime.model_file)


def measure_ceiling(
    session: Session,
    tokenizer_file: Path,
    input_names: Sequence[str],
    max_length: int,
    texts: Sequence[str],
    batch_sizes: Sequence[int] = (1, 4, 8, 16, 32, 64),
    pad_id: int = 0,
) -> list[CeilingPoint]:
    """Texts per second of ``session`` (:func:`ceiling_session`) over ``texts`` for each batch size.

    Each batch is padded to its longest text.
    """
    # No buckets: pad each batch to its longest text, the best an in-process caller can do.
    encoder = TextEncoder(str(tokenizer_file), max_length, None, pad_id=pad_id, input_names=input_names)
    points = []
    for batch_size in batch_sizes:
        batches = [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
        session(encoder(batches[0]))  # warm up this shape family
        start = time.perf_counter()
        for batch in batches:
            session(encoder(batch))
        points.append(CeilingPoint(batch_size, len(texts) / (time.perf_counter() - start)))
    return points
