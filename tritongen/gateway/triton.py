"""The Triton side of the gateway: connections opened once, reused by every request.

:meth:`TritonClient.infer` sends one request's texts (split into ``max_batch_size`` chunks, sent at once,
which Triton's dynamic batcher then batches with other requests) and returns the asked outputs as arrays;
every failure becomes an :class:`~tritongen.gateway.errors.GatewayError`. Inference, the request path, goes
to Triton's HTTP port on the gateway's event loop (:mod:`tritongen.gateway.kserve_http` says why); the rest, off
it, through ``tritonclient.grpc.aio``: :meth:`TritonClient.configs` reads the served ensembles' configs through
the open model config and metadata APIs, and only :meth:`TritonClient.model_index` needs the admin key
(:mod:`tritongen.gateway.discovery` says when).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from tritongen.gateway.errors import from_triton
from tritongen.gateway.kserve_http import HttpInference, WireTensor
from tritongen.gateway.models import ModelInfo

__all__ = ["TritonClient", "stack_rows"]


def stack_rows(chunks: Sequence[np.ndarray]) -> np.ndarray:
    """The chunks' rows as one array; variable-width rows (sparse outputs) padded as the ensembles pad them.

    The sparse contract pads a request's rows with index -1 and value 0, so each chunk is as wide as its
    widest row; the narrower chunks are padded the same way (-1 for integers, 0 for floats).
    """
    width = max(chunk.shape[1:] for chunk in chunks)
    if all(chunk.shape[1:] == width for chunk in chunks) or len(width) != 1:
        return np.concatenate(chunks)
    fill = -1 if np.issubdtype(chunks[0].dtype, np.integer) else 0
    padded = [np.pad(c, ((0, 0), (0, width[0] - c.shape[1])), constant_values=fill) for c in chunks]
    return np.concatenate(padded)


class TritonClient:
    """Client of one Triton server, at its gRPC (``url``) and HTTP (``http_url``) ports; :meth:`close` it when done."""

    def __init__(self, url: str, http_url: str, timeout_s: float = 60.0) -> None:
        self.url = url
        self._client = grpcclient.InferenceServerClient(url)
        self._inference = HttpInference(http_url, timeout_s)
        self._timeout = timeout_s

    async def close(self) -> None:
        """Close the connections."""
        await self._inference.close()
        await self._client.close()

    async def ready(self) -> bool:
        """Whether the server answers and is ready."""
        try:
            return bool(await self._client.is_server_ready(client_timeout=5.0))
        except InferenceServerException:
            return False

    async def http_ready(self) -> bool:
        """Whether Triton's HTTP port, which inference goes to, answers ready."""
        return await self._inference.ready()

    @property
    def http_url(self) -> str:
        """Triton's HTTP ``host:port``."""
        return self._inference.url

    async def live(self) -> bool:
        """Whether the server answers, ready or not."""
        try:
            return bool(await self._client.is_server_live(client_timeout=5.0))
        except InferenceServerException:
            return False

    async def model_index(self, headers: Mapping[str, str]) -> list[str]:
        """The ready models' names, from the repository index: ``serve`` restricts it to the admin key (``headers``)."""
        try:
            index = await self._client.get_model_repository_index(headers=dict(headers), client_timeout=self._timeout)
        except InferenceServerException as exc:
            raise from_triton("model repository", exc.status(), exc.message()) from None
        return sorted({entry.name for entry in index.models if entry.state == "READY"})

    async def configs(self, names: Iterable[str]) -> tuple[dict[str, Any], dict[str, int]]:
        """The config and newest ready version of each of ``names`` that Triton serves, and of its steps.

        Model config and metadata are open APIs, unlike the repository index. A name Triton does not
        serve (never loaded, unloaded, failed to load) is left out; an ensemble's steps are read with it.
        """
        configs: dict[str, Any] = {}
        versions: dict[str, int] = {}
        asked: set[str] = set()
        pending = sorted(set(names))
        while pending:
            asked.update(pending)
            answers = await asyncio.gather(*(self._model(name) for name in pending))
            found = {name: answer for name, answer in zip(pending, answers, strict=True) if answer is not None}
            for name, (config, version) in found.items():
                configs[name], versions[name] = config, version
            steps = {step.model_name for config, _ in found.values() for step in config.ensemble_scheduling.step}
            pending = sorted(steps - asked)
        return configs, versions

    async def _model(self, name: str) -> tuple[Any, int] | None:
        """``name``'s config and newest ready version, or None when Triton does not serve it."""
        try:
            config, metadata = await asyncio.gather(
                self._client.get_model_config(name, client_timeout=self._timeout),
                self._client.get_model_metadata(name, client_timeout=self._timeout),
            )
        except InferenceServerException as exc:
            error = from_triton(name, exc.status(), exc.message())
            if error.code == "model_not_found":
                return None
            raise error from None
        return config.config, max((int(v) for v in metadata.versions if v.isdigit()), default=0)

    async def infer(
        self,
        model: ModelInfo,
        inputs: Mapping[str, Sequence[Any]],
        outputs: Sequence[str],
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, np.ndarray]:
        """One Triton call of ``model`` on ``inputs`` (name -> one value per row, at most its ``max_batch_size``).

        The ``outputs`` come back as ``[N, ...]`` arrays; ``headers`` go with the call (the trace context). Token-id
        rows go as one matrix padded to the longest.
        """
        tensors = []
        for name, values in inputs.items():
            matrix = bool(values) and isinstance(values[0], list)  # rows of numbers (token ids), padded to one width
            make = WireTensor.padded if matrix else WireTensor.column
            tensors.append(make(name, model.inputs[name].datatype, values))
        return await self._inference.post(model.name, tensors, outputs, headers)

    async def infer_step(
        self, step: str, arrays: Mapping[str, np.ndarray], output: str, headers: Mapping[str, str] | None = None
    ) -> np.ndarray:
        """One call of an ensemble's model step on its input ``arrays`` (:mod:`tritongen.gateway.direct`)."""
        tensors = [WireTensor.array(name, array) for name, array in arrays.items()]
        return (await self._inference.post(step, tensors, [output], headers))[output]
