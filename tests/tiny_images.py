"""Tiny random image checkpoints (ViT classifier, CLIP, SigLIP), for tests.

Each checkpoint is built from a config (32x32 images, 8x8 patches, hidden 32, 2 layers) and saved with its
slow (PIL) transformers image processor's ``save_pretrained``, so ``preprocessor_config.json`` is what
transformers itself writes. CLIP and SigLIP also get a text tokenizer, from ``tests.tiny_checkpoints``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    CLIPConfig,
    CLIPImageProcessorPil,
    CLIPModel,
    SiglipConfig,
    SiglipImageProcessorPil,
    SiglipModel,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessorPil,
)

from tests.tiny_checkpoints import label_names, write_tokenizer_and_config

__all__ = ["IMAGE_ARCHITECTURES", "make_image_checkpoint"]

IMAGE_ARCHITECTURES = ("vit", "clip", "siglip")
_VISION = {
    "image_size": 32,
    "patch_size": 8,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "initializer_range": 0.5,  # far above the usual 0.02, so outputs of different images clearly differ
}
_TEXT_LENGTH = 16


def _text_config(arch: str, out_dir: Path) -> dict:
    """Save a tiny tokenizer (byte-level BPE for CLIP, SentencePiece-style Unigram for SigLIP); its text config."""
    tokenizer_arch = "roberta" if arch == "clip" else "xlm-roberta"
    config = write_tokenizer_and_config(tokenizer_arch, out_dir, _TEXT_LENGTH, 0.5)
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": _TEXT_LENGTH,
        "pad_token_id": config.pad_token_id,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
    }


def make_image_checkpoint(arch: str, out_dir: Path, *, num_labels: int = 3, seed: int = 0) -> Path:
    """Write a tiny random ``arch`` checkpoint (``vit``, ``clip`` or ``siglip``) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    square = {"height": 32, "width": 32}
    if arch == "vit":
        names = label_names(num_labels)
        config = ViTConfig(**_VISION, id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
        model = ViTForImageClassification(config)
        processor = ViTImageProcessorPil(size=square)
    elif arch == "clip":
        config = CLIPConfig(text_config=_text_config(arch, out_dir), vision_config=_VISION, projection_dim=16)
        config.initializer_factor = 1.0
        model = CLIPModel(config)
        processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size=square)
    elif arch == "siglip":
        config = SiglipConfig(text_config=_text_config(arch, out_dir), vision_config=_VISION)
        model = SiglipModel(config)
        processor = SiglipImageProcessorPil(size=square)
    else:
        raise ValueError(f"unknown image arch {arch!r}; choose one of {', '.join(IMAGE_ARCHITECTURES)}")
    model.eval().save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
