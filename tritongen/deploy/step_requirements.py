"""What the image must ``pip install`` for an ensemble's Python steps, and nothing more.

The steps' sources are read, not guessed from the task: every top-level module they import that is
neither the standard library, Triton's ``triton_python_backend_utils`` nor one of the step's own files
is a package to install (a text model's steps import numpy and tokenizers; only the image steps import
Pillow). Versions are requirements.lock's, as the build tested them, except where the container's
Python has no wheel of that release (``Container.pins``).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from tritongen.containers import Container
from tritongen.errors import DeployError

__all__ = [
    "DISTRIBUTIONS",
    "canonical",
    "imported_modules",
    "lock_pins",
    "read_lock",
    "requirement_line",
    "step_requirements",
]

# Import name -> the distribution that provides it, for everything a generated step may import.
DISTRIBUTIONS = {"numpy": "numpy", "tokenizers": "tokenizers", "PIL": "pillow"}
_PROVIDED = {"triton_python_backend_utils"}  # the Python backend's own module, in every image
_LOCK = Path(__file__).resolve().parents[2] / "requirements.lock"


def imported_modules(sources: Iterable[Path]) -> set[str]:
    """Top-level modules the ``sources`` import (at any depth of the file), less the steps' own files."""
    sources = list(sources)
    own = {path.stem for path in sources}
    found: set[str] = set()
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(_drop_fallbacks(tree)):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - own - _PROVIDED - set(sys.stdlib_module_names)


def _drop_fallbacks(tree: ast.AST) -> ast.AST:
    """``tree`` without its ``except ImportError`` handlers, whose imports are fallbacks, not requirements.

    The steps import their helpers from their own folder, and from tritongen only outside the server.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            node.handlers = [h for h in node.handlers if not _catches_import_error(h)]
    return tree


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)


def canonical(name: str) -> str:
    """A distribution name as pip compares them: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def read_lock(lock: Path = _LOCK) -> dict[str, str]:
    """requirements.lock's ``name==version`` pins by :func:`canonical` name ({} without the file)."""
    pins: dict[str, str] = {}
    if lock.is_file():
        for line in lock.read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep:
                pins[canonical(name)] = version.strip()
    return pins


def lock_pins(lock: Path = _LOCK) -> dict[str, str]:
    """requirements.lock's pins; without the lock (an installed wheel), the installed versions of the steps'."""
    pins = read_lock(lock)
    for distribution in DISTRIBUTIONS.values():
        if distribution not in pins:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                pins[distribution] = importlib.metadata.version(distribution)
    return pins


def step_requirements(folders: Iterable[Path], container: Container, lock: Path = _LOCK) -> dict[str, str]:
    """``{distribution: version}`` the Python steps in ``folders`` (model folders) need in ``container``."""
    sources = [path for folder in folders for path in sorted(Path(folder).glob("*/*.py"))]
    modules = imported_modules(sources)
    unknown = sorted(modules - set(DISTRIBUTIONS))
    if unknown:
        raise DeployError(
            f"the Python steps in {{path}} import {', '.join(unknown)}, which no image installs; "
            "a step may import only numpy, tokenizers and Pillow",
            path=Path(next(iter(folders), ".")).parent,
        )
    pins = {**lock_pins(lock), **container.pins}
    needed = sorted(DISTRIBUTIONS[m] for m in modules)
    missing = [d for d in needed if d not in pins]
    if missing:
        raise DeployError(f"no pinned version of {', '.join(missing)} in {{path}} nor installed", path=lock)
    return {d: pins[d] for d in needed}


def requirement_line(requirements: dict[str, str]) -> list[str]:
    """``name==version`` for each requirement, sorted: the Dockerfile's ``pip install`` arguments."""
    return [f"{name}=={version}" for name, version in sorted(requirements.items())]
