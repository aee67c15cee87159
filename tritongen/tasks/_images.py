"""Image inputs: encoded JPEG/PNG bytes (``IMAGE``) -> the image step -> ``pixel_values`` [3, H, W] FP32.

The image step (``tritongen/steps/image.py``) replaces the tokenizer step and reproduces the
checkpoint's slow transformers image processor, whose settings (from ``preprocessor_config.json``) the build
copies into the step's config parameters. Parity runs on Pillow-drawn images (``tritongen.gates.image_parity``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritongen.contract import IMAGE, PIXEL_VALUES
from tritongen.errors import CheckpointError, SpecError, UnsupportedModelError
from tritongen.steps.image import ImageEncoder, ImageSettings
from tritongen.tasks._image_settings import ImagesSettings
from tritongen.tasks._plan import BuildPlan, Modality
from tritongen.tasks._tensors import TensorSpec, public

if TYPE_CHECKING:
    import torch

    from tritongen.buildspec import BuildSpec
    from tritongen.gates.parity import ParityReport
    from tritongen.model.checkpoint import Checkpoint
    from tritongen.model.facts import ModelFacts
    from tritongen.tasks._base import Binding

__all__ = [
    "IMAGE_INPUT", "ImageInputs", "ImagesSettings", "image_settings", "image_size", "image_step_parameters",
    "pixel_module",
]  # fmt: skip

IMAGE_INPUT = public(IMAGE)  # encoded JPEG/PNG bytes, one image per row


def image_size(checkpoint: Checkpoint) -> tuple[int, int]:
    """(height, width) the vision model takes, from its config (``vision_config`` for image-text models)."""
    config = checkpoint.config.get("vision_config") or checkpoint.config
    size = config.get("image_size", 224)
    height, width = (size, size) if isinstance(size, int) else size
    return int(height), int(width)


def pixel_module(model: Any, forward: Callable[[Any, torch.Tensor], torch.Tensor]) -> torch.nn.Module:
    """Wrap ``model`` as ``forward(pixel_values)`` -> ``forward(model, pixel_values)`` (one tensor)."""
    import torch

    class PixelModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return forward(self.model, pixel_values)

    return PixelModule().eval()


class ImageInputs(Modality):
    """Images: the slow transformers image processor as reference, the image step as served code."""

    name = "image"
    records_canary = False  # a roll-out canary sends text; image versions are switched with `serve` reloads
    counts_tokens = False  # an image has no tokens

    def check_spec(self, spec: BuildSpec, *, serves_onnx: bool) -> None:
        if spec.precision != "fp32" or spec.optimize or not serves_onnx:
            raise SpecError(
                "image models are built as FP32 for ONNX Runtime only: the accuracy gate of FP16, INT8, fusions and "
                "the openvino and tensorrt runtimes measures texts (build with --precision fp32 --runtime onnx)"
            )

    def load(self, checkpoint: Checkpoint) -> Any:
        from transformers import AutoImageProcessor

        path = checkpoint.path
        if not (path / "preprocessor_config.json").is_file():
            raise CheckpointError("checkpoint {path} has no preprocessor_config.json (its image processor)", path=path)
        try:  # the slow PIL processor: the fast one needs torchvision, which cannot sit beside our torch
            processor = AutoImageProcessor.from_pretrained(str(path), use_fast=False)
        except Exception as exc:  # processor loading raises many types for bad files
            raise CheckpointError(
                f"cannot load the image processor of {{path}}: {str(exc).splitlines()[0]}", path=path
            ) from None
        image_settings(processor)  # refuses what the image step cannot reproduce
        return processor

    def facts(self, module: Any, preprocessor: Any, cap: int | None = None) -> ModelFacts:
        from tritongen.model.facts import ModelFacts

        config = getattr(module.model.config, "vision_config", None) or module.model.config
        size = int(getattr(config, "image_size", 224))
        patch = int(getattr(config, "patch_size", 1))
        return ModelFacts((PIXEL_VALUES,), size, f"{size}x{size} pixel images in {patch}x{patch} patches")

    def step_facts(self, preprocessor: Any) -> tuple[dict[str, str], int]:
        return image_settings(preprocessor).to_parameters(), 0

    def tensors(self, checkpoint: Checkpoint, names: Sequence[str]) -> list[TensorSpec]:
        return [TensorSpec(PIXEL_VALUES, "TYPE_FP32", (3, *image_size(checkpoint)))]

    def encoder(self, plan: BuildPlan, step_dir: Path) -> ImageEncoder:
        return ImageEncoder(ImageSettings.from_parameters(plan.bound.tokenizer_parameters))

    def samples(self) -> Sequence[bytes]:
        from tritongen.gates.image_parity import parity_images

        return list(parity_images().values())

    def export_sample(self, encoder: Any) -> dict[str, Any]:
        return encoder(list(self.samples())[:2])

    def dynamic_axes(self, plan: BuildPlan) -> Mapping[str, Mapping[int, str]]:
        return {PIXEL_VALUES: {}}

    def parity(self, plan: BuildPlan, encoder: Any, onnx_path: Path) -> ParityReport:
        from tritongen.gates.image_parity import check_image_parity

        return check_image_parity(
            plan.module, plan.hf_tokenizer, encoder, onnx_path, tolerance=plan.spec.parity_tolerance
        )

    def card_lines(self, plan: BuildPlan) -> list[str]:
        s = ImageSettings.from_parameters(plan.bound.tokenizer_parameters)
        resize = f"shortest edge {s.shortest_edge}" if s.shortest_edge is not None else s.size
        crop = f", centre crop {s.crop_size}" if s.do_center_crop and s.crop_size else ""
        return [
            f"- model input: {plan.facts.limit_source}",
            f"- image step: Pillow decode, EXIF orientation, RGB, resize {resize} (PIL filter {s.resample}){crop}, "
            f"rescale {s.rescale_factor:.6g}, normalise mean {list(s.image_mean)} std {list(s.image_std)} "
            "(the checkpoint's image processor, slow PIL path)",
            f"- images above {s.max_pixels} pixels are refused undecoded (`images.max_pixels`)",
        ]


def image_step_parameters(bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
    """An image task's (image step, postprocess) parameters: the processor's settings, with the spec's pixel limit."""
    assert isinstance(bound.settings, ImagesSettings)
    step = dataclasses.replace(ImageSettings.from_parameters(bound.facts), max_pixels=bound.settings.max_pixels)
    return step.to_parameters(), {}


