"""Query a served ensemble over gRPC or HTTP with tritonclient."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tritongen.contract import TEXT
from tritongen.errors import ServerError

__all__ = ["infer", "make_client"]


def _module(protocol: str) -> Any:
    if protocol == "grpc":
        import tritonclient.grpc as module
    elif protocol == "http":
        import tritonclient.http as module
    else:
        raise ServerError(f"protocol `{protocol}` is not supported; use grpc or http")
    return module


def make_client(url: str, protocol: str = "grpc") -> Any:
    """A tritonclient ``InferenceServerClient`` for ``url`` (``host:port``)."""
    return _module(protocol).InferenceServerClient(url)


def _text_input(module: Any, name: str, texts: Sequence[str | bytes]) -> Any:
    data = np.array([[t.encode("utf-8") if isinstance(t, str) else t] for t in texts], dtype=np.object_)
    tensor = module.InferInput(name, list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    return tensor


def infer(
    texts: Sequence[str | bytes],
    *,
    name: str,
    url: str = "127.0.0.1:8001",
    protocol: str = "grpc",
    inputs: dict[str, Sequence[str | bytes]] | None = None,
    text_input: str = TEXT,
) -> list[dict[str, Any]]:
    """Send ``texts`` (as ``text_input``, plus any extra string ``inputs``) in one request.

    Returns one dict per text, mapping each ensemble output to a Python value. For question
    answering, send the questions as ``QUESTION`` and ``inputs={"CONTEXT": contexts}``.
    """
    module = _module(protocol)
    client = module.InferenceServerClient(url)
    try:
        metadata = client.get_model_metadata(name)
        outputs = [
            o["name"] if isinstance(o, dict) else o.name
            for o in (metadata["outputs"] if isinstance(metadata, dict) else metadata.outputs)
        ]
        tensors = [_text_input(module, text_input, texts)]
        tensors += [_text_input(module, key, values) for key, values in (inputs or {}).items()]
        result = client.infer(name, tensors, outputs=[module.InferRequestedOutput(o) for o in outputs])
    except Exception as exc:  # tritonclient raises InferenceServerException and transport errors
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServerError(f"inference on `{name}` at {url} ({protocol}) failed: {message}") from None
    finally:
        client.close()
    arrays = {o: result.as_numpy(o) for o in outputs}
    rows = []
    for i in range(len(texts)):
        row: dict[str, Any] = {}
        for key, array in arrays.items():
            value = array[i]
            if value.dtype == np.object_:
                row[key] = value.reshape(-1)[0].decode("utf-8")
            elif value.dtype == np.bool_:
                row[key] = bool(value.reshape(-1)[0])
            elif value.size == 1:
                item = value.reshape(-1)[0]
                row[key] = int(item) if np.issubdtype(value.dtype, np.integer) else float(item)
            else:
                row[key] = value.astype(float).tolist()
        rows.append(row)
    return rows
