"""The tasks we can deploy: one folder each, found through the registry.

A task folder holds its entry (``__init__.py``: a :class:`Task` subclass registered with
:func:`register_task`, and its settings section) and its step modules (``tokenizer.py``,
``postprocess.py``) when the shared ones do not fit. See the README's "Adding a task".
"""

from __future__ import annotations

# The built-in tasks register themselves on import.
from tritongen.tasks import (
    classification,
    embedding,
    image_classification,
    image_embedding,
    image_embedding_text,
    question_answering,
    reranking,
    text_pair_classification,
    token_classification,
    zero_shot_classification,
)
from tritongen.tasks._base import TRUNCATED, Task, TaskPlan, TaskSettings, TensorSpec
from tritongen.tasks._registry import (
    TASKS,
    detect_task,
    get_task,
    legacy_settings,
    register_task,
    settings_sections,
)
from tritongen.tasks.token_classification import ner_stride

__all__ = [
    "TASKS",
    "TRUNCATED",
    "Task",
    "TaskPlan",
    "TaskSettings",
    "TensorSpec",
    "classification",
    "detect_task",
    "embedding",
    "get_task",
    "image_classification",
    "image_embedding",
    "image_embedding_text",
    "legacy_settings",
    "ner_stride",
    "question_answering",
    "register_task",
    "reranking",
    "settings_sections",
    "text_pair_classification",
    "token_classification",
    "zero_shot_classification",
]
