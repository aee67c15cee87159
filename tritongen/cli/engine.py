"""``engine``: the TensorRT plan of a repository built with runtime tensorrt, compiled on the GPU node it serves on.

Its own group, between the serving and the benchmark commands, because ``--help`` lists the commands in the
order the groups register them.
"""

from __future__ import annotations

import argparse

from tritongen.cli.options import add_repository_option

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``engine``."""
    subparsers.add_parser(
        "engine", help="build the TensorRT plan of a tensorrt-runtime build (GPU node)", options=_engine_options
    )


def _engine_options(engine: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME

    engine.add_argument("--name", default=DEFAULT_NAME)
    add_repository_option(engine)
    engine.set_defaults(func=_engine)


def _engine(args: argparse.Namespace) -> None:
    from tritongen.errors import RepositoryError
    from tritongen.repository.contents import step_names
    from tritongen.repository.staging import existing_versions
    from tritongen.runtimes.tensorrt.engine import build_engine

    model_dir = args.repository / step_names(args.name)["model"]
    versions = existing_versions(model_dir)
    if not versions or not (model_dir / str(versions[-1]) / "engine.json").is_file():
        raise RepositoryError("{path} has no TensorRT build plan; build it with runtime tensorrt first", path=model_dir)
    print(f"Wrote {build_engine(model_dir / str(versions[-1]))}")
