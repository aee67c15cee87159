"""The tasks we can deploy: one folder each, found through the registry.

A task folder holds its entry (``__init__.py``: a :class:`Task` subclass registered with
:func:`register_task`) and its step modules (``tokenizer.py``, ``postprocess.py``) when the shared ones
(``tritongen.steps``) do not fit. A task with settings of its own declares their section in its folder
(``settings.py``: a :class:`~tritongen.buildspec.sections.TaskSettings`) and names the class as the entry's
``Settings``; the image tasks share one, ``_image_settings.py``. See docs/tasks.md, "Adding a task".
"""

from __future__ import annotations

# The built-in tasks register themselves on import.
from tritongen.tasks import (
    classification,
    embedding,
    image_classification,
    image_embedding,
    image_embedding_text,
    multi_embedding,
    question_answering,
    reranking,
    sparse_embedding,
    text_pair_classification,
    token_classification,
    zero_shot_classification,
)
from tritongen.tasks._base import TRUNCATED_OUTPUT, Task, TensorSpec, reference_postprocess
from tritongen.tasks._plan import BuildPlan, Modality, TaskPlan
from tritongen.tasks._registry import (
    TASKS,
    detect_task,
    get_task,
    register_task,
)

__all__ = [
    "TASKS",
    "TRUNCATED_OUTPUT",
    "BuildPlan",
    "Modality",
    "Task",
    "TaskPlan",
    "TensorSpec",
    "classification",
    "detect_task",
    "embedding",
    "get_task",
    "image_classification",
    "image_embedding",
    "image_embedding_text",
    "multi_embedding",
    "question_answering",
    "reference_postprocess",
    "register_task",
    "reranking",
    "sparse_embedding",
    "text_pair_classification",
    "token_classification",
    "zero_shot_classification",
]
