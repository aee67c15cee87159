"""Where a module's source file is, found without running the module.

The build copies step modules into a repository as they are; the local server installs the runtimes'
stand-in backends the same way.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["module_file"]


def module_file(name: str) -> Path:
    """The source file of module ``name`` (``tritongen.tasks.question_answering.qa``); LookupError if none.

    Only its parent packages are imported, so a module that needs a runtime library is found without it.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise LookupError(f"module `{name}` has no source file here")
    return Path(spec.origin)
