"""The tasks' sections of the build spec (``question_answering: {doc_stride: 64}``), one settings class each.

They live below both the spec, which parses and validates them, and the tasks, which read them (a task names its
class as ``Settings``): the spec needs no task to load a file, and no task needs the spec to define its settings.
:data:`SECTIONS` is the table of them by section name; ``legacy_names`` keeps the old flat keys of earlier
versions (``qa_doc_stride``) working in files and on the command line.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, ClassVar

from tritongen.errors import SpecError
from tritongen.steps.image import DEFAULT_MAX_PIXELS
from tritongen.steps.ner import STRATEGIES

__all__ = [
    "DEFAULT_INSTRUCTION", "LONG_TEXT", "SECTIONS", "ClassificationSettings", "EmbeddingSettings", "ImagesSettings",
    "QuestionAnsweringSettings", "RerankingSettings", "SparseSettings", "TaskSettings", "TokenClassificationSettings",
    "ZeroShotSettings", "legacy_settings",
]  # fmt: skip

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"  # reranking
LONG_TEXT = ("truncate", "chunk")  # what an embedding does with a text longer than the model


@dataclass(frozen=True)
class TaskSettings:
    """A task's section of the build spec; subclasses are frozen dataclasses that check themselves.

    ``legacy_names`` maps the flat spec keys of earlier versions (``qa_doc_stride``) to fields of the section,
    so old YAML files and CLI flags keep working.
    """

    section: ClassVar[str] = ""  # the spec key of the section
    legacy_names: ClassVar[dict[str, str]] = {}
    # Command-line flags, by old flat name (``qa_doc_stride`` -> ``--qa-doc-stride``): argparse keywords.
    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {}

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`~tritongen.errors.SpecError` for settings that cannot work."""


@dataclass(frozen=True)
class ClassificationSettings(TaskSettings):
    """The ``classification`` section: which labels of a multi-label model go into ``LABELS``."""

    section: ClassVar[str] = "classification"

    multi_label_threshold: float = 0.5  # labels at or above this score
    multi_label_top_k: int = 0  # at most this many (0: no limit)

    legacy_names: ClassVar[dict[str, str]] = {
        "multi_label_threshold": "multi_label_threshold",
        "multi_label_top_k": "multi_label_top_k",
    }

    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "multi_label_threshold": {"type": float, "help": "multi-label: labels scoring at least this (default 0.5)"},
        "multi_label_top_k": {"type": int, "help": "multi-label: at most this many labels (default 0: all)"},
    }

    def validate(self) -> None:
        if not 0 <= self.multi_label_threshold <= 1 or self.multi_label_top_k < 0:
            raise SpecError("multi-label threshold must be in [0, 1] and top_k >= 0")


@dataclass(frozen=True)
class QuestionAnsweringSettings(TaskSettings):
    """The ``question_answering`` section: windows over long contexts, and which answers may win."""

    section: ClassVar[str] = "question_answering"

    max_seq_len: int | None = None  # window length; None: min(model max length, 384) as in transformers
    doc_stride: int | None = None  # window overlap; None: min(window // 2, 128) as in transformers
    max_answer_len: int = 15  # longest answer, in tokens
    handle_impossible_answer: bool = False  # the empty answer may win ("no answer")

    legacy_names: ClassVar[dict[str, str]] = {
        "qa_max_seq_len": "max_seq_len",
        "qa_doc_stride": "doc_stride",
        "qa_max_answer_len": "max_answer_len",
        "qa_handle_impossible_answer": "handle_impossible_answer",
    }

    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "qa_max_seq_len": {"type": int, "help": "QA window length in tokens (default min(max, 384))"},
        "qa_doc_stride": {"type": int, "help": "QA tokens shared by neighbouring windows (default 128)"},
        "qa_max_answer_len": {"type": int, "help": "QA longest answer in tokens (default 15)"},
        "qa_handle_impossible_answer": {
            "action": argparse.BooleanOptionalAction,
            "help": 'QA: allow the empty "no answer" to win',
        },
    }

    def validate(self) -> None:
        if self.max_answer_len < 1:
            raise SpecError(f"qa_max_answer_len must be >= 1, got {self.max_answer_len}")
        if self.max_seq_len is not None and self.max_seq_len < 8:
            raise SpecError(f"qa_max_seq_len must be >= 8, got {self.max_seq_len}")
        if self.doc_stride is not None and not 0 <= self.doc_stride < (self.max_seq_len or 1 << 30):
            raise SpecError(f"qa_doc_stride must be >= 0 and below qa_max_seq_len, got {self.doc_stride}")


