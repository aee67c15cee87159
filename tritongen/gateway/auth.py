"""The gateway's optional API key: read from ``$TRITONGEN_GATEWAY_KEY`` or a file, never from the command line.

A key on the command line would show in ``ps`` and shell history; a file (mode 600) or the environment does not.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from tritongen.errors import GatewayError, UsageError

__all__ = ["KEY_ENV", "check_key", "read_api_key"]

KEY_ENV = "TRITONGEN_GATEWAY_KEY"


def read_api_key(path: Path | None) -> str | None:
    """The key in ``path`` (first line), else ``$TRITONGEN_GATEWAY_KEY``, else None (no key: open access)."""
    if path is not None:
        try:
            key = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"the API key file {path} cannot be read ({exc.__class__.__name__})") from None
        if not key:
            raise UsageError(f"the API key file {path} is empty")
        return key
    return os.environ.get(KEY_ENV, "").strip() or None


def check_key(expected: bytes, authorization: str | None) -> None:
    """Raise 401 unless ``authorization`` is ``Bearer <expected>`` (compared in constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise GatewayError(401, "missing API key: send `Authorization: Bearer <key>`", code="invalid_api_key")
    if not hmac.compare_digest(given.strip().encode(), expected):
        raise GatewayError(401, "incorrect API key", code="invalid_api_key")
