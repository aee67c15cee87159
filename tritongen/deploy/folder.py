"""Write a generated folder atomically: stage it in a hidden sibling, then rename it into place."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from tritongen.errors import DeployError

__all__ = ["write_folder"]


def write_folder(
    output: Path, files: Mapping[str, str], *, copies: Sequence[tuple[Path, str]] = (), force: bool = False
) -> Path:
    """Write ``files`` (relative path to text) and copy ``copies`` (folder, relative path) into ``output``.

    An existing ``output`` is refused unless ``force``; then it is replaced only once the new one is complete.
    """
    output = Path(output)
    if output.exists() and not force:
        raise DeployError("{path} already exists; refusing to overwrite it unless forced", path=output)
    output.parent.mkdir(parents=True, exist_ok=True)
    stage = output.parent / f".{output.name}.staging-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        for relative, text in files.items():
            path = stage / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for folder, relative in copies:
            shutil.copytree(folder, stage / relative, ignore=shutil.ignore_patterns("__pycache__"))
        _replace(stage, output)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return output


def _replace(stage: Path, output: Path) -> None:
    """Rename ``stage`` to ``output``, moving an existing ``output`` aside first and deleting it after."""
    old = output.parent / f".{output.name}.old-{os.getpid()}"
    if output.exists():
        output.rename(old)
    try:
        stage.rename(output)
    except BaseException:
        if old.exists():
            old.rename(output)
        raise
    shutil.rmtree(old, ignore_errors=True)
