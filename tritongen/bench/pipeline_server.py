"""Baseline (a): the usual first deployment — a transformers pipeline in PyTorch behind FastAPI.

It speaks enough of the KServe v2 HTTP protocol (health, metadata, config, statistics,
infer with JSON tensors) for perf_analyzer to drive it exactly as it drives Triton. Run as
``python -m tritongen.bench.pipeline_server --model DIR --task TASK --name NAME --port N``.
"""

# No `from __future__ import annotations`: FastAPI must resolve the endpoint annotations at runtime.

import argparse
from typing import Any

from tritongen.contract import EMBEDDING, LABEL, SCORE, TEXT

__all__ = ["create_app"]


def _predictor(model: str, task: str, max_length: int) -> Any:
    import torch
    from transformers import pipeline

    if task == "classification":
        pipe = pipeline("text-classification", model=model, top_k=None, device="cpu")

        def predict(texts: list[str]) -> dict[str, list[Any]]:
            with torch.no_grad():  # not torch's global switch: tests call these in their own process
                results = pipe(texts, truncation=True, max_length=max_length)
            best = [max(r, key=lambda item: item["score"]) for r in results]
            return {LABEL: [b["label"] for b in best], SCORE: [b["score"] for b in best]}

        return predict
    return embedding_predictor(model, max_length)


def embedding_predictor(model: str, max_length: int) -> Any:
    """FP32 PyTorch embeddings: the encoder's tokens mean-pooled, one text at a time, then normalised."""
    import torch
    from transformers import pipeline

    pipe = pipeline("feature-extraction", model=model, device="cpu", return_tensors=True)

    def embed(texts: list[str]) -> dict[str, list[Any]]:
        rows = []
        # max_length only reaches the tokenizer through tokenize_kwargs (the pipeline drops it as a keyword).
        with torch.no_grad():
            hiddens = pipe(texts, tokenize_kwargs={"truncation": True, "max_length": max_length})
        for hidden in hiddens:
            vector = hidden[0].mean(dim=0)  # one unpadded text at a time: mean over its tokens
            rows.append(torch.nn.functional.normalize(vector, dim=0).tolist())
        return {EMBEDDING: rows}

    return embed


def decode_request(body: bytes, header_length: str | None) -> list[str] | None:
    """Texts of the ``TEXT`` input of a KServe v2 request, JSON or with binary tensor data."""
    from tritongen.serve.kserve import read_tensors

    try:
        tensors = read_tensors(body, int(header_length) if header_length else None, "inputs")
    except KeyError:  # no inputs, or one without a name, datatype or shape
        return None
    if TEXT not in tensors:
        return None
    texts = tensors[TEXT].reshape(-1)
    return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in texts]


def create_app(model: str, task: str, name: str, max_length: int) -> Any:
    """The FastAPI app serving ``name`` at ``/v2/models/{name}``."""
    from fastapi import FastAPI

    predict = _predictor(model, task, max_length)
    app = FastAPI()
    outputs = [LABEL, SCORE] if task == "classification" else [EMBEDDING]
    _add_health_routes(app, name)
    _add_model_routes(app, name, outputs)
    _add_infer_route(app, name, predict)
    return app


def _add_health_routes(app: Any, name: str) -> None:
    """Liveness, readiness and the server's metadata, as perf_analyzer asks for them."""

    @app.get("/health")  # as every server the bench starts beside Triton answers it
    @app.get("/v2/health/live")
    @app.get("/v2/health/ready")
    @app.get(f"/v2/models/{name}/ready")
    @app.get(f"/v2/models/{name}/versions/1/ready")
    def ready() -> dict[str, bool]:
        return {"ready": True}

    @app.get("/v2")
    def server_metadata() -> dict[str, Any]:
        return {"name": "fastapi-pipeline", "version": "baseline", "extensions": []}


def _model_config(name: str, outputs: list[str]) -> dict[str, Any]:
    """A Triton-style config of the pipeline model: one TEXT input, float outputs."""
    return {
        "name": name,
        "platform": "pytorch_pipeline",
        "max_batch_size": 64,
        "input": [{"name": TEXT, "data_type": "TYPE_STRING", "dims": [1]}],
        "output": [{"name": o, "data_type": "TYPE_FP32", "dims": [-1]} for o in outputs],
    }


def _empty_statistics(name: str) -> dict[str, Any]:
    """The statistics API's answer with every counter at zero: perf_analyzer reads it, the baseline counts nothing."""
    empty = {"count": 0, "ns": 0}
    kinds = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
    return {
        "model_stats": [
            {
                "name": name,
                "version": "1",
                "last_inference": 0,
                "inference_count": 0,
                "execution_count": 0,
                "inference_stats": {k: empty for k in kinds},
                "batch_stats": [],
            }
        ]
    }


def _add_model_routes(app: Any, name: str, outputs: list[str]) -> None:
    """The model's metadata, config and statistics."""
    config, stats = _model_config(name, outputs), _empty_statistics(name)

    @app.get(f"/v2/models/{name}")
    def metadata() -> dict[str, Any]:
        return {
            "name": name,
            "versions": ["1"],
            "platform": config["platform"],
            "inputs": [{"name": TEXT, "datatype": "BYTES", "shape": [-1, 1]}],
            "outputs": [{"name": o, "datatype": "FP32", "shape": [-1, -1]} for o in outputs],
        }

    @app.get(f"/v2/models/{name}/config")
    def model_config() -> dict[str, Any]:
        return config

    @app.get("/v2/models/stats")
    @app.get(f"/v2/models/{name}/stats")
    @app.get(f"/v2/models/{name}/versions/1/stats")
    def statistics() -> dict[str, Any]:
        return stats


def _infer_response(name: str, count: int, result: dict[str, list[Any]]) -> dict[str, Any]:
    """KServe v2 JSON of ``predict``'s result for ``count`` texts: labels as BYTES, the rest FP32."""
    outputs = []
    for key, rows in result.items():
        width = len(rows[0]) if rows and isinstance(rows[0], list) else 1
        flat = [v for row in rows for v in row] if width > 1 or (rows and isinstance(rows[0], list)) else rows
        datatype = "BYTES" if key == LABEL else "FP32"
        outputs.append({"name": key, "datatype": datatype, "shape": [count, width], "data": flat})
    return {"model_name": name, "model_version": "1", "outputs": outputs}


def _add_infer_route(app: Any, name: str, predict: Any) -> None:
    """Inference: the texts of the request through ``predict``."""
    from fastapi import HTTPException, Request

    @app.post(f"/v2/models/{name}/infer")
    @app.post(f"/v2/models/{name}/versions/1/infer")
    async def infer(request: Request) -> dict[str, Any]:
        texts = decode_request(await request.body(), request.headers.get("inference-header-content-length"))
        if texts is None:
            raise HTTPException(status_code=400, detail="input TEXT is required")
        # The model call runs in FastAPI's thread pool, as a plain `def` endpoint would.
        from starlette.concurrency import run_in_threadpool

        result = await run_in_threadpool(predict, texts)
        return _infer_response(name, len(texts), result)


def main() -> None:
    """Serve the baseline with uvicorn (one worker, as it usually starts)."""
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    app = create_app(args.model, args.task, args.name, args.max_length)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
