"""The parity gate for image models: the image step's own code and ONNX Runtime against transformers and PyTorch.

The served path is the image step's :class:`~tritongen.steps.image.ImageEncoder` on the encoded bytes,
then ONNX Runtime on the exported file, all images in one batch. The reference is the checkpoint's slow (PIL)
transformers image processor (``use_fast=False``: the fast ones need torchvision, which cannot sit beside our
torch) on the decoded image, then the PyTorch module, one image at a time. The images are drawn with Pillow:
gradients, shapes, sizes and aspect ratios, an image smaller than the model's input, RGBA, greyscale, JPEG and
PNG. Pixel values and outputs must agree within the parity tolerance, and the argmax must be the same.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.contract import PIXEL_VALUES
from tritongen.gates.parity import ParityReport, ParityRow

__all__ = ["check_image_parity", "parity_images", "reference_image"]


def _encoded(image: Any, fmt: str, **kwargs: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


@cache
def parity_images() -> dict[str, bytes]:
    """Encoded images drawn with Pillow, by name (the name says the format)."""
    from PIL import Image, ImageDraw

    gradient = Image.new("RGB", (64, 48))
    gradient.putdata([(x * 4, y * 5, (x + y) * 2) for y in range(48) for x in range(64)])
    shapes = Image.new("RGB", (40, 90), "navy")
    draw = ImageDraw.Draw(shapes)
    draw.ellipse((4, 10, 36, 42), fill="orange")
    draw.rectangle((8, 50, 30, 85), fill="lime", outline="white")
    wide = Image.new("RGB", (300, 40), "white")
    ImageDraw.Draw(wide).line((0, 0, 299, 39), fill="red", width=5)
    rgba = Image.new("RGBA", (50, 50), (0, 0, 0, 0))
    ImageDraw.Draw(rgba).polygon([(5, 45), (25, 5), (45, 45)], fill=(200, 30, 90, 180))
    grey = Image.new("L", (33, 47))
    grey.putdata([(x * 7 + y * 3) % 256 for y in range(47) for x in range(33)])
    noise = Image.frombytes("RGB", (257, 190), np.random.default_rng(0).integers(0, 256, 257 * 190 * 3, np.uint8))
    return {
        "gradient.png": _encoded(gradient, "PNG"),
        "gradient.jpg": _encoded(gradient, "JPEG", quality=90),
        "shapes.jpg": _encoded(shapes, "JPEG", quality=85),
        "wide.png": _encoded(wide, "PNG"),
        "rgba.png": _encoded(rgba, "PNG"),
        "grey.png": _encoded(grey, "PNG"),
        "grey.jpg": _encoded(grey, "JPEG"),
        "noise.jpg": _encoded(noise, "JPEG", quality=95),
        "tiny.png": _encoded(Image.new("RGB", (7, 5), "purple"), "PNG"),  # smaller than the model's input
    }


def reference_image(data: bytes, convert_rgb: bool) -> Any:
    """The decoded image the reference processor gets: upright by its EXIF orientation.

    RGB as the pipeline's ``load_image`` makes it, unless the processor converts itself (``do_convert_rgb``:
    alpha onto white).
    """
    from PIL import Image, ImageOps

    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    return image if convert_rgb else image.convert("RGB")


def check_image_parity(
    module: Any,
    processor: Any,
    encoder: Any,
    onnx_path: Path,
    *,
    tolerance: float,
    images: Mapping[str, bytes] | None = None,
) -> ParityReport:
    """Compare the served path with the transformers processor and PyTorch on ``images``; never raises."""
    import onnxruntime as ort
    import torch
    from PIL import Image

    images = dict(parity_images() if images is None else images)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    served_pixels = encoder(list(images.values()))[PIXEL_VALUES]
    exported = session.run(None, {PIXEL_VALUES: served_pixels})[0]
    rows, mismatches = [], []
    for (name, data), pixels, exported_row in zip(images.items(), served_pixels, exported, strict=True):
        reference_pixels = processor(images=reference_image(data, bool(processor.do_convert_rgb)), return_tensors="pt")[
            PIXEL_VALUES
        ]
        same_shape = reference_pixels.shape[1:] == pixels.shape
        if not same_shape or float(np.abs(reference_pixels[0].numpy() - pixels).max()) > tolerance:
            mismatches.append(name)
        with torch.no_grad():
            reference = module(pixel_values=reference_pixels).numpy()[0]
        with Image.open(io.BytesIO(data)) as opened:
            label, size = f"{name} ({opened.width}x{opened.height} {opened.mode})", opened.width * opened.height
        rows.append(
            ParityRow(
                text=label,
                tokens=size,
                truncated=False,
                max_abs_diff=float(np.abs(reference - exported_row).max()),
                argmax_reference=(int(reference.argmax()),),
                argmax_exported=(int(exported_row.argmax()),),
            )
        )
    return ParityReport(rows=rows, tolerance=tolerance, tokenizer_mismatches=mismatches, inputs="image")