@dataclass(frozen=True)
class TokenClassificationSettings(TaskSettings):
    """The ``token_classification`` section: entity grouping and the overlap of long-text windows."""

    section: ClassVar[str] = "token_classification"

    aggregation_strategy: str = "simple"  # none, simple, first, average or max (the transformers pipeline's)
    stride: int | None = None  # tokens neighbouring windows share; None: window/4 (<= 128), 0 for `none`

    legacy_names: ClassVar[dict[str, str]] = {"aggregation_strategy": "aggregation_strategy", "ner_stride": "stride"}

    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "aggregation_strategy": {
            "choices": STRATEGIES,
            "help": "token classification: how tokens are grouped into entities (default simple)",
        },
        "ner_stride": {
            "type": int,
            "help": "token classification: tokens neighbouring windows share (default window/4)",
        },
    }

    def validate(self) -> None:
        if self.aggregation_strategy not in STRATEGIES:
            raise SpecError(
                f"aggregation strategy `{self.aggregation_strategy}` is unknown; use one of {', '.join(STRATEGIES)}"
            )
        if self.stride is not None and self.stride < 0:
            raise SpecError(f"ner_stride must be >= 0, got {self.stride}")
        if self.stride and self.aggregation_strategy == "none":
            raise SpecError(
                "aggregation strategy `none` cannot merge overlapping windows (nor can the transformers pipeline): "
                "set ner_stride to 0 or choose simple, first, average or max"
            )


@dataclass(frozen=True)
class ZeroShotSettings(TaskSettings):
    """The ``zero_shot_classification`` section: the hypothesis each label becomes, and how scores normalise."""

    section: ClassVar[str] = "zero_shot_classification"

    hypothesis_template: str = "This example is {}."
    multi_label: bool = False  # each label on its own (entailment vs contradiction), not a softmax across labels

    legacy_names: ClassVar[dict[str, str]] = {
        "hypothesis_template": "hypothesis_template",
        "zero_shot_multi_label": "multi_label",
    }

    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "hypothesis_template": {"help": 'zero-shot: the hypothesis a label becomes (default "This example is {}.")'},
        "zero_shot_multi_label": {
            "action": argparse.BooleanOptionalAction,
            "help": "zero-shot: score each label on its own (entailment vs contradiction) instead of across labels",
        },
    }

    def validate(self) -> None:
        template = self.hypothesis_template
        try:
            formatted = template.format("label")
        except (IndexError, KeyError, ValueError) as exc:
            raise SpecError(f"hypothesis_template {template!r} cannot be formatted with a label: {exc!r}") from None
        if formatted == template:
            raise SpecError(f"hypothesis_template {template!r} has no {{}} where the label goes")


@dataclass(frozen=True)
class RerankingSettings(TaskSettings):
    """The ``reranking`` section: the instruction every (query, document) pair is judged under."""

    section: ClassVar[str] = "reranking"

    instruction: str = DEFAULT_INSTRUCTION

    legacy_names: ClassVar[dict[str, str]] = {"rerank_instruction": "instruction"}
    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "rerank_instruction": {"help": f'reranking: the instruction (default "{DEFAULT_INSTRUCTION}")'},
    }

    def validate(self) -> None:
        if not self.instruction.strip():
            raise SpecError("the reranking instruction must not be empty")


