"""The build spec's section for the image tasks: its settings, their checks and their command-line flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tritongen.buildspec.sections import TaskSettings, setting
from tritongen.errors import SpecError
from tritongen.steps.image import DEFAULT_MAX_PIXELS

__all__ = ["ImagesSettings"]


@dataclass(frozen=True)
class ImagesSettings(TaskSettings):
    """The ``images`` section: the largest image (in pixels) the image step decodes."""

    section: ClassVar[str] = "images"

    max_pixels: int = setting(
        DEFAULT_MAX_PIXELS,
        flag="max_pixels",
        type=int,
        help=f"images: refuse larger images undecoded (default {DEFAULT_MAX_PIXELS})",
    )

    def validate(self) -> None:
        if self.max_pixels < 1:
            raise SpecError(f"images.max_pixels must be at least 1, got {self.max_pixels}")
