"""Image embeddings of image-text models (CLIP, SigLIP): the vision tower and projection, ``get_image_features``.

The text side (``get_text_features``) is the ``image-embedding-text`` task, built from the same checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongen.contract import EMBEDDING
from tritongen.gates.accuracy import CosineGate
from tritongen.parameters import EmbeddingParameters
from tritongen.tasks._base import Binding, Task, TensorSpec, load_pretrained
from tritongen.tasks._images import IMAGE_INPUT, ImageInputs, ImagesSettings, image_step_parameters, pixel_module
from tritongen.tasks._registry import register_task
from tritongen.tasks._tensors import public

if TYPE_CHECKING:
    import torch

    from tritongen.model.checkpoint import Checkpoint

__all__ = ["IMAGE_TEXT_MODELS", "ImageEmbedding", "ImageTextSide"]

IMAGE_TEXT_MODELS = ("CLIPModel", "SiglipModel")


class ImageTextSide(Task):
    """The base of both sides of an image-text model: its checkpoints, and one ``EMBEDDING`` per input.

    The embedding is :meth:`embedding_size` values, not normalised, as transformers returns it. Not registered
    itself: each side is a task entry of its own.
    """

    gate = CosineGate
    postprocess_step = "tritongen.tasks.embedding.postprocess"

    def has_head(self, checkpoint: Checkpoint) -> bool:
        return any(a in IMAGE_TEXT_MODELS for a in checkpoint.architectures)

    def embedding_size(self, checkpoint: Checkpoint) -> int:
        """The width of this side's embedding."""
        raise NotImplementedError

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (self.embedding_size(checkpoint),)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [public(EMBEDDING, (self.embedding_size(checkpoint),))]

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return EmbeddingParameters(normalize=False).to_parameters()


@register_task
class ImageEmbedding(ImageTextSide):
    """``IMAGE`` -> ``EMBEDDING``: ``get_image_features`` (not normalised, as transformers returns it)."""

    name = "image-embedding"
    onnx_output = "image_embeds"
    truncates = False
    modality = ImageInputs()
    tokenizer_step = "tritongen.steps.image"
    section, Settings = "images", ImagesSettings

    def matches(self, checkpoint: Checkpoint) -> bool:
        return self.has_head(checkpoint)

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [IMAGE_INPUT]

    def embedding_size(self, checkpoint: Checkpoint) -> int:
        """CLIP projects to ``projection_dim``; SigLIP's image embedding is its vision tower's pooled width."""
        config = checkpoint.config
        if "projection_dim" in config:
            return int(config["projection_dim"])
        return int((config.get("vision_config") or {}).get("hidden_size", 768))

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        return image_step_parameters(bound)

    def card_lines(self, bound: Binding) -> list[str]:
        spec, checkpoint = bound.spec, bound.checkpoint
        return [
            f"- embedding: `get_image_features` of {', '.join(checkpoint.architectures)}, "
            f"{self.embedding_size(checkpoint)} dims, not normalised (normalise before cosine similarity)",
            f"- text side: `{spec.name}_text` when built from the same checkpoint with "
            f"`--task image-embedding-text --name {spec.name}_text` (TEXT -> EMBEDDING, `get_text_features`)",
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModel

        model = load_pretrained(AutoModel, checkpoint)
        return pixel_module(
            model, lambda m, pixel_values: m.get_image_features(pixel_values=pixel_values).pooler_output
        )
