"""The Triton side of the gateway: one ``tritonclient.grpc.aio`` channel, reused by every request.

:meth:`TritonClient.infer` sends one request's texts (split into ``max_batch_size`` chunks, sent at once,
which Triton's dynamic batcher then batches with other requests) and returns the asked outputs as arrays;
every failure becomes an :class:`~tritongen.gateway.errors.GatewayError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.utils import InferenceServerException

from tritongen.errors import GatewayError
from tritongen.gateway.errors import from_triton
from tritongen.gateway.models import ModelInfo

__all__ = ["TritonClient"]

_NUMPY = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "BOOL": np.bool_}


def _input(name: str, datatype: str, values: Sequence[Any]) -> InferInput:
    """An ``[N, 1]`` input: strings as UTF-8 bytes, numbers as the declared type."""
    if datatype == "BYTES":
        array = np.array([[v.encode("utf-8")] for v in values], dtype=np.object_)
    else:
        array = np.array(values, dtype=_NUMPY[datatype]).reshape(-1, 1)
    tensor = InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


class TritonClient:
    """Async gRPC client of one Triton server; :meth:`close` it when done."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        self.url = url
        self._client = grpcclient.InferenceServerClient(url)
        self._timeout = timeout_s

    async def close(self) -> None:
        """Close the channel."""
        await self._client.close()

    async def ready(self) -> bool:
        """Whether the server answers and is ready."""
        try:
            return bool(await self._client.is_server_ready(client_timeout=5.0))
        except InferenceServerException:
            return False

    async def configs(self) -> tuple[dict[str, Any], dict[str, int]]:
        """Every ready model's config, and its newest ready version (the repository index)."""
        try:
            index = await self._client.get_model_repository_index(client_timeout=self._timeout)
            ready: dict[str, int] = {}
            for entry in index.models:
                if entry.state == "READY":
                    version = int(entry.version) if entry.version.isdigit() else 0
                    ready[entry.name] = max(version, ready.get(entry.name, 0))
            answers = await asyncio.gather(
                *(self._client.get_model_config(name, client_timeout=self._timeout) for name in ready)
            )
        except InferenceServerException as exc:
            raise from_triton("model repository", exc.status(), exc.message()) from None
        return {name: answer.config for name, answer in zip(ready, answers)}, ready

    async def infer(
        self,
        model: ModelInfo,
        inputs: Mapping[str, Sequence[Any]],
        outputs: Sequence[str],
    ) -> dict[str, np.ndarray]:
        """Run ``model`` on ``inputs`` (name -> one value per row); the ``outputs`` as ``[N, ...]`` arrays."""
        rows = len(next(iter(inputs.values())))
        step = model.max_batch_size if model.max_batch_size > 0 else rows
        if rows <= step:  # the common case: awaited directly, no task to schedule
            return await self._infer_chunk(model, inputs, outputs, range(rows))
        chunks = [range(start, min(start + step, rows)) for start in range(0, rows, step)]
        results = await asyncio.gather(*(self._infer_chunk(model, inputs, outputs, c) for c in chunks))
        return {name: np.concatenate([r[name] for r in results]) for name in outputs}

    async def _infer_chunk(
        self, model: ModelInfo, inputs: Mapping[str, Sequence[Any]], outputs: Sequence[str], rows: range
    ) -> dict[str, np.ndarray]:
        whole = len(rows) == len(next(iter(inputs.values())))
        tensors = [
            _input(name, model.inputs[name].datatype, values if whole else values[rows.start : rows.stop])
            for name, values in inputs.items()
        ]
        try:
            result = await self._client.infer(
                model.name, tensors, outputs=[InferRequestedOutput(o) for o in outputs], client_timeout=self._timeout
            )
        except InferenceServerException as exc:
            raise from_triton(model.name, exc.status(), exc.message()) from None
        if result is None:  # tritonclient returns None when the channel was closed under it
            raise GatewayError(
                503, f"`{model.name}`: the gateway is shutting down", type="server_error", code="unavailable"
            )
        return {name: result.as_numpy(name) for name in outputs}
