"""The one package a served step imports its helpers from: ``_tritongen_step``, in a repository and in process.

In a repository, each Python step's version folder holds its ``model.py`` and a package ``_tritongen_step/`` with
the helpers the build copies (``_common.py``, ``contract.py``, ``parameters.py``, the steps' bases, the task's
own), each under its last name (:func:`helper_file`). A step imports them in one line each,
``from _tritongen_step._common import ...``. Triton's Python backend puts the version folder on ``sys.path``; no
distribution installs a module of that name, so the server runs the files the build checked beside the step, never
an installed ``tritongen``'s, and a missing one fails the load instead of falling back.

In process (tests, the build's parity check, the gates) :class:`HelperFinder`, first on ``sys.meta_path`` once this
package is imported, answers the same names with the package's own modules: ``_tritongen_step.<name>`` *is*
``tritongen.steps.<name>``, ``tritongen.<name>`` for ``contract``, ``parameters`` and ``vectors``, or the module a
task declared (:func:`register_helpers`), so each module, and each class in it, exists once.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from types import ModuleType

from tritongen.sources import module_file

__all__ = [
    "PACKAGE_INIT",
    "STEP_PACKAGE",
    "HelperFinder",
    "helper_file",
    "install_finder",
    "register_helpers",
    "served_module",
    "write_helpers",
]

STEP_PACKAGE = "_tritongen_step"  # never installed: in a repository only the copy beside model.py answers to it
# The package's ``__init__.py`` in a step's folder: a regular package, so that no other folder on sys.path adds to it.
PACKAGE_INIT = (
    '"""The helpers this step imports, copied from tritongen by the build (``tritongen.steps.helpers``)."""\n'
)
_STEPS = "tritongen.steps"
# Last name -> module, besides the steps' own modules (``tritongen.steps.<name>``): the contract, and each helper a
# task declares (``Task.helper_modules``), added when the task registers.
_HELPERS: dict[str, str] = {
    "contract": "tritongen.contract",
    "encoding": "tritongen.encoding",
    "parameters": "tritongen.parameters",
    "vectors": "tritongen.vectors",
}


def helper_file(module: str) -> PurePosixPath:
    """Where the build copies helper ``module`` in a step's version folder: ``_tritongen_step/<last name>.py``."""
    return PurePosixPath(STEP_PACKAGE, f"{module.rsplit('.', 1)[-1]}.py")


def write_helpers(folder: Path, modules: Iterable[str], source: Callable[[str], Path] = module_file) -> None:
    """Write the ``_tritongen_step`` package into a step's version ``folder``: each of ``modules`` under its last name.

    ``source`` finds a module's file (:func:`tritongen.sources.module_file`; the build passes one that names the
    module in its error).
    """
    package = Path(folder) / STEP_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(PACKAGE_INIT, encoding="utf-8")
    for module in modules:
        shutil.copyfile(source(module), Path(folder) / helper_file(module))


def register_helpers(modules: Iterable[str]) -> None:
    """Serve each of ``modules`` (``tritongen.tasks.question_answering.qa``) as ``_tritongen_step.<last name>``.

    A last name another helper holds is refused: the two files would take one place in the step's folder.
    """
    for module in modules:
        name = module.rsplit(".", 1)[-1]
        holder = served_module(name)
        if holder is not None and holder != module:
            raise ValueError(f"helper `{module}` would be served as `{STEP_PACKAGE}.{name}`, which `{holder}` is")
        _HELPERS[name] = module


def served_module(name: str) -> str | None:
    """The module that ``_tritongen_step.<name>`` is in process; None when no helper has that last name."""
    if "." in name or not name:
        return None
    if name in _HELPERS:
        return _HELPERS[name]
    module = f"{_STEPS}.{name}"
    return module if importlib.util.find_spec(module) is not None else None


class HelperFinder(importlib.abc.MetaPathFinder):
    """``_tritongen_step`` and its modules in process: an empty package whose modules are tritongen's own."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for the package or one of its helpers; None for every other name and for unknown helpers."""
        if fullname == STEP_PACKAGE:
            return importlib.machinery.ModuleSpec(fullname, _PackageLoader(), is_package=True)
        package, _, name = fullname.partition(".")
        if package != STEP_PACKAGE or "." in name:
            return None
        module = served_module(name)
        return None if module is None else importlib.machinery.ModuleSpec(fullname, _AliasLoader(module))


class _PackageLoader(importlib.abc.Loader):
    """The package itself: empty; its modules come from :class:`HelperFinder`."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = "tritongen's step helpers under the name served steps import them by."


class _AliasLoader(importlib.abc.Loader):
    """One helper: the module already imported (or imported now) under its own name, not a second copy."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the alias's spec on it; the module keeps its own (find_spec and reloads read it).
        module.__spec__ = self._own_spec


def install_finder() -> None:
    """Put :class:`HelperFinder` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, HelperFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, HelperFinder())
