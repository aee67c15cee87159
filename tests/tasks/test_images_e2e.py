"""Images end to end: tiny ViT, CLIP and SigLIP checkpoints built, gated and served by the real tritonserver.

CLIP and SigLIP are built twice from one checkpoint: ``clip`` (IMAGE -> EMBEDDING) and ``clip_text`` (TEXT ->
EMBEDDING).

Served outputs are compared with transformers (the slow PIL image processor, then PyTorch; the
image-classification pipeline for ViT). Corrupt, truncated, huge and empty images get INVALID_ARGUMENT and the
server keeps serving.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest

from tests.tiny_images import make_image_checkpoint
from tritongen.builder.pipeline import build_repository
from tritongen.builder.spec import load_spec
from tritongen.errors import SpecError
from tritongen.gates.image_parity import parity_images, reference_image

pytestmark = pytest.mark.e2e

IMAGES = parity_images()
NAMES = ["gradient.jpg", "rgba.png", "grey.png", "wide.png", "tiny.png", "noise.jpg"]


@pytest.fixture(scope="module")
def checkpoints(checkpoint_cache):
    return {arch: checkpoint_cache(make_image_checkpoint, arch, seed=3) for arch in ("vit", "clip", "siglip")}


@pytest.fixture(scope="module")
def built(checkpoints, builds):
    made = {arch: builds(path, arch) for arch, path in checkpoints.items()}  # the task is detected from the arch
    tasks = {arch: one.result.task for arch, one in made.items()}
    assert tasks == {"vit": "image-classification", "clip": "image-embedding", "siglip": "image-embedding"}
    for arch in ("clip", "siglip"):  # the text side: a second ensemble from the same checkpoint
        made[f"{arch}_text"] = builds(checkpoints[arch], f"{arch}_text", task="image-embedding-text")
        assert made[f"{arch}_text"].result.task == "image-embedding-text"
    return made


@pytest.fixture(scope="module")
def served(built, shared_server):
    return shared_server.serve(*built.values())


def _infer(server, name: str, images: list[bytes], outputs: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[data] for data in images], dtype=np.object_))
    result = client.infer(name, [tensor], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


def _reference(checkpoint, names: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoImageProcessor, AutoModel

    processor = AutoImageProcessor.from_pretrained(str(checkpoint), use_fast=False)
    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    pixels = processor(
        images=[reference_image(IMAGES[n], processor.do_convert_rgb) for n in names], return_tensors="pt"
    )
    with torch.no_grad():
        return model.get_image_features(pixel_values=pixels["pixel_values"]).pooler_output.numpy()


def test_image_classification_matches_transformers_pipeline_when_served(served, checkpoints):
    from PIL import Image
    from transformers import AutoImageProcessor, pipeline

    got = _infer(served, "vit", [IMAGES[n] for n in NAMES], ["LABEL", "SCORE", "PROBABILITIES"])
    processor = AutoImageProcessor.from_pretrained(str(checkpoints["vit"]), use_fast=False)
    classify = pipeline("image-classification", model=str(checkpoints["vit"]), image_processor=processor)
    for row, name in enumerate(NAMES):
        expected = classify(Image.open(io.BytesIO(IMAGES[name])), top_k=None)
        by_label = {e["label"]: e["score"] for e in expected}
        assert got["LABEL"][row][0].decode() == expected[0]["label"], name
        assert got["SCORE"][row][0] == pytest.approx(expected[0]["score"], abs=1e-4)
        id2label = classify.model.config.id2label
        np.testing.assert_allclose(got["PROBABILITIES"][row], [by_label[id2label[i]] for i in range(3)], atol=1e-4)


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_image_embedding_matches_get_image_features_when_served(served, checkpoints, arch):
    got = _infer(served, arch, [IMAGES[n] for n in NAMES], ["EMBEDDING"])["EMBEDDING"]
    expected = _reference(checkpoints[arch], NAMES)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    one = _infer(served, arch, [IMAGES["rgba.png"]], ["EMBEDDING"])["EMBEDDING"]  # batch of one: same row
    np.testing.assert_allclose(one[0], expected[NAMES.index("rgba.png")], atol=1e-4)


TEXTS = ["a photo of a cat", "", "Ünïcödé 🎉 and a much longer caption that runs past the tiny model's sixteen tokens"]


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_text_embedding_matches_get_text_features_when_served(served, checkpoints, arch):
    import torch
    import tritonclient.grpc as grpcclient
    from transformers import AutoModel, AutoTokenizer

    client = grpcclient.InferenceServerClient(served.grpc_url)
    tensor = grpcclient.InferInput("TEXT", [len(TEXTS), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode()] for t in TEXTS], dtype=np.object_))
    result = client.infer(f"{arch}_text", [tensor])
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints[arch]))
    model = AutoModel.from_pretrained(str(checkpoints[arch])).eval()
    # What each processor feeds: CLIP pads to the longest with a mask; SigLIP pads to the maximum, no mask.
    padding = "max_length" if arch == "siglip" else True
    batch = tokenizer(TEXTS, padding=padding, truncation=True, max_length=16, return_tensors="pt")
    inputs = {"input_ids": batch["input_ids"]} if arch == "siglip" else dict(batch)
    with torch.no_grad():
        expected = model.get_text_features(**inputs).pooler_output.numpy()
    np.testing.assert_allclose(result.as_numpy("EMBEDDING"), expected, atol=1e-4)
    assert result.as_numpy("TRUNCATED").reshape(-1).tolist() == [False, False, True]


def _png_claiming(width: int, height: int) -> bytes:
    """A valid 1x1 PNG whose header claims ``width`` x ``height``: a decompression bomb's shape, without its cost."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (1, 1)).save(buffer, format="PNG")
    data = bytearray(buffer.getvalue())
    start = data.index(b"IHDR")
    data[start + 4 : start + 12] = struct.pack(">II", width, height)
    data[start + 17 : start + 21] = struct.pack(">I", zlib.crc32(bytes(data[start : start + 17])))
    return bytes(data)


