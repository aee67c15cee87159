"""What the image must ``pip install`` for an ensemble's Python steps, and nothing more.

The steps' sources are read, not guessed from the task: every top-level module they import that is
neither the standard library, Triton's ``triton_python_backend_utils`` nor the step's own files (its
``model.py`` and the helper package beside it, ``_tritongen_step/``) is a package to install (a text
model's steps import numpy and tokenizers; only the image steps import Pillow). A step imports nothing
as a fallback, so an import of ``tritongen`` is refused like any other module no image installs.
Versions are requirements.lock's, as the build tested them, except where the container's Python has no
wheel of that release (``Container.pins``).
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
    """Top-level modules the ``sources`` import (at any depth of the file), less the steps' own files and packages."""
    sources = list(sources)
    own = {path.stem for path in sources} | {path.parent.name for path in sources if path.name == "__init__.py"}
    found: set[str] = set()
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - own - _PROVIDED - set(sys.stdlib_module_names)


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
    sources = [path for folder in folders for path in sorted(Path(folder).glob("*/**/*.py"))]  # and its package
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
