"""The task registry: ``@register_task`` adds an entry, ``get_task`` and ``detect_task`` find one.

As optimum's ``TasksManager``: an unknown name raises an error that lists the supported ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.buildspec import plugin_entry, register_plugin, section_source
from tritongen.errors import UnsupportedModelError
from tritongen.steps.package import register_helpers

if TYPE_CHECKING:
    from tritongen.buildspec.sections import TaskSettings
    from tritongen.model.checkpoint import Checkpoint
    from tritongen.tasks._base import Task

__all__ = ["TASKS", "detect_task", "get_task", "register_task"]

TASKS: dict[str, Task] = {}


@section_source
def _sections() -> list[type[TaskSettings]]:
    return [task.Settings for task in TASKS.values() if task.section]


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: add a task entry to :data:`TASKS` under its ``name``.

    A name already taken is refused, and so is a section whose name or flat keys another section or the spec holds.
    The task's helper modules become its steps' ``_tritongen_step.<last name>`` in process; a last name another
    helper holds is refused.
    """
    sections = [cls.Settings] if cls.section else []
    register_plugin(TASKS, "task", cls, sections, lambda: register_helpers(cls.helper_modules))
    return cls


def get_task(name: str) -> Task:
    """Look a task up by name; unknown names list the supported ones."""
    return plugin_entry(
        TASKS,
        name,
        lambda: UnsupportedModelError(f"task `{name}` is not supported; supported: {', '.join(sorted(TASKS))}"),
    )


def detect_task(checkpoint: Checkpoint) -> Task:
    """Pick the task from the checkpoint's architectures and files."""
    for task in sorted(TASKS.values(), key=lambda t: t.detect_order):
        if task.matches(checkpoint):
            return task
    raise UnsupportedModelError(
        f"cannot tell the task of {{path}} (architectures {checkpoint.architectures}); "
        f"name one of: {', '.join(sorted(TASKS))}",
        path=checkpoint.path,
    )
