"""Model repositories on S3: publish with boto3 to moto's local S3 server, then serve straight from the URL."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from tritongen.bench.process import http_process
from tritongen.deploy.s3 import S3Location, parse_s3_url, publish
from tritongen.errors import RepositoryError
from tritongen.repository.contents import served_steps, step_names
from tritongen.serve.client import infer
from tritongen.serve.server import running_server

TEXTS = ["I love this movie", "Zoë’s café in São Paulo 🎉", "word " * 300]


def test_parse_s3_url_takes_both_forms_and_refuses_others():
    assert parse_s3_url("s3://bucket/a/b/") == S3Location(None, "bucket", "a/b")
    explicit = parse_s3_url("s3://http://127.0.0.1:9000/bucket/models")
    assert explicit == S3Location("http://127.0.0.1:9000", "bucket", "models")
    assert explicit.url == "s3://http://127.0.0.1:9000/bucket/models"
    assert parse_s3_url("s3://bucket").key("m/config.pbtxt") == "m/config.pbtxt"
    for bad in ("gs://bucket/x", "s3://", "/local/path"):
        with pytest.raises(RepositoryError, match="not an S3 repository URL"):
            parse_s3_url(bad)


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """moto's S3 server on a free local port, with fake credentials in the environment."""
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    log = tmp_path_factory.mktemp("moto") / "moto.log"

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]

    try:
        with http_process(command, log, what="moto's S3 server", env=os.environ, timeout=60, ready="/") as url:
            yield f"http://{url}"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.e2e
def test_published_repository_serves_from_s3_with_the_local_outputs(tiny_factory, builds, shared_server, s3_endpoint):
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="models")
    built = builds(tiny_factory("bert"), "cls")
    repo = built.repository
    names = step_names("cls")
    folders = [names[step] for step in (*served_steps(repo, "cls"), "ensemble")]
    assert len(folders) == 4
    url = f"s3://{s3_endpoint}/models/prod"
    keys = publish(repo, folders, url)
    # model files before configs, and the ensemble's config last of all
    assert keys[-1] == "prod/cls/config.pbtxt"
    assert max(i for i, k in enumerate(keys) if k.endswith("model.onnx")) < keys.index("prod/cls_model/config.pbtxt")
    assert not any("__pycache__" in k for k in keys)
    want = infer(TEXTS, name="cls", url=shared_server.serve(built).grpc_url)
    with running_server(url) as remote:
        got = infer(TEXTS, name="cls", url=remote.grpc_url)
    for a, b in zip(want, got, strict=True):
        assert a["LABEL"] == b["LABEL"]
        np.testing.assert_allclose(a["PROBABILITIES"], b["PROBABILITIES"], atol=1e-6)


def test_publish_refuses_a_missing_deployment_or_bucket(tiny_factory, tmp_path, s3_endpoint):
    with pytest.raises(RepositoryError, match="not built"):
        publish(tmp_path, ["nothing"], f"s3://{s3_endpoint}/models/x")
    repo = tmp_path / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('name: "m"')
    with pytest.raises(RepositoryError, match=r"publishing to .* failed"):
        publish(repo, ["m"], f"s3://{s3_endpoint}/no-such-bucket/x")
