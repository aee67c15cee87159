"""A thin gateway in front of the Triton ensembles: the OpenAI and Text Embeddings Inference APIs over gRPC.

Triton's own OpenAI-compatible frontend serves embeddings only from vLLM models; retrieval frameworks call
embedding servers through OpenAI's ``/v1/embeddings`` and TEI's ``/embed``, ``/rerank``, ``/predict`` and
``/tokenize``. This gateway speaks those and forwards to the ensembles over one gRPC channel:

- :mod:`~tritongen.gateway.app`: the routes (Starlette) and :func:`run_gateway`'s ASGI app;
- :mod:`~tritongen.gateway.schemas`: the request bodies, parsed and checked;
- :mod:`~tritongen.gateway.models`: which ensemble serves which route, from Triton's model configs;
- :mod:`~tritongen.gateway.discovery`: which ensembles to ask Triton about, and the admin key where that needs it;
- :mod:`~tritongen.gateway.triton`: the async gRPC client;
- :mod:`~tritongen.gateway.errors` and :mod:`~tritongen.gateway.auth`: OpenAI-format errors, the API key.
"""

from tritongen.gateway.app import GatewayOptions, create_app
from tritongen.gateway.auth import KEY_ENV, read_api_key
from tritongen.gateway.serve import run_gateway

__all__ = ["KEY_ENV", "GatewayOptions", "create_app", "read_api_key", "run_gateway"]
