"""The build spec's section for embedding: its settings, their checks and their command-line flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError

__all__ = ["LONG_TEXT", "EmbeddingSettings"]

LONG_TEXT = ("truncate", "chunk")  # what an embedding does with a text longer than the model


@dataclass(frozen=True)
class EmbeddingSettings(TaskSettings):
    """The ``embedding`` section: what a text longer than the model becomes.

    ``truncate`` cuts it at the model's length (``TRUNCATED`` says so), as sentence-transformers does; ``chunk``
    embeds it in overlapping windows of the model's length and averages their embeddings, weighted by the text
    tokens each window holds (``tritongen.tasks.embedding.postprocess.combine_windows``).
    """

    section: ClassVar[str] = "embedding"

    long_text: str = setting(
        "truncate",
        flag="long_text",
        choices=LONG_TEXT,
        help="embedding: a text longer than the model is cut there (truncate, the default) or embedded in "
        "overlapping windows whose embeddings are averaged (chunk)",
    )
    chunk_overlap: int | None = setting(  # tokens neighbouring windows share; None: a quarter window, at most 128
        None,
        flag="chunk_overlap",
        type=int,
        help="embedding, long text chunk: tokens neighbouring windows share (default window/4, at most 128)",
    )

    def validate(self) -> None:
        if self.long_text not in LONG_TEXT:
            raise SpecError(f"embedding long_text `{self.long_text}` is unknown; use truncate or chunk")
        if self.chunk_overlap is not None and self.chunk_overlap < 0:
            raise SpecError(f"embedding chunk_overlap must be >= 0, got {self.chunk_overlap}")
        if self.chunk_overlap is not None and self.long_text != "chunk":
            raise SpecError("embedding chunk_overlap applies to long_text chunk only; set long_text chunk or drop it")