@dataclass(frozen=True)
class EmbeddingSettings(TaskSettings):
    """The ``embedding`` section: what a text longer than the model becomes.

    ``truncate`` cuts it at the model's length (``TRUNCATED`` says so), as sentence-transformers does; ``chunk``
    embeds it in overlapping windows of the model's length and averages their embeddings, weighted by the text
    tokens each window holds (``tritongen.tasks.embedding.postprocess.combine_windows``).
    """

    section: ClassVar[str] = "embedding"

    long_text: str = "truncate"
    chunk_overlap: int | None = None  # tokens neighbouring windows share; None: a quarter window, at most 128

    legacy_names: ClassVar[dict[str, str]] = {"long_text": "long_text", "chunk_overlap": "chunk_overlap"}
    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "long_text": {
            "choices": LONG_TEXT,
            "help": "embedding: a text longer than the model is cut there (truncate, the default) or embedded in "
            "overlapping windows whose embeddings are averaged (chunk)",
        },
        "chunk_overlap": {
            "type": int,
            "help": "embedding, long text chunk: tokens neighbouring windows share (default window/4, at most 128)",
        },
    }

    def validate(self) -> None:
        if self.long_text not in LONG_TEXT:
            raise SpecError(f"embedding long_text `{self.long_text}` is unknown; use truncate or chunk")
        if self.chunk_overlap is not None and self.chunk_overlap < 0:
            raise SpecError(f"embedding chunk_overlap must be >= 0, got {self.chunk_overlap}")
        if self.chunk_overlap is not None and self.long_text != "chunk":
            raise SpecError("embedding chunk_overlap applies to long_text chunk only; set long_text chunk or drop it")


@dataclass(frozen=True)
class ImagesSettings(TaskSettings):
    """The ``images`` section: the largest image (in pixels) the image step decodes."""

    section: ClassVar[str] = "images"

    max_pixels: int = DEFAULT_MAX_PIXELS

    legacy_names: ClassVar[dict[str, str]] = {"max_pixels": "max_pixels"}  # the flat key the CLI flag sets
    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "max_pixels": {"type": int, "help": f"images: refuse larger images undecoded (default {DEFAULT_MAX_PIXELS})"},
    }

    def validate(self) -> None:
        if self.max_pixels < 1:
            raise SpecError(f"images.max_pixels must be at least 1, got {self.max_pixels}")


@dataclass(frozen=True)
class SparseSettings(TaskSettings):
    """The ``sparse`` section: which weights of a sparse embedding the postprocess step keeps.

    Read by ``sparse-embedding`` and by the sparse output of ``multi-embedding``. By default every non-zero weight.
    """

    section: ClassVar[str] = "sparse"

    top_k: int = 0  # at most this many weights per text, the largest (0: no limit)
    threshold: float = 0.0  # only weights above this

    legacy_names: ClassVar[dict[str, str]] = {"sparse_top_k": "top_k", "sparse_threshold": "threshold"}
    cli_flags: ClassVar[dict[str, dict[str, Any]]] = {
        "sparse_top_k": {"type": int, "help": "sparse embeddings: at most this many weights per text (default 0: all)"},
        "sparse_threshold": {"type": float, "help": "sparse embeddings: only weights above this (default 0)"},
    }

    def validate(self) -> None:
        if self.top_k < 0:
            raise SpecError(f"sparse top_k must be >= 0 (0: no limit), got {self.top_k}")
        if self.threshold < 0:
            raise SpecError(f"sparse threshold must be >= 0, got {self.threshold}")


SECTIONS: dict[str, type[TaskSettings]] = {
    cls.section: cls
    for cls in (
        ClassificationSettings, QuestionAnsweringSettings, TokenClassificationSettings, ZeroShotSettings,
        RerankingSettings, EmbeddingSettings, ImagesSettings, SparseSettings,
    )
}  # fmt: skip


def legacy_settings() -> dict[str, tuple[str, str]]:
    """Old flat spec keys (``qa_doc_stride``) -> (section, field) of the nested sections."""
    return {old: (name, new) for name, cls in SECTIONS.items() for old, new in cls.legacy_names.items()}