BAD_IMAGES = {
    "corrupt": (b"this is not an image at all", "IMAGE[0] cannot be decoded: not an image Pillow can read"),
    "truncated jpeg": (IMAGES["noise.jpg"][: len(IMAGES["noise.jpg"]) // 2], "IMAGE[0] cannot be decoded"),
    "truncated png": (IMAGES["gradient.png"][:-40], "IMAGE[0] cannot be decoded"),
    "huge": (_png_claiming(8000, 6000), "IMAGE[0] is 8000x6000 pixels, more than the 40000000 pixels"),
    "bomb": (_png_claiming(20_000, 20_000), "IMAGE[0] is more than the 40000000 pixels this model takes"),
    "empty": (b"", "IMAGE[0] is empty"),
}


@pytest.mark.parametrize("problem", list(BAD_IMAGES))
def test_image_step_answers_invalid_argument_and_keeps_serving_when_image_is_bad(served, problem):
    from tritonclient.utils import InferenceServerException

    data, message = BAD_IMAGES[problem]
    with pytest.raises(InferenceServerException) as caught:
        _infer(served, "vit", [data], ["LABEL"])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT", caught.value.message()
    assert message in caught.value.message()
    assert _infer(served, "vit", [IMAGES["shapes.jpg"]], ["LABEL"])["LABEL"].shape == (1, 1)


def test_build_refuses_fp16_when_model_reads_images(checkpoints, tmp_path):
    spec = load_spec(model=str(checkpoints["vit"]), name="vit16", repository=tmp_path / "repo", precision="fp16")
    with pytest.raises(SpecError, match="image models are built as FP32 for ONNX Runtime only"):
        build_repository(spec)
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_health_probes_answer_when_ensembles_read_images(served, built, builds, tmp_path):
    from tritongen.deploy.probe import probe
    from tritongen.serve.health import check, ensembles_of, healthy

    probes = check(served.http_url, ensembles_of(builds.repository(*built.values(), into=tmp_path / "repo")))
    assert healthy(probes), [p.line for p in probes]
    assert {p.name for p in probes} == {"vit", "clip", "siglip", "clip_text", "siglip_text"}
    assert probe(f"http://{served.http_url}", "vit") is None  # the packaged image's readiness probe (KServe JSON)
