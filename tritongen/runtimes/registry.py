"""The runtime registry: ``@register_runtime`` adds an entry, ``get_runtime`` finds one by the spec's name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.buildspec import RuntimeSettings, plugin_entry, register_plugin, section_source
from tritongen.errors import SpecError
from tritongen.runtimes.base import Runtime

if TYPE_CHECKING:
    from tritongen.containers import Container

__all__ = [
    "RUNTIMES", "container_requirements", "get_runtime", "register_runtime", "runtime_names", "runtime_of_backend",
]  # fmt: skip

RUNTIMES: dict[str, Runtime] = {}


@section_source
def _sections() -> list[type[RuntimeSettings]]:
    return [cls for runtime in RUNTIMES.values() for cls in runtime.settings]


def register_runtime(cls: type[Runtime]) -> type[Runtime]:
    """Class decorator: add a runtime entry to :data:`RUNTIMES` under its ``name``.

    A name already taken is refused, and so is a second runtime owning one backend: a config's ``backend``
    must lead back to one runtime (a runtime may serve through another's backend without owning it), and so is a
    section whose name or flat keys another section or the spec holds.
    """

    def one_owner() -> None:
        owner = runtime_of_backend(cls.backend)
        if cls.owns_backend and owner is not None:
            raise ValueError(
                f"runtime `{cls.name}` would own backend `{cls.backend}`, which `{owner.name}` owns; "
                "set owns_backend False"
            )

    register_plugin(RUNTIMES, "runtime", cls, cls.settings, one_owner)
    return cls


def get_runtime(name: str) -> Runtime:
    """Look a runtime up by the spec's name; unknown names list the registered ones."""
    return plugin_entry(
        RUNTIMES, name, lambda: SpecError(f"runtime must be one of {', '.join(runtime_names())}, got {name}")
    )


def runtime_names() -> tuple[str, ...]:
    """The registered runtimes' names, in registration order (the CLI's ``--runtime`` choices)."""
    return tuple(RUNTIMES)


def runtime_of_backend(backend: str) -> Runtime | None:
    """The runtime that owns the backend (or ``platform``) a config names; None for any other."""
    return next((r for r in RUNTIMES.values() if r.backend == backend and r.owns_backend), None)


def container_requirements(target: Container) -> list[str]:
    """The pip requirements that reproduce every registered runtime's release in ``target``, each package once.

    What ``make compat-venv`` installs into the container's runtime venv, in registration order; a runtime whose
    package the container links no release of adds nothing.
    """
    return list(dict.fromkeys(r for r in (rt.container_requirement(target) for rt in RUNTIMES.values()) if r))
