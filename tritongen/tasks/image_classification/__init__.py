"""Image classification: one label per image (``*ForImageClassification``, e.g. ViT)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.tasks._base import Binding, load_pretrained
from tritongen.tasks._images import IMAGE_INPUT, ImageInputs, ImagesSettings, image_step_parameters, pixel_module
from tritongen.tasks._registry import register_task
from tritongen.tasks.classification import Classification

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint
    from tritongen.model.fold import GraphTail
    from tritongen.tasks._base import TensorSpec

__all__ = ["ImageClassification"]


@register_task
class ImageClassification(Classification):
    """``IMAGE`` -> ``LABEL``, ``SCORE``, ``PROBABILITIES``: the classification postprocess step, on images.

    Multi-label checkpoints get ``LABELS`` at the default threshold (0.5, all labels).
    """

    name = "image-classification"
    head = "ForImageClassification"
    bench_baselines = False
    truncates = False
    modality = ImageInputs()
    tokenizer_step = "tritongen.steps.image"
    section, Settings = "images", ImagesSettings

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [IMAGE_INPUT]

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        return image_step_parameters(bound)

    def graph_tail(self, checkpoint: Checkpoint) -> GraphTail | None:
        return None  # the fold's proof feeds texts

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForImageClassification

        model = load_pretrained(AutoModelForImageClassification, checkpoint)
        return pixel_module(model, lambda m, pixel_values: m(pixel_values=pixel_values).logits)
