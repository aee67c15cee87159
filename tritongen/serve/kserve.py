"""KServe v2 HTTP bodies with the binary tensor extension, read: a JSON header naming the tensors, then their parts.

The header is the body's first ``Inference-Header-Content-Length`` bytes (the whole body when the header is
absent). Each tensor it lists under ``inputs`` (a request) or ``outputs`` (an answer) carries its values either
as JSON ``data`` or, with ``parameters.binary_data_size``, as the next raw part after the header, in order:
little-endian numbers, or BYTES as 4-byte little-endian lengths each followed by the bytes. The gateway reads
Triton's answers with it and the bench's FastAPI baseline its requests.
"""

from __future__ import annotations

import json

import numpy as np
from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

__all__ = ["read_tensors"]


def read_tensors(body: bytes, header_length: int | None, key: str) -> dict[str, np.ndarray]:
    """The tensors the header lists under ``key`` (``inputs``, ``outputs``), by name, in their declared shapes.

    Numbers come as their datatype, BYTES as bytes (or as the JSON's strings); a malformed body raises
    ValueError, KeyError or TypeError.
    """
    split = len(body) if header_length is None else header_length
    arrays, offset = {}, split
    for tensor in json.loads(body[:split])[key]:
        datatype, shape = tensor["datatype"], tuple(tensor["shape"])
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is None:
            flat = np.array(tensor["data"], dtype=np.object_ if datatype == "BYTES" else triton_to_np_dtype(datatype))
        else:
            raw, offset = body[offset : offset + size], offset + size
            if datatype == "BYTES":
                flat = deserialize_bytes_tensor(raw)
            else:
                flat = np.frombuffer(raw, triton_to_np_dtype(datatype))
        arrays[tensor["name"]] = flat.reshape(shape)
    return arrays
