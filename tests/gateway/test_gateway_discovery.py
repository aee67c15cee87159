"""How the gateway finds the served ensembles behind ``tritongen serve``, with fakes of Triton's gRPC API.

``serve`` restricts Triton's repository index to the admin key; model config and metadata stay open. The
end-to-end proof against a real ``serve`` is in tests/gateway/test_gateway.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from tritongen.errors import GatewayError
from tritongen.gateway.app import Gateway, GatewayOptions
from tritongen.gateway.discovery import served_names
from tritongen.gateway.models import Catalogue
from tritongen.gateway.triton import TritonClient
from tritongen.serve.admin import ENV, default_key_file, grpc_headers

RESTRICTED = "This protocol is restricted, expecting header 'triton-grpc-protocol-tritongen-admin-key'"


def _ensemble(name: str, steps: tuple[str, ...] = ()) -> mc.ModelConfig:
    return mc.ModelConfig(
        name=name,
        platform="ensemble",
        max_batch_size=64,
        input=[mc.ModelInput(name="TEXT", data_type=mc.TYPE_STRING, dims=[1])],
        output=[mc.ModelOutput(name="EMBEDDING", data_type=mc.TYPE_FP32, dims=[32])],
        ensemble_scheduling=mc.ModelEnsembling(step=[mc.ModelEnsembling.Step(model_name=s) for s in steps]),
    )


class FakeGrpc:
    """The parts of ``tritonclient.grpc.aio.InferenceServerClient`` the gateway reads; the index needs ``key``."""

    def __init__(self, models: dict[str, tuple[mc.ModelConfig, list[str]]], key: str = "the-key") -> None:
        self.models, self.key = models, key
        self.asked: list[str] = []

    async def get_model_repository_index(self, headers=None, client_timeout=None):
        if headers != grpc_headers(self.key):
            raise InferenceServerException(RESTRICTED, status="StatusCode.UNAVAILABLE")
        return SimpleNamespace(models=[SimpleNamespace(name=n, state="READY") for n in self.models])

    def _get(self, name: str):
        self.asked.append(name)
        if name not in self.models:
            raise InferenceServerException(f"Request for unknown model: '{name}' is not found", "StatusCode.NOT_FOUND")
        return self.models[name]

    async def get_model_config(self, name, client_timeout=None):
        return SimpleNamespace(config=self._get(name)[0])

    async def get_model_metadata(self, name, client_timeout=None):
        return SimpleNamespace(versions=self._get(name)[1])

    async def is_server_ready(self, client_timeout=None):
        return True

    async def is_server_live(self, client_timeout=None):
        return True

    url = "triton:8000"  # as the HTTP inference path, Triton's HTTP port

    async def ready(self):
        return True


def _client(fake: FakeGrpc) -> TritonClient:
    client = object.__new__(TritonClient)  # no channel: the fake answers
    client.url, client._client, client._timeout = "triton:8001", fake, 1.0
    client._inference = fake  # a fake that answers inference too (tests/gateway/test_gateway_routes.py) stands for HTTP
    return client


SERVED = {
    "emb": (_ensemble("emb", ("emb_tokenizer", "emb_model")), ["1"]),
    "emb_tokenizer": (mc.ModelConfig(name="emb_tokenizer", backend="python"), ["1", "3"]),
    "emb_model": (mc.ModelConfig(name="emb_model", platform="onnxruntime_onnx"), ["2"]),
}


@pytest.fixture(autouse=True)
def _no_key_in_environment(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_served_names_reads_the_local_folder_and_not_the_index_when_repository_is_here(tmp_path):
    for name, config in (("emb", 'platform: "ensemble"'), ("emb_model", 'backend: "onnxruntime"')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}\n')
    fake = FakeGrpc(SERVED, key="never-sent")
    assert asyncio.run(served_names(_client(fake), tmp_path, None)) == ["emb"]


def test_served_names_sends_the_key_serve_wrote_when_repository_is_not_here(tmp_path):
    repository = tmp_path / "model_repository"  # served from another machine: no such folder here
    default_key_file(repository).write_text("the-key\n")
    names = asyncio.run(served_names(_client(FakeGrpc(SERVED)), repository, None))
    assert names == ["emb", "emb_model", "emb_tokenizer"]


def test_served_names_takes_the_key_from_file_or_environment_when_given(tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    key_file.write_text("the-key")
    assert asyncio.run(served_names(_client(FakeGrpc(SERVED)), "s3://bucket/repo", key_file))
    monkeypatch.setenv(ENV, "the-key")
    assert asyncio.run(served_names(_client(FakeGrpc(SERVED)), None, None))


def test_served_names_refuses_with_503_naming_the_key_when_none_is_found(tmp_path):
    with pytest.raises(GatewayError) as caught:
        asyncio.run(served_names(_client(FakeGrpc(SERVED)), tmp_path / "model_repository", None))
    assert caught.value.status == 503 and "needs the admin key" in caught.value.message
    assert ".model_repository.admin-key" in caught.value.message and ENV in caught.value.message


def test_served_names_says_the_key_was_refused_when_it_is_wrong(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "an-old-key")
    with pytest.raises(GatewayError, match="Triton refused the admin key") as caught:
        asyncio.run(served_names(_client(FakeGrpc(SERVED)), tmp_path / "model_repository", None))
    assert caught.value.status == 503


def test_served_names_says_the_key_was_refused_whatever_tritons_wording_when_triton_answers(tmp_path, monkeypatch):
    class Reworded(FakeGrpc):
        async def get_model_repository_index(self, headers=None, client_timeout=None):
            raise InferenceServerException("admin key expected", status="StatusCode.UNAVAILABLE")

    monkeypatch.setenv(ENV, "the-key")
    with pytest.raises(GatewayError, match="Triton refused the admin key"):
        asyncio.run(served_names(_client(Reworded(SERVED)), tmp_path / "model_repository", None))


def test_served_names_says_triton_is_unreachable_and_not_the_key_refused_when_triton_does_not_answer(
    tmp_path, monkeypatch
):
    refused = InferenceServerException("failed to connect to all addresses", status="StatusCode.UNAVAILABLE")

    class Down(FakeGrpc):
        async def get_model_repository_index(self, headers=None, client_timeout=None):
            raise refused

        async def is_server_live(self, client_timeout=None):
            raise refused

    monkeypatch.setenv(ENV, "the-key")
    with pytest.raises(GatewayError, match="not reachable") as caught:
        asyncio.run(served_names(_client(Down(SERVED)), tmp_path / "model_repository", None))
    assert caught.value.status == 503 and "admin key" not in caught.value.message


def test_configs_reads_named_ensembles_and_steps_and_skips_unknown_when_asked():
    fake = FakeGrpc(SERVED)
    configs, versions = asyncio.run(_client(fake).configs(["emb", "gone"]))
    assert sorted(configs) == ["emb", "emb_model", "emb_tokenizer"]
    assert versions == {"emb": 1, "emb_tokenizer": 3, "emb_model": 2}  # the newest ready version


def test_configs_fail_with_503_when_triton_is_unreachable():
    class Down(FakeGrpc):
        async def get_model_config(self, name, client_timeout=None):
            raise InferenceServerException("failed to connect to all addresses", status="StatusCode.UNAVAILABLE")

    with pytest.raises(GatewayError, match="not reachable") as caught:
        asyncio.run(_client(Down(SERVED)).configs(["emb"]))
    assert caught.value.status == 503


def _catalogue(fake: FakeGrpc, default: str | None = None) -> Catalogue:
    client = _client(fake)
    return Catalogue(lambda: served_names(client, None, None), client.configs, None, default)


def test_catalogue_serves_the_default_when_ensembles_cannot_be_listed():
    catalogue = _catalogue(FakeGrpc(SERVED), default="emb")
    asyncio.run(catalogue.refresh())
    assert list(catalogue.models) == ["emb"] and "needs the admin key" in (catalogue.problem or "")


def test_catalogue_looks_up_a_named_ensemble_when_ensembles_cannot_be_listed():
    catalogue = _catalogue(FakeGrpc(SERVED))
    with pytest.raises(GatewayError, match="needs the admin key"):
        asyncio.run(catalogue.refresh())
    model = asyncio.run(catalogue.resolve("emb", "embeddings", "/v1/embeddings"))
    assert model.name == "emb" and list(catalogue.models) == ["emb"]
    with pytest.raises(GatewayError, match="`gone` does not exist"):
        asyncio.run(catalogue.resolve("gone", "embeddings", "/v1/embeddings"))


def _health(fake: FakeGrpc, **options) -> tuple[int, str]:
    gateway = Gateway(GatewayOptions(**options))
    gateway.client = _client(fake)
    try:
        asyncio.run(gateway.health(None))  # type: ignore[arg-type]
    except GatewayError as exc:
        return exc.status, exc.message
    return 200, "ok"


def test_health_is_503_with_the_reason_when_the_admin_key_is_missing(tmp_path):
    status, message = _health(FakeGrpc(SERVED), repository=tmp_path / "model_repository")
    assert status == 503 and "needs the admin key" in message


def test_health_is_503_when_triton_serves_none_of_the_folders_ensembles(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.pbtxt").write_text('name: "other"\nplatform: "ensemble"\n')
    status, message = _health(FakeGrpc(SERVED), repository=tmp_path)
    assert status == 503 and message == f"the Triton server at triton:8001 serves none of the ensembles of {tmp_path}"


def test_health_is_503_when_triton_is_not_ready(tmp_path):
    class NotReady(FakeGrpc):
        async def is_server_ready(self, client_timeout=None):
            return False

    status, message = _health(NotReady(SERVED), repository=tmp_path)
    assert status == 503 and message == "the Triton server at triton:8001 is not ready"


def test_health_is_503_naming_the_option_when_tritons_http_port_does_not_answer(tmp_path):
    class NoHttp(FakeGrpc):
        async def ready(self):
            return False

    status, message = _health(NoHttp(SERVED), repository=tmp_path)
    assert status == 503 and "HTTP port at triton:8000" in message and "--triton-http-url" in message


def test_health_is_ok_when_the_key_file_is_given(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("the-key")
    assert _health(FakeGrpc(SERVED), repository="s3://bucket/repo", admin_key_file=key_file) == (200, "ok")


def test_health_is_503_when_the_given_key_file_is_missing(tmp_path):
    status, message = _health(FakeGrpc(SERVED), repository="s3://b/r", admin_key_file=tmp_path / "none")
    assert status == 503 and "cannot read the admin key" in message
