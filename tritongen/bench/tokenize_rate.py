"""The in-process ceiling of the CPU side: a ``tokenizer.json`` encoding texts with nothing around it.

Run as ``python -m tritongen.bench.tokenize_rate TOKENIZER TEXTS_JSON MAX_LENGTH BUCKETS`` in a process of its
own, so that the Rust tokenizer's thread pool takes the size the caller gives it (``RAYON_NUM_THREADS``; unset:
every core).
Prints one JSON object: texts/s of ``encode_batch`` in batches of 64, the physical limit of this work on this
many cores, and of the tokenizer step's own body (encode, then pack into bucket-padded arrays) for one text
and for 32 at a time, which is what each of its ``execute`` calls does.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence

__all__ = ["CEILING_BATCH", "rates"]

CEILING_BATCH = 64


def _rate(texts: Sequence[str], batch: int, call: Callable[[list[str]], object], seconds: float = 2.0) -> float:
    """Texts per second of ``call`` on ``batch`` texts at a time, over whole passes for at least ``seconds``."""
    chunks = [list(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    call(chunks[0])  # warm up
    done, start = 0, time.perf_counter()
    while True:
        for chunk in chunks:
            call(chunk)
        done += len(texts)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def rates(
    tokenizer_file: str, texts: Sequence[str], max_length: int, buckets: Sequence[int] | None, seconds: float = 2.0
) -> dict[str, float]:
    """Texts/s of ``encode_batch`` (batches of 64) and of the step's encode-and-pack for 1 and 32 texts.

    Each rate is whole passes over ``texts`` for at least ``seconds``.
    """
    from tokenizers import Tokenizer

    from tritongen.encoding import TextEncoder

    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    encoder = TextEncoder(tokenizer_file, max_length, buckets)
    return {
        "encode_batch_64": _rate(texts, CEILING_BATCH, tokenizer.encode_batch, seconds),
        "step_body_1": _rate(texts, 1, encoder, seconds),
        "step_body_32": _rate(texts, 32, encoder, seconds),
    }


def main() -> None:
    """``TOKENIZER TEXTS_JSON MAX_LENGTH BUCKETS [SECONDS]``: print the rates as JSON.

    ``BUCKETS``: comma-separated, or ``longest`` for a step that pads each request to its longest row.
    """
    tokenizer_file, texts_file, max_length, buckets = sys.argv[1:5]
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0
    with open(texts_file, encoding="utf-8") as handle:
        texts = json.load(handle)
    widths = None if buckets == "longest" else [int(b) for b in buckets.split(",") if b]
    print(json.dumps(rates(tokenizer_file, texts, int(max_length), widths, seconds)))


if __name__ == "__main__":
    main()
