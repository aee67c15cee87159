"""How much padding costs the model step: the batching strategies side by side, in-process, on the same texts.

    .venv/bin/python scripts/padding_bench.py --repository model_repository --name minilm [--batch 8] [--rounds 3]

Every strategy runs the served ``model.onnx`` of the newest version with one ONNX Runtime session over the same
texts (the bench's: mostly short tweets, a long tail of news paragraphs), in batches of at most ``--batch`` rows
formed as a dynamic batcher would, in arrival order unless the strategy says otherwise:

- ``bucket, padded to the bucket``: rows of one bucket length batch together, each padded to the bucket (the
  container's native ONNX Runtime backend runs what the tokenizer step sends);
- ``bucket, trimmed``: the same batches, trimmed to their longest real row (the local Python-based backend);
- ``per batch``: any rows batch together, padded to the batch's longest row (a batched tokenizer);
- ``length-sorted``: rows sorted by length, then batched (sentence-transformers' ``encode``; a token-budget
  scheduler such as Text Embeddings Inference's batches similar lengths too);
- ``no padding``: one row per run.

Rounds are interleaved (each round runs every strategy once) and the median is reported. The padded-token
share is exact; the texts/s are this machine's, so compare ratios within one run only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tritongen.configs.parser import read_config
from tritongen.contract import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS
from tritongen.data.datasets import bench_texts
from tritongen.parameters import TokenizerParameters
from tritongen.repository.contents import step_names
from tritongen.repository.staging import existing_versions


def _newest(folder: Path) -> Path:
    versions = existing_versions(folder)
    if not versions:
        sys.exit(f"{folder} has no version; build it first (make repo)")
    return folder / str(versions[-1])


def _batches_in_arrival(rows: Sequence[int], size: int, key: Callable[[int], int] | None = None) -> list[list[int]]:
    """Rows in arrival order, batched up to ``size``; with ``key``, only rows of one key batch together."""
    if key is None:
        return [list(rows[i : i + size]) for i in range(0, len(rows), size)]
    open_batches: dict[int, list[int]] = {}
    batches = []
    for row in rows:
        batch = open_batches.setdefault(key(row), [])
        batch.append(row)
        if len(batch) == size:
            batches.append(open_batches.pop(key(row)))
    return batches + list(open_batches.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--name", default="minilm")
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import onnxruntime as ort
    from tokenizers import Tokenizer

    names = step_names(args.name)
    model_dir, tokenizer_dir = (_newest(args.repository / names[s]) for s in ("model", "tokenizer"))
    buckets = sorted(
        read_config(args.repository / names["tokenizer"] / "config.pbtxt").read(TokenizerParameters).buckets
    )
    max_length = buckets[-1]
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    texts = bench_texts(args.texts)
    encodings = [tokenizer.encode(t) for t in texts]
    lengths = [len(e.ids) for e in encodings]
    session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    output = session.get_outputs()[0].name

    def bucket(row: int) -> int:
        return next(b for b in buckets if b >= lengths[row])

    def run(batch: list[int], width: int) -> int:
        feed = {name: np.zeros((len(batch), width), np.int64) for name in inputs}
        for i, row in enumerate(batch):
            n = lengths[row]
            feed[INPUT_IDS][i, :n] = encodings[row].ids
            feed[ATTENTION_MASK][i, :n] = 1
            if TOKEN_TYPE_IDS in feed:
                feed[TOKEN_TYPE_IDS][i, :n] = encodings[row].type_ids
        session.run([output], feed)
        return len(batch) * width

    order = list(range(len(texts)))
    by_length = sorted(order, key=lambda r: lengths[r])
    strategies: dict[str, list[tuple[list[int], int]]] = {
        "bucket, padded to the bucket": [
            (b, bucket(b[0])) for b in _batches_in_arrival(order, args.batch, bucket)
        ],
        "bucket, trimmed": [
            (b, max(lengths[r] for r in b)) for b in _batches_in_arrival(order, args.batch, bucket)
        ],
        "per batch": [(b, max(lengths[r] for r in b)) for b in _batches_in_arrival(order, args.batch)],
        "length-sorted": [(b, max(lengths[r] for r in b)) for b in _batches_in_arrival(by_length, args.batch)],
        "no padding": [([r], lengths[r]) for r in order],
    }  # fmt: skip
    real = sum(lengths)
    for plan in strategies.values():  # warm up every shape once
        for batch, width in plan[:3]:
            run(batch, width)
    timings: dict[str, list[float]] = {s: [] for s in strategies}
    padded: dict[str, int] = {}
    for round_index in range(args.rounds):
        print(f"round {round_index + 1}/{args.rounds}…", file=sys.stderr, flush=True)
        for strategy, plan in strategies.items():
            start = time.perf_counter()
            padded[strategy] = sum(run(batch, width) for batch, width in plan)
            timings[strategy].append(len(texts) / (time.perf_counter() - start))
    reference = statistics.median(timings["bucket, padded to the bucket"])
    print(
        f"{len(texts)} texts, median {int(np.median(lengths))} tokens, max {max(lengths)}; batches of at most "
        f"{args.batch}; buckets {buckets}; {args.rounds} interleaved rounds, medians; "
        f"ONNX Runtime {ort.__version__}, {model_dir / 'model.onnx'}\n"
    )
    print("| strategy | padded tokens / real tokens | texts/s | vs bucket-padded |")
    print("|---|---:|---:|---:|")
    for strategy in strategies:
        rate = statistics.median(timings[strategy])
        print(f"| {strategy} | {padded[strategy] / real:.2f} | {rate:.1f} | {rate / reference:.2f}x |")


if __name__ == "__main__":
    main()
