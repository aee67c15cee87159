"""Publish a deployment's model folders to an S3 model repository that tritonserver serves directly.

Triton reads ``s3://bucket/prefix`` (AWS) and ``s3://http://HOST:PORT/bucket/prefix`` (an explicit endpoint,
e.g. MinIO or a local test server). :func:`publish` uploads the four step folders of one deployment with
boto3 in an order that keeps readers safe:

1. every file of every version folder, the model files first;
2. then each step's ``config.pbtxt``, the ensemble's last;
3. then it lists what landed and compares it with what was sent (count and sizes), and fails if they differ.

A server running with explicit model control (as ``tritongen serve`` does) loads a version only when asked
to, so it never serves a half-uploaded one; a server started while an upload runs may list a version that
is not complete yet, so start or roll servers after :func:`publish` returns. Credentials come from boto3's
usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an instance role).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritongen.errors import RepositoryError

__all__ = ["S3Location", "parse_s3_url", "publish"]

_EXPLICIT = re.compile(r"^s3://(https?://[^/]+)/([^/]+)/?(.*)$")
_PLAIN = re.compile(r"^s3://([^/:]+)/?(.*)$")
_SKIPPED = {"__pycache__"}


@dataclass(frozen=True)
class S3Location:
    """Where a repository lives: an optional explicit endpoint, a bucket and a key prefix (no trailing slash)."""

    endpoint: str | None
    bucket: str
    prefix: str

    def key(self, relative: str) -> str:
        """The object key of ``relative`` (a path inside the repository)."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    @property
    def url(self) -> str:
        """The URL tritonserver's ``--model-repository`` takes."""
        base = f"s3://{self.endpoint}/{self.bucket}" if self.endpoint else f"s3://{self.bucket}"
        return f"{base}/{self.prefix}" if self.prefix else base


def parse_s3_url(url: str) -> S3Location:
    """``s3://bucket/prefix`` or ``s3://http://HOST:PORT/bucket/prefix`` as an :class:`S3Location`."""
    match = _EXPLICIT.match(url)
    if match:
        return S3Location(match.group(1), match.group(2), match.group(3).strip("/"))
    match = _PLAIN.match(url)
    if match and match.group(1):
        return S3Location(None, match.group(1), match.group(2).strip("/"))
    raise RepositoryError(
        f"`{url}` is not an S3 repository URL; use s3://bucket/prefix or s3://http://HOST:PORT/bucket/prefix"
    )


def _client(location: S3Location) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=location.endpoint) if location.endpoint else boto3.client("s3")


def _order(folder: Path, relative_to: Path) -> Iterator[Path]:
    """Files of ``folder``'s version folders (model files before small ones), without caches."""
    for version in sorted(p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()):
        files = [p for p in version.rglob("*") if p.is_file() and not _SKIPPED & set(p.relative_to(folder).parts)]
        yield from sorted(files, key=lambda p: (-p.stat().st_size, str(p)))


def publish(
    repository: Path,
    folders: list[str],
    to: str,
    *,
    client: Any = None,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Upload ``folders`` (step folders of one deployment, the ensemble last) of ``repository`` to ``to``.

    Returns the uploaded keys. Raises :class:`RepositoryError` naming the folder, the object or the cause.
    """
    location = parse_s3_url(to)
    missing = [name for name in folders if not (repository / name / "config.pbtxt").is_file()]
    if missing:
        raise RepositoryError(
            f"{', '.join(missing)} not built in {{path}}; build the deployment first", path=repository
        )
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = client or _client(location)
    plan = [path for name in folders for path in _order(repository / name, repository)]
    plan += [repository / name / "config.pbtxt" for name in folders]
    sent: dict[str, int] = {}
    try:
        s3.head_bucket(Bucket=location.bucket)
        for index, path in enumerate(plan, 1):
            relative = path.relative_to(repository).as_posix()
            s3.upload_file(str(path), location.bucket, location.key(relative))
            sent[location.key(relative)] = path.stat().st_size
            if progress:
                progress(f"[{index}/{len(plan)}] {relative}")
        landed = _listing(s3, location, folders)
    except (BotoCoreError, ClientError) as exc:
        raise RepositoryError(f"publishing to {location.url} failed: {_reason(exc)}") from None
    wrong = sorted(key for key, size in sent.items() if landed.get(key) != size)
    if wrong:
        raise RepositoryError(f"{len(wrong)} objects did not land as sent in {location.url}, e.g. `{wrong[0]}`")
    return list(sent)


def _listing(s3: Any, location: S3Location, folders: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    paginator = s3.get_paginator("list_objects_v2")
    for name in folders:
        for page in paginator.paginate(Bucket=location.bucket, Prefix=location.key(name) + "/"):
            sizes.update({item["Key"]: item["Size"] for item in page.get("Contents", [])})
    return sizes


def _reason(exc: Exception) -> str:
    error = getattr(exc, "response", {}).get("Error", {})
    if error:
        return f"{error.get('Code')}: {error.get('Message') or 'no message'}"
    return str(exc).splitlines()[0]
