"""Command line: ``python -m tritongen <command> ...`` (build, serve, health, infer, bench, ...). Thin by design.

Each command parses its options and calls one library function. The commands live in one module per group
(``build``, ``serve``, ``engine``, ``bench``, ``deploy``), each with a ``register(subparsers)``; a command's options
are added only when it runs or shows its help, so a light command loads no build machinery. Errors a user can
cause (:class:`tritongen.errors.TritongenError`) are printed as one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tritongen.cli import bench, build, deploy, engine, serve
from tritongen.cli.options import DeferredParser
from tritongen.errors import TritongenError, describe

__all__ = ["main"]

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1

# In this order in --help.
_GROUPS = (build, serve, engine, bench, deploy)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tritongen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=DeferredParser)
    for group in _GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    args = _parser().parse_args(argv)
    try:
        if getattr(args, "backends", None):  # for this process and every server or build it starts
            from tritongen.serve.backends import BACKENDS_ENV, backends_folder

            os.environ[BACKENDS_ENV] = str(backends_folder(args.backends))
        code = args.func(args)
    except TritongenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug of ours: still one line, the traceback only on request
        if os.environ.get("TRITONGEN_TRACEBACK"):
            raise
        print(
            f"internal error in `{args.command}`: {describe(exc)} "
            "(set TRITONGEN_TRACEBACK=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
    return code or 0
