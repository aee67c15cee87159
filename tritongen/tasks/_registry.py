"""The task registry: ``@register_task`` adds an entry, ``get_task`` and ``detect_task`` find one.

As optimum's ``TasksManager``: an unknown name raises an error that lists the supported ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.buildspec import plugin_entry, register_plugin, section_source
from tritongen.errors import UnsupportedModelError
from tritongen.steps.helpers import register_helpers

if TYPE_CHECKING:
    from tritongen.buildspec.sections import TaskSettings
    from tritongen.model.checkpoint import Checkpoint
    from tritongen.tasks._base import Task

__all__ = ["DETECTION_ORDER", "FALLBACK", "TASKS", "detect_task", "get_task", "register_task"]

TASKS: dict[str, Task] = {}

# The order detection tries the tasks in: the more specific first. A registered task not named here (a plug-in)
# is tried after these and before FALLBACK, in the order it registered.
DETECTION_ORDER = (
    "text-pair-classification",  # a cross-encoder's config says so; before classification, which takes it too
    "image-classification",
    "image-embedding",
    "multi-embedding",  # before embedding: BGE-M3 also ships a sentence-transformers layout (its dense side)
    "sparse-embedding",  # before embedding, which takes every sentence-transformers layout
    "classification",
    "question-answering",
    "reranking",
    "token-classification",
    "zero-shot-classification",
)
# Tried last: a bare encoder is an embedder; the image side of a text-image model is never detected (ask for it).
FALLBACK = ("embedding", "image-embedding-text")


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
    plugins = [name for name in TASKS if name not in DETECTION_ORDER + FALLBACK]
    for name in (*DETECTION_ORDER, *plugins, *FALLBACK):
        task = TASKS.get(name)
        if task is not None and task.matches(checkpoint):
            return task
    raise UnsupportedModelError(
        f"cannot tell the task of {{path}} (architectures {checkpoint.architectures}); "
        f"name one of: {', '.join(sorted(TASKS))}",
        path=checkpoint.path,
    )
