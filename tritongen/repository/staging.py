"""Write a model repository atomically, one numbered version at a time.

A build is staged in a hidden sibling folder of the repository and moved into place only
when every file is written, so a failed build leaves nothing behind. Rebuilding the same
name adds the next version folder to each model and keeps the earlier ones.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from tritongen.errors import RepositoryError

__all__ = ["Staging", "existing_versions", "next_version", "staging"]


def existing_versions(model_dir: Path) -> list[int]:
    """Numbered version folders of one model, sorted."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def next_version(repository: Path, model_names: Sequence[str]) -> int:
    """The version number a new build of these models gets: one above any existing."""
    found = [v for name in model_names for v in existing_versions(repository / name)]
    return max(found, default=0) + 1


class Staging:
    """A folder that mirrors the repository layout for one build."""

    def __init__(self, root: Path, repository: Path, version: int) -> None:
        self.root = root
        self.repository = repository
        self.version = version

    def version_dir(self, model_name: str) -> Path:
        """``<model>/<version>/`` in the staging area, created on demand."""
        path = self.root / model_name / str(self.version)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_config(self, model_name: str, text: str) -> None:
        """Write ``<model>/config.pbtxt`` in the staging area."""
        self.version_dir(model_name)
        (self.root / model_name / "config.pbtxt").write_text(text, encoding="utf-8")

    def publish(self) -> list[Path]:
        """Move every staged model into the repository; return the published model folders."""
        self.repository.mkdir(parents=True, exist_ok=True)
        models = sorted(p for p in self.root.iterdir() if p.is_dir())
        for staged in models:
            target = self.repository / staged.name
            if target.exists() and (target / str(self.version)).exists():
                raise RepositoryError(
                    f"version {self.version} of {{path}} already exists; nothing was published", path=target
                )
        published = []
        for staged in models:
            target = self.repository / staged.name
            if not target.exists():
                os.rename(staged, target)
            else:
                os.rename(staged / str(self.version), target / str(self.version))
                os.replace(staged / "config.pbtxt", target / "config.pbtxt")
            published.append(target)
        return published


@contextlib.contextmanager
def staging(repository: Path, model_names: Sequence[str]) -> Iterator[Staging]:
    """Yield a :class:`Staging` for the next version; always remove the staging folder."""
    repository = repository.resolve()
    if repository.exists() and not repository.is_dir():
        raise RepositoryError("repository path {path} is a file, not a folder", path=repository)
    parent = repository.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix=f".{repository.name}.staging-", dir=parent))
    except OSError as exc:
        raise RepositoryError(f"cannot write next to {{path}}: {exc.strerror}", path=repository) from None
    try:
        yield Staging(root, repository, next_version(repository, model_names))
    finally:
        shutil.rmtree(root, ignore_errors=True)
