"""What the command groups share: the deferred subcommand parser and the options several commands take.

A command's options are added when that command is used, so that ``python -m tritongen health`` or ``--help``
loads none of the modules (the spec, the task registry) another command's options are made from.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tritongen.errors import UsageError

__all__ = [
    "DeferredParser",
    "add_admin_key_option",
    "add_backends_option",
    "add_exit_timeout_option",
    "add_name",
    "add_repository_option",
    "add_server_options",
    "ensemble_name",
    "ints",
]


class DeferredParser(argparse.ArgumentParser):
    """A subcommand's parser that adds its options (``options(parser)``) the first time it parses or shows help."""

    def __init__(self, *args: Any, options: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._options = options

    def _add_options(self) -> None:
        options, self._options = self._options, None
        if options is not None:
            options(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse, with the options added first."""
        self._add_options()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        """The usage line, with the options added first."""
        self._add_options()
        return super().format_usage()

    def format_help(self) -> str:
        """The help, with the options added first."""
        self._add_options()
        return super().format_help()

    def get_default(self, dest: str) -> Any:
        """The default of ``dest``, with the options added first."""
        self._add_options()
        return super().get_default(dest)


def add_server_options(parser: argparse.ArgumentParser, *ports: str) -> None:
    """``--host`` and the ``ports`` (http, grpc, metrics; default all) the command talks to.

    The others are still accepted, so that one set of port options (the Makefile's) works for every
    command, but --help lists only what the command uses.
    """
    parser.add_argument("--host", default="127.0.0.1")
    defaults = {"http": 8000, "grpc": 8001, "metrics": 8002}
    for port, default in defaults.items():
        shown = not ports or port in ports
        parser.add_argument(f"--{port}-port", type=int, default=default, help=None if shown else argparse.SUPPRESS)


def add_repository_option(parser: argparse.ArgumentParser, what: str | None = None, *, remote: bool = False) -> None:
    """``--repository`` (default ``model_repository``): a folder here, with ``remote`` an s3:// URL too (a str)."""
    default = "model_repository" if remote else Path("model_repository")
    parser.add_argument("--repository", type=str if remote else Path, default=default, help=what)


def add_backends_option(parser: argparse.ArgumentParser) -> None:
    """``--backends DIR``: Triton's native backends to serve the model steps with ($TRITONGEN_BACKENDS over)."""
    parser.add_argument(
        "--backends",
        metavar="DIR",
        help="a folder of Triton's native backends (one folder per backend, as /opt/tritonserver/backends) that "
        "serve the model steps here (default: $TRITONGEN_BACKENDS; neither: the Python stand-ins)",
    )


def add_admin_key_option(parser: argparse.ArgumentParser, what: str = "file holding the admin key") -> None:
    """``--admin-key-file``: serve's admin key, found by default where ``serve.admin.read_key`` looks."""
    parser.add_argument(
        "--admin-key-file",
        type=Path,
        help=f"{what} (default: $TRITONGEN_ADMIN_KEY, else the file serve writes beside the repository)",
    )


def add_exit_timeout_option(parser: argparse.ArgumentParser) -> None:
    """``--exit-timeout``: how long the deployed Triton drains on stop (``TritonArgs.exit_timeout_secs``)."""
    parser.add_argument("--exit-timeout", type=int, default=30, help="Triton's --exit-timeout-secs (drain on stop)")


def add_name(parser: argparse.ArgumentParser, default: str) -> None:
    """``--name NAME``, with the older positional ``NAME`` still taken (resolved by :func:`ensemble_name`)."""
    parser.add_argument("positional_name", nargs="?", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=f"ensemble name (default: {default})")
    parser.set_defaults(default_name=default)


def ensemble_name(args: argparse.Namespace) -> str:
    """The name :func:`add_name` took: ``--name``, else the positional one, else the default."""
    if args.name and args.positional_name and args.name != args.positional_name:
        raise UsageError(f"two names, `{args.positional_name}` and --name `{args.name}`; give one")
    return args.name or args.positional_name or args.default_name


def ints(text: str | None) -> tuple[int, ...] | None:
    """``"1,2,4"`` -> ``(1, 2, 4)``; ``None`` stays ``None``."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"`{text}` is not a comma-separated list of integers") from None
