"""Which ensembles the gateway asks Triton about, and the admin key for the one API that needs it.

``tritongen serve`` puts Triton's repository API (the index of loaded models) behind the admin key
(:mod:`tritongen.serve.admin`); model config and metadata stay open to every client. So the gateway names the
ensembles itself wherever it can: those of the repository folder it reads for tokenizers and labels, plus any
that ``--model`` or a request names. Only without such a folder (a remote repository, or one on another
machine) does it list them with the index, sending the admin key from where ``serve`` keeps it
(:func:`tritongen.serve.admin.read_key`). The key is read again at every listing: ``serve`` writes a fresh one at
each start.
"""

from __future__ import annotations

from pathlib import Path

from tritongen.errors import GatewayError, ServerError
from tritongen.gateway.errors import unavailable
from tritongen.gateway.triton import TritonClient
from tritongen.serve.admin import grpc_headers, read_key

__all__ = ["admin_key", "local_folder", "served_names"]


def local_folder(repository: Path | str | None) -> Path | None:
    """The repository as a folder this machine can read, or None (a remote URL, or no such folder here)."""
    from tritongen.serve.server import REMOTE_SCHEMES

    if repository is None or str(repository).startswith(REMOTE_SCHEMES):
        return None
    path = Path(repository)
    return path if path.is_dir() else None


def admin_key(repository: Path | str | None, key_file: Path | None) -> str:
    """The admin key of the served ``repository`` (``key_file``, ``$TRITONGEN_ADMIN_KEY``, the file beside it)."""
    try:
        return read_key(repository, key_file)
    except ServerError as exc:
        raise unavailable(
            f"cannot list the served ensembles (Triton's repository index needs the admin key): {exc}"
        ) from None


async def served_names(client: TritonClient, repository: Path | str | None, key_file: Path | None) -> list[str]:
    """The ensembles to look for: the local folder's, else every model Triton's index lists as ready."""
    folder = local_folder(repository)
    if folder is not None:
        from tritongen.serve.health import ensembles_of

        return [ensemble.name for ensemble in ensembles_of(folder)]
    key = admin_key(repository, key_file)
    try:
        return await client.model_index(grpc_headers(key))
    except GatewayError as exc:
        # Triton answers a restricted API's call without the right key UNAVAILABLE, the status of a server it
        # cannot reach too: from a server that answers, it is the key's refusal.
        if exc.code != "unavailable" or not await client.live():
            raise
        raise unavailable(
            "cannot list the served ensembles: Triton refused the admin key to its repository index "
            "(serve writes a new key at each start unless given one; pass the current one)"
        ) from None
