"""The script a user writes instead of Triton: sentence-transformers on ONNX Runtime, INT8 for this CPU, FastAPI.

Standalone (it runs in ``.venv-st``, not tritongen's venv). Files it writes go under ``--cache``:
``python st_fastapi.py --model DIR --port 8000 --cache /tmp/st [--no-quantize] [--threads N] [--isa ISA]``.
``--isa`` picks the quantization config (``avx2``, ``avx512``, ``avx512_vnni`` or ``arm64``); by default the best
one this CPU's flags allow (``TRITONGEN_CPU_FLAGS``, where set, replaces ``/proc/cpuinfo``'s, as for tritongen).
"""

import argparse
import os
import time
from pathlib import Path

import onnxruntime
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

# Quantization configs by the CPU flag each needs, best first (optimum's AutoQuantizationConfig names them).
ISAS = (("avx512_vnni", "avx512_vnni"), ("avx512", "avx512f"), ("avx2", "avx2"))


def cpu_isa(cpuinfo: str) -> str:
    """The quantization config for a CPU whose /proc/cpuinfo reads ``cpuinfo``: the best instruction set it lists."""
    flags = set(cpuinfo.split())
    return next((isa for isa, flag in ISAS if flag in flags), "arm64")


def quantize(st: SentenceTransformer, isa: str, cache: str) -> tuple[str, str]:
    """Dynamic INT8 for ``isa`` into ``cache``: the model file written, and the weights' type.

    sentence-transformers names the file after the config's weight type, which differs by instruction set
    (optimum quantizes AVX2's weights as unsigned, the others' as signed); naming it here finds it on every one.
    """
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    weights = getattr(AutoQuantizationConfig, isa)(is_static=False).weights_dtype.name.lower()
    st.save_pretrained(cache)  # the quantizer writes beside the model it is given: work on a copy
    export_dynamic_quantized_onnx_model(st, isa, cache, file_suffix=f"int8_{isa}")
    return f"onnx/model_int8_{isa}.onnx", weights


def load(model: str, cache: str, isa: str | None, threads: int) -> SentenceTransformer:
    """The model on ONNX Runtime (exported from PyTorch if the folder has no ONNX file), INT8 for ``isa`` if given."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads  # 0: ONNX Runtime's default, one per physical core
    kwargs = {"provider": "CPUExecutionProvider", "session_options": options}
    started = time.perf_counter()
    st = SentenceTransformer(model, backend="onnx", device="cpu", model_kwargs=kwargs)
    precision = "FP32"
    if isa is not None:
        kwargs["file_name"], weights = quantize(st, isa, cache)
        precision = f"INT8 ({isa}, {weights} weights)"
        st = SentenceTransformer(cache, backend="onnx", device="cpu", model_kwargs=kwargs)
    print(f"{precision} model ready in {time.perf_counter() - started:.1f} s", flush=True)
    return st


class EmbeddingRequest(BaseModel):
    """OpenAI's embeddings body."""

    input: str | list[str]
    model: str = ""


def main() -> None:
    """Load the model, then serve ``GET /health`` and ``POST /v1/embeddings``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--no-quantize", dest="quantize", action="store_false")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--isa", choices=[isa for isa, _ in ISAS] + ["arm64"], help="default: this CPU's best")
    args = parser.parse_args()
    override = os.environ.get("TRITONGEN_CPU_FLAGS")  # set, even empty, it replaces the CPU's (tritongen.cpu)
    flags = override.replace(",", " ") if override is not None else Path("/proc/cpuinfo").read_text()
    isa = (args.isa or cpu_isa(flags)) if args.quantize else None
    model = load(args.model, args.cache, isa, args.threads)
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/v1/embeddings")
    def embeddings(request: EmbeddingRequest) -> dict:  # a plain def: uvicorn runs it in its thread pool
        texts = [request.input] if isinstance(request.input, str) else request.input
        vectors = model.encode(texts)  # the checkpoint's modules pool and normalise
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        return {"object": "list", "data": data, "model": request.model}

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
