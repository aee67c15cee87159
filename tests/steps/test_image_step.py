"""The image step's own code: the slow transformers image processor reproduced bit for bit, settings, errors."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest

from tests import pb_stub
from tests.tiny_images import make_image_checkpoint
from tritongen.gates.image_parity import parity_images, reference_image
from tritongen.steps.image import ImageEncoder, ImageSettings
from tritongen.tasks._images import image_settings


@pytest.fixture(scope="module")
def processors(tmp_path_factory):
    from transformers import AutoImageProcessor

    root = tmp_path_factory.mktemp("image-processors")
    return {
        arch: AutoImageProcessor.from_pretrained(str(make_image_checkpoint(arch, root / arch)), use_fast=False)
        for arch in ("vit", "clip", "siglip")
    }


@pytest.mark.build  # makes the tiny image checkpoints
@pytest.mark.parametrize("arch", ["vit", "clip", "siglip"])
def test_image_encoder_equals_slow_processor_when_images_vary(processors, arch):
    processor = processors[arch]
    encoder = ImageEncoder(image_settings(processor))
    images = parity_images()
    served = encoder(list(images.values()))["pixel_values"]
    for name, pixels in zip(images, served, strict=True):
        expected = processor(images=reference_image(images[name], processor.do_convert_rgb), return_tensors="np")
        np.testing.assert_array_equal(pixels, expected["pixel_values"][0], err_msg=name)


@pytest.mark.build  # makes the tiny image checkpoints
def test_image_settings_survive_config_parameters_when_round_tripped(processors):
    for processor in processors.values():
        settings = image_settings(processor)
        assert ImageSettings.from_parameters(settings.to_parameters()) == settings
        assert all(settings.to_parameters().values())  # protobuf's JSON would drop an empty value


def _png(width: int, height: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "teal").save(buffer, format="PNG")
    return buffer.getvalue()


def test_image_encoder_refuses_image_undecoded_when_above_max_pixels():
    encoder = ImageEncoder(ImageSettings(size="8x8", max_pixels=400))
    assert encoder([_png(20, 20)])["pixel_values"].shape == (1, 3, 8, 8)
    with pytest.raises(ValueError, match=r"IMAGE\[1\] is 21x20 pixels, more than the 400 pixels"):
        encoder([_png(20, 20), _png(21, 20)])


def test_image_step_answers_each_request_on_its_own_when_one_image_in_a_batch_is_bad(monkeypatch):
    from tritongen.steps import image

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb_stub)
    monkeypatch.setattr(image, "pb_utils", pb_stub)
    config = {
        "output": [{"name": "pixel_values"}],
        "parameters": {k: {"string_value": v} for k, v in ImageSettings(size="8x8").to_parameters().items()},
    }
    step = image.TritonPythonModel()
    step.initialize({"model_config": json.dumps(config)})
    requests = [
        pb_stub.Request({"IMAGE": pb_stub.texts(_png(5, 9), _png(30, 2))}),
        pb_stub.Request({"IMAGE": pb_stub.texts(_png(5, 9), b"\x89PNG broken")}),
        pb_stub.Request({"IMAGE": pb_stub.texts(_png(3, 3))}),
    ]
    good, bad, alone = step.execute(requests)
    assert good.error is None and good.output("pixel_values").shape == (2, 3, 8, 8)
    assert bad.error.code() == pb_stub.TritonError.INVALID_ARG
    assert bad.error.message() == "IMAGE[1] cannot be decoded: not an image Pillow can read"
    assert alone.output("pixel_values").shape == (1, 3, 8, 8)
