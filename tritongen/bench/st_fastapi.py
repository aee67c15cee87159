"""The script a user writes instead of Triton: sentence-transformers on ONNX Runtime, INT8 for this CPU, FastAPI.

Standalone (it runs in ``.venv-st``, not tritongen's venv). Files it writes go under ``--cache``:
``python st_fastapi.py --model DIR --port 8000 --cache /tmp/st [--no-quantize] [--threads N]``.
"""

import argparse
import time
from pathlib import Path

import onnxruntime
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model


def cpu_isa() -> str:
    """The quantization config for this CPU: the best instruction set /proc/cpuinfo lists."""
    flags = set(Path("/proc/cpuinfo").read_text().split())
    for isa, flag in (("avx512_vnni", "avx512_vnni"), ("avx512", "avx512f"), ("avx2", "avx2")):
        if flag in flags:
            return isa
    return "arm64"


def load(model: str, cache: str, quantize: bool, threads: int) -> SentenceTransformer:
    """The model on ONNX Runtime (exported from PyTorch if the folder has no ONNX file), INT8 if ``quantize``."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads  # 0: ONNX Runtime's default, one per physical core
    kwargs = {"provider": "CPUExecutionProvider", "session_options": options}
    started = time.perf_counter()
    st = SentenceTransformer(model, backend="onnx", device="cpu", model_kwargs=kwargs)
    precision = "FP32"
    if quantize:
        isa = cpu_isa()
        precision = f"INT8 ({isa})"
        st.save_pretrained(cache)  # the quantizer writes beside the model it is given: work on a copy
        export_dynamic_quantized_onnx_model(st, isa, cache)
        kwargs["file_name"] = f"onnx/model_qint8_{isa}.onnx"
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
    args = parser.parse_args()
    model = load(args.model, args.cache, args.quantize, args.threads)
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
