"""What serves the model steps here: Triton's native backends where a folder of them is given, else our stand-ins.

``TRITONGEN_BACKENDS=DIR`` names a folder laid out as a Triton image's ``/opt/tritonserver/backends``: one folder
per backend, holding ``libtriton_<backend>.so`` and its runtime's libraries (``../shared/triton-backends`` in
this project's CI). For each runtime that has a stand-in (``runtimes/<runtime>/backend.py``), the local server
serves its model steps through the native backend where ``DIR`` has one, and through the stand-in otherwise.

Where ``DIR`` also holds the backend built against the runtime release of the container a build targets
(``onnxruntime-ort1.28.0/`` beside ``onnxruntime/`` for 26.08), that folder is used, so that what is measured
and recorded here runs the release the node runs. A backend's folder is linked file by file into the server's
backend directory; a link that a copy flattened into a text file naming its target is linked to that target.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tritongen.containers import DEFAULT_CONTAINER, LOCAL_CONTAINER, container
from tritongen.errors import ServerError
from tritongen.runtimes import RUNTIMES, Runtime

__all__ = [
    "BACKENDS_ENV",
    "NativeBackend",
    "ServedBackends",
    "backends_folder",
    "built_container",
    "installed_release",
    "link_backend",
    "served_backends",
    "stand_in_runtimes",
]

BACKENDS_ENV = "TRITONGEN_BACKENDS"
_TEXT_LINK_BYTES = 256  # a flattened link is a file name, nothing more


@dataclass(frozen=True)
class NativeBackend:
    """One native backend folder: ``libtriton_<backend>.so`` and the runtime release it links."""

    backend: str  # what a config's ``backend`` names: "onnxruntime"
    folder: Path
    title: str  # the runtime, for people: "ONNX Runtime"
    release: str  # "1.28.0"; "" where the folder does not say

    def describe(self) -> str:
        """``onnxruntime r24.10 native, ONNX Runtime 1.28.0``: the server release that loads it, and the runtime's."""
        return f"{self.backend} r{LOCAL_CONTAINER} native, {self.title} {self.release or '(release unknown)'}"


@dataclass(frozen=True)
class ServedBackends:
    """What serves each stand-in runtime's model steps in one local server, and for which container's release."""

    native: tuple[NativeBackend, ...] = ()
    container: str = DEFAULT_CONTAINER

    def of(self, backend: str) -> NativeBackend | None:
        """The native backend serving ``backend``'s steps; None: its stand-in does."""
        return next((n for n in self.native if n.backend == backend), None)

    def describe(self, backend: str) -> str:
        """What serves ``backend``'s steps, in words (the server log, the bench report, the card)."""
        native = self.of(backend)
        if native is not None:
            return native.describe()
        runtime = next((r for r in stand_in_runtimes() if r.backend == backend), None)
        if runtime is None:
            return f"{backend} (no stand-in)"
        return f"{backend} stand-in (Python backend, {runtime.title} {installed_release(runtime.package)})"

    def lines(self) -> list[str]:
        """One line per stand-in runtime's backend: what serves its steps."""
        return [f"{r.backend}: {self.describe(r.backend)}" for r in stand_in_runtimes()]

    def to_dict(self) -> dict[str, str]:
        """Backend -> what serves it, for ``build.json`` and the bench's records."""
        return {r.backend: self.describe(r.backend) for r in stand_in_runtimes()}


def stand_in_runtimes() -> list[Runtime]:
    """The runtimes whose steps the local server serves through a stand-in unless a native backend is given."""
    return [r for r in RUNTIMES.values() if r.local_backend and r.owns_backend]


def installed_release(package: str) -> str:
    """The release of the pip distribution ``package`` installed here, for people."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def backends_folder(folder: Path | str | None = None) -> Path | None:
    """The folder of native backends: ``folder``, else ``$TRITONGEN_BACKENDS``; None where neither names one."""
    value = str(folder) if folder is not None else os.environ.get(BACKENDS_ENV, "")
    if not value.strip():
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        where = "--backends" if folder is not None else BACKENDS_ENV
        raise ServerError(
            f"{where} names {path}, which is not a folder; point it at a folder of native Triton backends "
            f"(one folder per backend, as /opt/tritonserver/backends), or unset it to serve through the stand-ins"
        )
    return path


def served_backends(release: str | None = None, folder: Path | str | None = None) -> ServedBackends:
    """What serves each runtime's steps for container ``release`` (default: the newest supported).

    Its native backend from ``folder`` (default ``$TRITONGEN_BACKENDS``) where there is one, the one built
    against the container's runtime release first; its stand-in otherwise.
    """
    return _served(container(release).release, backends_folder(folder))


@functools.cache
def _served(release: str, root: Path | None) -> ServedBackends:
    if root is None:
        return ServedBackends((), release)
    target = container(release)
    found = (_native(root, runtime, runtime.container_release(target)) for runtime in stand_in_runtimes())
    return ServedBackends(tuple(n for n in found if n is not None), release)


def _native(root: Path, runtime: Runtime, wanted: str) -> NativeBackend | None:
    names = [f"{runtime.backend}-{runtime.native_tag}{wanted}"] if runtime.native_tag and wanted else []
    for folder in [root / name for name in names] + [root / runtime.backend]:
        if (folder / f"libtriton_{runtime.backend}.so").is_file():
            return NativeBackend(runtime.backend, folder, runtime.title, runtime.native_release(folder))
    return None


def link_backend(native: NativeBackend, into: Path) -> None:
    """Lay out ``native``'s folder at ``into`` (a new folder): each file linked, flattened links to their targets."""
    into.mkdir(parents=True)
    for item in sorted(native.folder.iterdir()):
        (into / item.name).symlink_to(_link_target(item))


def _link_target(item: Path) -> Path:
    """``item``, or the sibling it names where it is a link flattened into a few bytes of text."""
    if not item.is_file() or item.is_symlink() or item.stat().st_size > _TEXT_LINK_BYTES:
        return item.resolve()
    try:
        text = item.read_text(encoding="ascii").strip()
    except (UnicodeDecodeError, OSError):
        return item.resolve()
    sibling = item.parent / text
    if text and "/" not in text and "\n" not in text and sibling.is_file() and sibling != item:
        return _link_target(sibling)
    return item.resolve()


def built_container(repository: Path | str) -> str | None:
    """The container the builds in a local ``repository`` target, where they agree (``build.json``); else None."""
    root = Path(repository)
    if "://" in str(repository) or not root.is_dir():
        return None
    targets = set()
    for record in root.glob("*/[0-9]*/build.json"):
        try:
            targets.add(json.loads(record.read_text(encoding="utf-8")).get("container"))
        except (OSError, ValueError):
            continue
    targets.discard(None)
    return targets.pop() if len(targets) == 1 else None
