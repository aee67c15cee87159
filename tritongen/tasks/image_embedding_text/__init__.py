"""The text side of image-text models (CLIP, SigLIP): ``TEXT`` -> ``EMBEDDING`` through ``get_text_features``.

Built from the same checkpoint as its image side (``image-embedding``), under its own name: one checkpoint, two
ensembles (``clip`` for images, ``clip_text`` for texts), each a complete ensemble of its own. The text goes
through the ordinary tokenizer step. CLIP pools at the end-of-text token and reads the attention mask;
SigLIP's text tower reads no mask and pools the last position, so every text is padded to the model's maximum
length, as its processor does (``padding=PaddingStrategy.MAX_LENGTH``); parity pads the reference the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tritongen.contract import ATTENTION_MASK, INPUT_IDS
from tritongen.errors import SpecError
from tritongen.tasks._base import Binding, load_pretrained
from tritongen.tasks._inputs import TextInputs
from tritongen.tasks._registry import register_task
from tritongen.tasks.image_embedding import ImageTextSide

if TYPE_CHECKING:
    import torch

    from tritongen.buildspec import BuildSpec
    from tritongen.model.checkpoint import Checkpoint
    from tritongen.model.facts import ModelFacts

__all__ = ["ImageEmbeddingText", "TextTowerInputs"]


class TextTowerInputs(TextInputs):
    """Text read by the text tower of an image-text model (``module.model.text_model``)."""

    def check_spec(self, spec: BuildSpec, *, serves_onnx: bool) -> None:
        if spec.precision != "fp32" or spec.optimize or not serves_onnx:
            raise SpecError(
                "the text side of image-text models is built as FP32 for ONNX Runtime only: the accuracy gate pads "
                "texts to the longest, where SigLIP needs its fixed length (build with --precision fp32 --runtime onnx)"
            )

    def facts(self, module: Any, preprocessor: Any, cap: int | None = None) -> ModelFacts:
        from tritongen.model.facts import read_model_facts
        from tritongen.tasks._inputs import _probe_token

        return read_model_facts(module, _probe_token(preprocessor), model=module.model.text_model, cap=cap)


@register_task
class ImageEmbeddingText(ImageTextSide):
    """``TEXT`` -> ``EMBEDDING``, ``TRUNCATED``: ``get_text_features`` (not normalised, as transformers returns it)."""

    name = "image-embedding-text"
    onnx_output = "text_embeds"
    modality = TextTowerInputs()

    def matches(self, checkpoint: Checkpoint) -> bool:
        return False

    def embedding_size(self, checkpoint: Checkpoint) -> int:
        """CLIP projects to ``projection_dim``; SigLIP's text head to ``projection_size`` (by default its width)."""
        config = checkpoint.config
        if "projection_dim" in config:
            return int(config["projection_dim"])
        text = config.get("text_config") or {}
        return int(text.get("projection_size") or text.get("hidden_size", 768))

    def card_lines(self, bound: Binding) -> list[str]:
        checkpoint = bound.checkpoint
        return [
            f"- embedding: `get_text_features` of {', '.join(checkpoint.architectures)}, "
            f"{self.embedding_size(checkpoint)} dims, not normalised; the image side is the `image-embedding` task"
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModel

        model = load_pretrained(AutoModel, checkpoint)
        return _text_tower(model, masked=ATTENTION_MASK in _text_inputs(model))


def _text_inputs(model: Any) -> tuple[str, ...]:
    """What the checkpoint's processor feeds the text tower: SigLIP's tokenizer gives ``input_ids`` only."""
    return (INPUT_IDS,) if model.config.model_type == "siglip" else (INPUT_IDS, ATTENTION_MASK)


def _text_tower(model: Any, *, masked: bool) -> torch.nn.Module:
    """``forward(input_ids[, attention_mask])`` -> ``get_text_features(...).pooler_output``.

    Without the mask for a text tower trained on fixed-length rows without one (SigLIP): the forward signature
    is what the build feeds (``tritongen.model.facts``).
    """
    import torch

    class TextTower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output

    class UnmaskedTextTower(TextTower):
        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return self.model.get_text_features(input_ids=input_ids).pooler_output

    return (TextTower() if masked else UnmaskedTextTower()).eval()
