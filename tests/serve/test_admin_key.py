"""The admin key's sources and file, Triton's restricted-API options, and the canary comparison (no server)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tritongen.errors import ServerError
from tritongen.repository.canary import Canary, compare
from tritongen.serve import admin


@pytest.fixture(autouse=True)
def _no_key_in_env(monkeypatch):
    monkeypatch.delenv(admin.ENV, raising=False)


def test_serving_key_writes_a_fresh_0600_file_beside_the_repository_when_no_key_is_given(tmp_path):
    repo = tmp_path / "model_repository"
    key, path = admin.serving_key(repo)
    assert path == tmp_path / ".model_repository.admin-key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == key and len(key) >= 32
    again, _ = admin.serving_key(repo)
    assert again != key  # each start gets a new key
    assert admin.read_key(repo) == again


def test_serving_key_keeps_a_0644_file_private_when_it_rewrites_it(tmp_path):
    path = admin.default_key_file(tmp_path / "repo")
    path.write_text("old\n")
    path.chmod(0o644)
    admin.serving_key(tmp_path / "repo")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_key_comes_from_the_file_given_then_the_environment_then_the_default_file(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    given = tmp_path / "given"
    given.write_text("from-file\n")
    monkeypatch.setenv(admin.ENV, "from-env")
    assert admin.read_key(repo, given) == "from-file"
    assert admin.read_key(repo) == "from-env"
    assert admin.serving_key(repo) == ("from-env", None)
    assert admin.serving_key(repo, given) == ("from-file", None)
    monkeypatch.delenv(admin.ENV)
    with pytest.raises(ServerError, match="no admin key"):
        admin.read_key(repo)


def test_restricted_args_use_tritons_syntax_and_the_grpc_header_prefix():
    http, grpc = admin.restricted_args("abc")
    assert http == "--http-restricted-api=model-repository,shared-memory,trace,logging:tritongen-admin-key=abc"
    assert grpc == "--grpc-restricted-protocol=model-repository,shared-memory,trace,logging:tritongen-admin-key=abc"
    assert admin.grpc_headers("abc") == {"triton-grpc-protocol-tritongen-admin-key": "abc"}


def test_admin_client_adds_the_headers_to_every_call():
    class Client:
        def unload_model(self, name, headers=None):
            return name, headers

    client = admin.AdminClient(Client(), {"h": "k"})
    assert client.unload_model("m") == ("m", {"h": "k"})


def _canary(values, lengths=(2, 1)) -> Canary:
    return Canary({"TEXT": ["a", "b"]}, "logits", np.asarray(values, np.float32), lengths, 1e-4)


def test_canary_compare_accepts_tolerance_and_ignores_padding_tokens():
    per_token = _canary([[[1.0], [2.0], [0.0]], [[3.0], [9.0], [9.0]]])
    served = np.array([[[1.00005], [2.0], [7.0]], [[3.0], [0.0], [0.0]]], np.float32)
    assert compare(per_token, served) is None


def test_canary_compare_names_the_difference_when_outputs_differ():
    canary = _canary([[0.1, 0.9], [0.5, 0.5]])
    assert "differs from the build's by up to 1.00e-01" in compare(canary, np.array([[0.2, 0.9], [0.5, 0.5]]))
    assert "shape" in compare(canary, np.zeros((2, 3), np.float32))
    assert compare(canary, np.array([[np.nan, 0.9], [0.5, 0.5]])) is not None


def test_default_key_file_of_the_default_repository_is_ignored_by_git():
    """`make serve` with the default REPO writes the key inside the checkout: git must never pick it up."""
    root = Path(__file__).resolve().parents[2]
    key_file = admin.default_key_file(root / "model_repository")
    assert key_file.parent == root
    ignored = subprocess.run(["git", "check-ignore", "-q", str(key_file)], cwd=root, check=False)
    assert ignored.returncode == 0, f"{key_file.name} is not ignored by .gitignore"
