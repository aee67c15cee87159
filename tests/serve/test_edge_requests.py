"""Malformed requests at the edge: every ensemble kind answers a client error, over both protocols, and keeps serving.

One repository holds one ensemble per kind (classification, text pair, embedding, NER, QA), built from tiny
checkpoints. Each malformed request (wrong datatype, wrong shape, a batch over ``max_batch_size``, a missing
input, an unexpected input) must get gRPC ``INVALID_ARGUMENT`` or HTTP 400, with a message that names the
problem, and a good request sent right after must still be answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.tiny_ner import make_token_classifier
from tests.tiny_variants import make_pair_classifier
from tritongen.contract import carried_by_text_requests

pytestmark = pytest.mark.e2e

QA_ASSETS = Path(__file__).parents[1] / "assets" / "qa"
KINDS = ("classification", "pair", "embedding", "ner", "qa")
NAMES = {kind: f"edge_{kind}" for kind in KINDS}  # the ensembles, on the session's shared server
PROTOCOLS = ("grpc", "http")


@pytest.fixture(scope="module")
def served(builds, shared_server, checkpoint_cache, tiny_factory):
    sources = {
        "classification": tiny_factory("bert", "classification"),
        "pair": checkpoint_cache(make_pair_classifier, "bert"),
        "embedding": tiny_factory("bert", "embedding"),
        "ner": checkpoint_cache(make_token_classifier, "bert", seed=1),
        "qa": QA_ASSETS / "bert",
    }
    return shared_server.serve(*(builds(path, NAMES[kind], max_batch_size=4) for kind, path in sources.items()))


def _client(server, protocol: str):
    if protocol == "grpc":
        return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient, httpclient.InferenceServerClient(server.http_url)


def _inputs(module, config: dict, *, rows: int = 1, datatype: str | None = None, extra_dim: bool = False,
            drop: str | None = None, extra: str | None = None) -> list:  # fmt: skip
    """One ``BYTES`` tensor per text input of the ensemble (``rows`` texts, shape ``[rows, 1]``), bent as asked."""
    made = []
    texts = [i["name"] for i in config["input"] if carried_by_text_requests(i["name"], bool(i.get("optional")))]
    names = [name for name in texts if name != drop] + ([extra] if extra else [])
    for name in names:
        values = np.array([b"Bob lives in Berlin."] * rows, dtype=object).reshape(rows, 1)
        if extra_dim:
            values = values.reshape(rows, 1, 1)
        kind = datatype or "BYTES"
        if kind != "BYTES":
            values = np.ones(values.shape, dtype=np.int32)
        tensor = module.InferInput(name, list(values.shape), kind)
        tensor.set_data_from_numpy(values)
        made.append(tensor)
    return made


def _config(server, kind: str) -> dict:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        return client.get_model_config(kind)
    finally:
        client.close()


BAD: dict[str, tuple[Callable[[dict], dict], str]] = {
    "wrong datatype": (lambda config: {"datatype": "INT32"}, r"(?i)data-?type"),
    "wrong shape": (lambda config: {"extra_dim": True}, r"(?i)shape|dims"),
    # Whole-request ensembles (NER, QA: max_batch_size 0) batch windows inside; the model step's limit holds.
    "batch over max_batch_size": (lambda config: {"rows": config["limit"] + 1}, r"(?i)batch.?size|windows"),
    "missing input": (lambda config: {"drop": config["input"][0]["name"]}, r"(?i)expected \d+ inputs|missing|input"),
    "unexpected input": (lambda config: {"extra": "SURPRISE"}, r"(?i)unexpected|SURPRISE"),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", KINDS)
def test_malformed_requests_get_client_errors_and_the_server_keeps_serving(served, kind, protocol):
    name = NAMES[kind]
    config = _config(served, name)
    config["limit"] = config["max_batch_size"] or _config(served, f"{name}_model")["max_batch_size"]
    assert config["limit"] == 4
    module, client = _client(served, protocol)
    try:
        for problem, (bend, pattern) in BAD.items():
            with pytest.raises(InferenceServerException) as caught:
                client.infer(name, _inputs(module, config, **bend(config)))
            error = caught.value
            if protocol == "grpc":
                assert error.status() == "StatusCode.INVALID_ARGUMENT", (problem, error.status(), error.message())
            else:
                assert error.status() == "400", (problem, error.status(), error.message())
            assert error.message() and "\n" not in error.message().strip(), (problem, error.message())
            assert re.search(pattern, error.message()), (problem, error.message())
            good = client.infer(name, _inputs(module, config))  # still serving, right after
            assert good.get_response() is not None, problem
    finally:
        client.close()
