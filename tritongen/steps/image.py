"""Triton Python-backend image step: ``IMAGE`` (encoded JPEG/PNG bytes) -> ``pixel_values`` [3, H, W] FP32.

It replaces the tokenizer step for image tasks. Each image is decoded with Pillow, turned upright by its
EXIF orientation, converted to RGB, then resized, centre-cropped, rescaled and normalised exactly as the
checkpoint's slow (PIL) transformers image processor does (``BaseImageProcessor`` with the PIL backend):
PIL ``resize`` on the uint8 image, a centre crop padded with zeros when the image is smaller, ``x * rescale``
in float64 cast to float32, then ``(x - mean) / std`` in float32.

RGB conversion follows the processor: with ``do_convert_rgb`` an image with transparency is composited onto
white; without it (the processor would then refuse grey or RGBA images) the image is converted as the
transformers pipeline's ``load_image`` does (``Image.convert("RGB")``).

Settings come from the config's ``parameters`` (the build copies them from the image processor):
``do_resize``, ``size`` ("HxW", or "shortest_edge=N"), ``resample`` (a PIL filter number), ``do_center_crop``,
``crop_size`` ("HxW"), ``do_rescale``, ``rescale_factor``, ``do_normalize``, ``image_mean``, ``image_std``
(comma-separated), ``do_convert_rgb`` and ``max_pixels`` (larger images are refused before they are decoded).
A corrupt, truncated, empty or oversized image is that request's INVALID_ARG error; the server keeps serving.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from _tritongen_step._common import input_error, model_parameters, pb_utils
from _tritongen_step.contract import IMAGE, PIXEL_VALUES
from _tritongen_step.parameters import StepParameters

__all__ = ["DEFAULT_MAX_PIXELS", "ImageEncoder", "ImageSettings", "TritonPythonModel"]

DEFAULT_MAX_PIXELS = 40_000_000  # about 7300 x 5500: beyond any camera photo a classifier needs, far below a bomb


def _hw(value: str) -> tuple[int, int]:
    height, width = value.lower().split("x")
    return int(height), int(width)


@dataclass(frozen=True)
class ImageSettings(StepParameters):
    """The image processor's settings: the step's config parameters, as the build writes and the step reads them."""

    do_resize: bool = True
    size: str = "224x224"  # "HxW", or "shortest_edge=N"
    resample: int = 2  # PIL.Image.Resampling.BILINEAR
    do_center_crop: bool = False
    crop_size: str | None = None  # "HxW"
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    image_std: tuple[float, ...] = (0.5, 0.5, 0.5)
    do_convert_rgb: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS

    @property
    def height_width(self) -> tuple[int, int] | None:
        """The fixed (height, width) images are resized to; None where the shortest edge is set instead."""
        return None if self.shortest_edge is not None else _hw(self.size)

    @property
    def shortest_edge(self) -> int | None:
        """The length the shorter edge is resized to, keeping the aspect ratio; None for a fixed size."""
        prefix = "shortest_edge="
        return int(self.size[len(prefix) :]) if self.size.startswith(prefix) else None

    @property
    def crop(self) -> tuple[int, int] | None:
        """The centre crop's (height, width), if any."""
        return None if self.crop_size is None else _hw(self.crop_size)