def image_settings(processor: Any) -> ImageSettings:
    """The image step's settings from a loaded slow image processor; refuse what the step cannot reproduce."""

    def get(name: str, default: Any = None) -> Any:
        return getattr(processor, name, default)

    size, crop = get("size"), get("crop_size")
    if get("do_pad") or get("do_reduce_labels") or size is None:
        raise UnsupportedModelError(f"image processor `{type(processor).__name__}` pads or has no size; not supported")
    if get("size").height and get("size").width:
        resize = f"{int(size.height)}x{int(size.width)}"
    elif size.shortest_edge and not size.longest_edge:
        resize = f"shortest_edge={int(size.shortest_edge)}"
    else:
        raise UnsupportedModelError(
            f"image processor size {dict(size)} is not supported (height/width or shortest_edge)"
        )
    return ImageSettings(
        do_resize=bool(get("do_resize", True)),
        size=resize,
        resample=int(get("resample", 2)),
        do_center_crop=bool(get("do_center_crop")),
        crop_size=f"{int(crop.height)}x{int(crop.width)}" if crop is not None and crop.height else None,
        do_rescale=bool(get("do_rescale", True)),
        rescale_factor=float(get("rescale_factor", 1 / 255)),
        do_normalize=bool(get("do_normalize", True)),
        image_mean=tuple(float(v) for v in get("image_mean", (0.5, 0.5, 0.5))),
        image_std=tuple(float(v) for v in get("image_std", (0.5, 0.5, 0.5))),
        do_convert_rgb=bool(get("do_convert_rgb")),
    )
