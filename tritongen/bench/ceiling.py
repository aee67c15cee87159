"""Baseline (c), the ceiling: ONNX Runtime in-process on the same model file, tokenisation included."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritongen.steps.tokenizer import TextEncoder

__all__ = ["CeilingPoint", "measure_ceiling"]


@dataclass(frozen=True)
class CeilingPoint:
    """Throughput of one in-process batch size."""

    batch_size: int
    throughput: float


def measure_ceiling(
    onnx_path: Path,
    tokenizer_file: Path,
    input_names: Sequence[str],
    max_length: int,
    texts: Sequence[str],
    batch_sizes: Sequence[int] = (1, 4, 8, 16, 32, 64),
    pad_id: int = 0,
) -> list[CeilingPoint]:
    """Texts per second over ``texts`` for each batch size (each batch padded to its longest text).

    ``onnx_path`` is the served model file: ``model.onnx`` runs in ONNX Runtime, ``model.xml`` (an OpenVINO
    build) in OpenVINO with its default precision, as the backend runs it.
    """
    if onnx_path.suffix == ".xml":
        from tritongen.runtimes.openvino.ir import OpenVinoSession

        session: Any = OpenVinoSession(onnx_path, {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1})
    else:
        import onnxruntime as ort

        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    # No buckets: pad each batch to its longest text, the best an in-process caller can do.
    encoder = TextEncoder(str(tokenizer_file), max_length, None, pad_id=pad_id, input_names=input_names)
    points = []
    for batch_size in batch_sizes:
        batches = [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
        session.run(None, encoder(batches[0]))  # warm up this shape family
        start = time.perf_counter()
        for batch in batches:
            session.run(None, encoder(batch))
        points.append(CeilingPoint(batch_size, len(texts) / (time.perf_counter() - start)))
    return points
