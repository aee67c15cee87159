"""The base of the spec's plug-in sections: a task's (``question_answering: {doc_stride: 64}``) or a runtime's.

A task or runtime declares its section in its own folder, as a frozen dataclass of this base: the section's
name, its fields and their checks, the flat keys that also set them (``qa_doc_stride``, the old flat spec keys
and the command-line flags' destinations) and the flags themselves. The spec holds the sections by name;
``tritongen.builder.spec`` finds the classes through the task and runtime registries, so neither this package
nor the CLI names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["RuntimeSettings", "SpecSection", "TaskSettings"]


@dataclass(frozen=True)
class SpecSection:
    """A section of the build spec; subclasses are frozen dataclasses that check themselves.

    ``flat_names`` maps flat spec keys (``qa_doc_stride``: earlier versions' names, and the command-line flags'
    destinations) to fields of the section, so old YAML files and the flags set them. Each such key, and the
    section's name, has one holder: registering a plug-in whose section takes one that another section or the
    spec holds raises (:func:`tritongen.buildspec.claim_sections`).
    """

    section: ClassVar[str] = ""  # the spec key of the section
    flat_names: ClassVar[dict[str, str]] = {}
    # Command-line flags, by flat name (``qa_doc_stride`` -> ``--qa-doc-stride``): argparse keywords.
    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {}
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