class ImageEncoder:
    """Decode encoded images and turn them into the model's ``pixel_values``, as the image processor does."""

    input_names = (PIXEL_VALUES,)

    def __init__(self, settings: ImageSettings) -> None:
        self.settings = settings

    def decode(self, data: bytes, row: int = 0) -> Any:
        """An upright RGB PIL image from encoded bytes; ValueError naming the row for anything unreadable."""
        from PIL import Image, ImageOps

        if not data:
            raise ValueError(f"IMAGE[{row}] is empty")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Pillow's own bomb warning: our limit below decides
                image = Image.open(io.BytesIO(data))
                width, height = image.size  # from the header: nothing is decoded yet
                if width * height > self.settings.max_pixels:
                    raise ValueError(f"IMAGE[{row}] is {width}x{height} pixels, {self._too_many}")
                image.load()
                image = ImageOps.exif_transpose(image)
        except ValueError:
            raise
        except Image.DecompressionBombError:  # Pillow's own limit, above twice its MAX_IMAGE_PIXELS, hit first
            raise ValueError(f"IMAGE[{row}] is {self._too_many}") from None
        except Exception as exc:  # Pillow raises OSError, SyntaxError, struct errors... for bad files
            kind = "not an image Pillow can read" if isinstance(exc, Image.UnidentifiedImageError) else str(exc)
            raise ValueError(f"IMAGE[{row}] cannot be decoded: {kind}") from None
        return self.to_rgb(image)

    @property
    def _too_many(self) -> str:
        return f"more than the {self.settings.max_pixels} pixels this model takes (max_pixels)"

    def to_rgb(self, image: Any) -> Any:
        """RGB as the processor converts it (alpha onto white), or as the pipeline's ``load_image`` does."""
        from PIL import Image

        if image.mode == "RGB":
            return image
        if self.settings.do_convert_rgb and ("A" in image.getbands() or image.info.get("transparency") is not None):
            rgba = image.convert("RGBA")
            background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            return Image.alpha_composite(background, rgba).convert("RGB")
        return image.convert("RGB")

    def pixels(self, image: Any) -> np.ndarray:
        """[3, H, W] float32 of one RGB PIL image: resize, centre crop, rescale, normalise."""
        s = self.settings
        if s.do_resize:
            height, width = self._resized_size(image.size[1], image.size[0])
            image = image.resize((width, height), resample=s.resample)
        array = np.moveaxis(np.asarray(image), -1, 0)  # CHW uint8
        if s.do_center_crop and s.crop is not None:
            array = _center_crop(array, *s.crop)
        values = (array.astype(np.float64) * s.rescale_factor).astype(np.float32) if s.do_rescale else array
        if s.do_normalize:
            values = values.astype(np.float32) if not np.issubdtype(values.dtype, np.floating) else values
            mean = np.array(s.image_mean, dtype=values.dtype)
            std = np.array(s.image_std, dtype=values.dtype)
            values = ((values.T - mean) / std).T
        return np.ascontiguousarray(values, dtype=np.float32)

    def _resized_size(self, height: int, width: int) -> tuple[int, int]:
        s = self.settings
        if s.height_width is not None:
            return s.height_width
        assert s.shortest_edge is not None
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = s.shortest_edge, int(s.shortest_edge * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)

    def encode(self, images: Sequence[bytes]) -> list[np.ndarray]:
        """Each image's [3, H, W] pixels; ValueError for the first image that cannot be read."""
        return [self.pixels(self.decode(data, row)) for row, data in enumerate(images)]

    def pack(self, pixels: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """Stack encoded images into the model's inputs."""
        return {PIXEL_VALUES: np.stack(list(pixels)).astype(np.float32)}

    def __call__(self, images: Sequence[bytes]) -> dict[str, np.ndarray]:
        """Decode, preprocess and stack in one step."""
        return self.pack(self.encode(images))


def _center_crop(array: np.ndarray, crop_height: int, crop_width: int) -> np.ndarray:
    """The ``center_crop`` of transformers on a CHW array, zero-padding an image smaller than the crop."""
    _, height, width = array.shape
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    if top >= 0 and left >= 0:
        return array[:, top : top + crop_height, left : left + crop_width]
    new_height, new_width = max(crop_height, height), max(crop_width, width)
    padded = np.zeros((array.shape[0], new_height, new_width), dtype=array.dtype)
    top_pad, left_pad = -(-(new_height - height) // 2), -(-(new_width - width) // 2)
    padded[:, top_pad : top_pad + height, left_pad : left_pad + width] = array
    top, left = top + top_pad, left + left_pad
    return padded[:, max(0, top) : min(new_height, top + crop_height), max(0, left) : min(new_width, left + crop_width)]


def _image_bytes(array: np.ndarray) -> list[bytes]:
    """The rows of a TYPE_STRING tensor of shape [batch, 1] as bytes."""
    return [item if isinstance(item, bytes) else str(item).encode() for item in array.reshape(-1)]


class TritonPythonModel:
    """The image step: every image of every request in one ``execute``, one response per request."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read the image processor's settings from the model config."""
        config = json.loads(args["model_config"])
        self.encoder = ImageEncoder(ImageSettings.from_parameters(model_parameters(config)))
        self.output_names = [out["name"] for out in config["output"]]

    def execute(self, requests: list[Any]) -> list[Any]:
        """Preprocess all images, then answer each request (a bad image fails its own request only)."""
        responses = []
        for request in requests:
            images = _image_bytes(pb_utils.get_input_tensor_by_name(request, IMAGE).as_numpy())
            try:
                arrays = self.encoder(images)
            except ValueError as exc:
                responses.append(pb_utils.InferenceResponse(error=input_error(pb_utils, str(exc))))
                continue
            tensors = [pb_utils.Tensor(name, arrays[name]) for name in self.output_names]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
