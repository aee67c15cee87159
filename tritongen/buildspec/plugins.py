"""The plug-in registries' plumbing: adding a task or runtime, looking one up, and the spec keys their sections hold.

Each top-level spec key has one holder: the spec itself or one section. A plug-in registering is checked against
every section the registries hold (:func:`claim_sections`) before it is added.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from tritongen.buildspec.sections import SpecSection
from tritongen.buildspec.spec import BuildSpec

__all__ = ["SectionSource", "claim_sections", "plugin_entry", "register_plugin", "section_source", "sections_by_name"]

_Entry = TypeVar("_Entry")  # a plug-in registry's entry: a task, a runtime

SectionSource = Callable[[], Iterable[type[SpecSection]]]  # one registry's sections, as its entries now declare

# Each registry's sections, so that a plug-in registering is checked against both kinds (tasks, runtimes).
_SECTION_SOURCES: list[SectionSource] = []


def section_source(source: SectionSource) -> SectionSource:
    """Decorator: a registry's ``source`` of sections, which :func:`claim_sections` checks new ones against."""
    _SECTION_SOURCES.append(source)
    return source


def claim_sections(new: Iterable[type[SpecSection]]) -> None:
    """Refuse a registering plug-in's sections where one holds a spec key a registered section or the spec holds."""
    sections_by_name([*(cls for source in _SECTION_SOURCES for cls in source()), *new])


def register_plugin(
    table: dict[str, Any],
    kind: str,
    cls: type,
    sections: Iterable[type[SpecSection]],
    check: Callable[[], object] = lambda: None,
) -> None:
    """Add ``cls()`` to a plug-in registry (``table``: tasks, runtimes) under ``cls.name``, claiming its ``sections``.

    A name already taken is refused; then the registry's own ``check`` runs (it may raise), then the sections are
    claimed (:func:`claim_sections`), and only then is the entry added.
    """
    if cls.name in table:
        raise ValueError(f"{kind} `{cls.name}` is registered already (by {type(table[cls.name]).__name__})")
    check()
    claim_sections(sections)
    table[cls.name] = cls()


def plugin_entry(table: Mapping[str, _Entry], name: str, unknown: Callable[[], Exception]) -> _Entry:
    """``table[name]`` (a plug-in registry's entry), else raise what ``unknown`` gives (it lists the registered)."""
    if name not in table:
        raise unknown()
    return table[name]


def sections_by_name(declared: Iterable[type[SpecSection]]) -> dict[str, type[SpecSection]]:
    """The sections by name; a top-level spec key (a section's name or flat key) held twice raises ValueError.

    A flat key read into two sections would set whichever came first, and one that is a spec setting would take
    it over; so each top-level key has one holder. Plug-ins share a section (the image tasks' ``images``) only
    through one class.
    """
    holders: dict[str, type[SpecSection] | None] = {f.name: None for f in dataclasses.fields(BuildSpec)}
    sections = list(dict.fromkeys(declared))
    for cls in sections:
        for key in (cls.section, *cls.flat_names):
            holder = holders.setdefault(key, cls)
            if holder is not cls:
                raise ValueError(f"{_holder(cls)} declares the spec key `{key}`, which {_holder(holder)} holds already")
    return {cls.section: cls for cls in sections}


def _holder(cls: type[SpecSection] | None) -> str:
    return "the spec itself" if cls is None else f"section `{cls.section}` ({cls.__name__})"
