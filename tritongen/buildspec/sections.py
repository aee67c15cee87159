"""The base of the spec's plug-in sections: a task's (``question_answering: {doc_stride: 64}``) or a runtime's.

A task or runtime declares its section in its own folder, as a frozen dataclass of this base: the section's
name, and its fields and their checks. A field that the command line sets is one :func:`setting`: its default,
its flat key (``qa_doc_stride``, also an old flat spec key and the flag's destination) and the flag's argparse
keywords, on one line. The spec holds the sections by name; ``tritongen.builder.spec`` finds the classes through
the task and runtime registries, so neither this package nor the CLI names one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["RuntimeSettings", "SpecSection", "TaskSettings", "setting"]


def setting(default: Any, *, flag: str, **cli: Any) -> Any:
    """A section field the command line sets: ``setting(15, flag="qa_max_answer_len", type=int, help="...")``.

    ``flag`` is the flat key that sets the field (``--qa-max-answer-len`` on the command line, and as a top-level
    key of a spec file, as earlier versions wrote it); ``cli`` are the flag's argparse keywords.
    """
    return dataclasses.field(default=default, metadata={"flag": flag, "cli": cli})


class _FromFields:
    """A class attribute read from the fields' :func:`setting` metadata, so that each setting is declared once."""

    def __init__(self, read: Callable[[tuple[dataclasses.Field, ...]], dict[str, Any]]) -> None:
        self.read = read

    def __get__(self, instance: object, owner: type) -> dict[str, Any]:
        declared = [f for f in dataclasses.fields(owner) if f.metadata.get("flag")]
        return self.read(tuple(declared))


@dataclass(frozen=True)
class SpecSection:
    """A section of the build spec; subclasses are frozen dataclasses that check themselves.

    ``flat_names`` maps flat spec keys (``qa_doc_stride``: earlier versions' names, and the command-line flags'
    destinations) to fields of the section, so old YAML files and the flags set them; ``cli_flags`` are the flags,
    by flat key. Both are read from the fields declared with :func:`setting`. Each flat key, and the section's
    name, has one holder: registering a plug-in whose section takes one that another section or the spec holds
    raises (:func:`tritongen.buildspec.claim_sections`).
    """

    section: ClassVar[str] = ""  # the spec key of the section
    flat_names = _FromFields(lambda fields: {f.metadata["flag"]: f.name for f in fields})
    # Command-line flags, by flat name (``qa_doc_stride`` -> ``--qa-doc-stride``): argparse keywords.
    cli_flags = _FromFields(lambda fields: {f.metadata["flag"]: dict(f.metadata["cli"]) for f in fields})
    # Settings the section no longer takes, each with why: a spec that still sets one is refused with the reason.
    retired: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`~tritongen.errors.SpecError` for settings that cannot work."""


@dataclass(frozen=True)
class TaskSettings(SpecSection):
    """A task's section (the task names its class as ``Settings``)."""


@dataclass(frozen=True)
class RuntimeSettings(SpecSection):
    """A runtime's section (the runtime lists its classes in ``settings``)."""
