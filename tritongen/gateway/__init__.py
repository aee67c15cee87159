"""A thin gateway in front of the Triton ensembles: the OpenAI, TEI, vLLM and Cohere APIs.

Triton's own OpenAI-compatible frontend serves embeddings only from vLLM models; retrieval frameworks and
clients call embedding servers through OpenAI's ``/v1/embeddings``, TEI's ``/embed``, ``/rerank``, ``/predict``
and friends, vLLM's ``/score`` and ``/classify``, and Cohere's ``/v2/embed`` and ``/v2/rerank``. This gateway
speaks those and forwards to the ensembles (inference to Triton's HTTP port, the rest over gRPC):

- :mod:`~tritongen.gateway.app`: the ASGI app, one family of routes per module
  (:mod:`~tritongen.gateway.openai`, :mod:`~tritongen.gateway.tei`, :mod:`~tritongen.gateway.tei_info`,
  :mod:`~tritongen.gateway.vllm`, :mod:`~tritongen.gateway.cohere`) over :mod:`~tritongen.gateway.core`;
- :mod:`~tritongen.gateway.schemas`: the request bodies, parsed and checked; :mod:`~tritongen.gateway.tokens`:
  token ids in and out with the build's tokenizer;
- :mod:`~tritongen.gateway.models`: which ensemble serves which route, from Triton's model configs;
- :mod:`~tritongen.gateway.discovery`: which ensembles to ask Triton about, and the admin key where that needs it;
- :mod:`~tritongen.gateway.triton`: the client of Triton, with :mod:`~tritongen.gateway.kserve_http` its inference path;
- :mod:`~tritongen.gateway.errors` and :mod:`~tritongen.gateway.auth`: each API's error shape, the API key.
"""

from tritongen.gateway.app import GatewayOptions, create_app
from tritongen.gateway.auth import KEY_ENV, read_api_key
from tritongen.gateway.serve import run_gateway

__all__ = ["KEY_ENV", "GatewayOptions", "create_app", "read_api_key", "run_gateway"]
