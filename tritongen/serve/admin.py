"""The admin key: only its holders may load, unload or reconfigure served models.

Explicit model control opens Triton's repository API to every client. ``serve`` restricts it,
and the other admin APIs (:data:`RESTRICTED`), with Triton's restricted-API options: a request
to them must carry the header :data:`HEADER` with the key (gRPC clients send it as the metadata
``triton-grpc-protocol-<header>``). Inference, health, metadata, model config and statistics
stay open. The key comes from the file named by ``--admin-key-file``, else from the environment
variable :data:`ENV`, else from the 0600 file next to the repository that ``serve`` writes
(:func:`default_key_file`) -- never from a command line of ours.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritongen.errors import ServerError

__all__ = [
    "ENV",
    "HEADER",
    "RESTRICTED",
    "AdminClient",
    "default_key_file",
    "grpc_headers",
    "http_headers",
    "read_key",
    "restricted_args",
    "serving_key",
]

ENV = "TRITONGEN_ADMIN_KEY"
HEADER = "tritongen-admin-key"
# Every API that changes the server; what clients read (metadata, config, statistics) stays open.
RESTRICTED = ("model-repository", "shared-memory", "trace", "logging")


def default_key_file(repository: Path | str) -> Path:
    """``.<repository name>.admin-key`` beside the repository: one key per served repository.

    A remote repository (``s3://bucket/prefix``) has nothing beside it here: its key file is
    ``~/.config/tritongen/<bucket_prefix>.admin-key``.
    """
    if "://" in str(repository):
        flat = re.sub(r"[^A-Za-z0-9.-]+", "_", str(repository).split("://", 1)[1]).strip("_")
        return Path.home() / ".config" / "tritongen" / f"{flat}.admin-key"
    repository = Path(repository).resolve()
    return repository.parent / f".{repository.name}.admin-key"


def _read(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ServerError(f"cannot read the admin key {{path}}: {exc.strerror}", path=path) from None
    if not key:
        raise ServerError("the admin key file {path} is empty", path=path)
    return key


def read_key(repository: Path | str | None, key_file: Path | None = None) -> str:
    """The admin key of a served repository: ``key_file``, else :data:`ENV`, else the default file.

    Without a ``repository`` (a client that does not know which one is served) there is no default file.
    """
    if key_file is not None:
        return _read(Path(key_file))
    if os.environ.get(ENV, "").strip():
        return os.environ[ENV].strip()
    if repository is None:
        raise ServerError(f"no admin key: {ENV} is not set")
    path = default_key_file(repository)
    if not path.exists():
        raise ServerError(f"no admin key: {{path}} does not exist (serve writes it) and {ENV} is not set", path=path)
    return _read(path)


def serving_key(repository: Path | str, key_file: Path | None = None) -> tuple[str, Path | None]:
    """The key ``serve`` starts Triton with, and the file it was written to (None: taken as given).

    A ``key_file`` that exists, or :data:`ENV`, is used as it is; otherwise a fresh key is written
    (mode 0600) to ``key_file`` or to :func:`default_key_file`, so that each start gets a new key.
    """
    if key_file is not None and Path(key_file).exists():
        return _read(Path(key_file)), None
    if key_file is None and os.environ.get(ENV, "").strip():
        return os.environ[ENV].strip(), None
    path = Path(key_file) if key_file is not None else default_key_file(repository)
    key = secrets.token_urlsafe(32)  # letters, digits, '-' and '_': nothing Triton's option parser splits on
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(key + "\n")
    except OSError as exc:
        raise ServerError(f"cannot write the admin key {{path}}: {exc.strerror}", path=path) from None
    return key, path


def restricted_args(key: str) -> list[str]:
    """Options of tritonserver that put :data:`RESTRICTED` behind the key on HTTP and gRPC."""
    apis = ",".join(RESTRICTED)
    return [f"--http-restricted-api={apis}:{HEADER}={key}", f"--grpc-restricted-protocol={apis}:{HEADER}={key}"]


def http_headers(key: str) -> dict[str, str]:
    """Headers an HTTP client sends to reach the restricted APIs."""
    return {HEADER: key}


def grpc_headers(key: str) -> dict[str, str]:
    """Metadata a gRPC client sends to reach the restricted APIs."""
    return {f"triton-grpc-protocol-{HEADER}": key}


class AdminClient:
    """A tritonclient ``InferenceServerClient`` whose every call carries the admin key.

    Used where a plain client is expected (the supervisor, the roll-out): attribute access
    returns the client's method with ``headers`` filled in.
    """

    def __init__(self, client: Any, headers: dict[str, str]) -> None:
        self._client = client
        self._headers = headers

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)
        if name == "close" or not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("headers", self._headers)
            return method(*args, **kwargs)

        return call
