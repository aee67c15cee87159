"""Graph optimisation, FP16 and INT8: each gated on accuracy, each served by the real server."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from generator.accuracy import AccuracyError, measure_accuracy, require_accuracy
from generator.build import build_repository
from generator.cli import main
from generator.client import infer
from generator.server import running_server
from generator.spec import BuildSpec
from generator.tasks import get_task
from generator.triton_models.tokenizer import TextEncoder

VARIANTS = {
    "int8": {"precision": "int8"},
    "int8_opt": {"precision": "int8", "optimize": True},
    "int8_dyn": {"precision": "int8", "quantization": "dynamic"},
    "fp32_opt": {"optimize": True},
    "fp16": {"precision": "fp16"},
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory, minilm_path):
    """Every variant of the real all-MiniLM-L6-v2 (the embedding gate: cosine mean >= 0.99, min >= 0.98)."""
    repo = tmp_path_factory.mktemp("precision") / "repo"
    results = {}
    for name, changes in VARIANTS.items():
        spec = BuildSpec(model=str(minilm_path), name=name, repository=repo, buckets=(32, 128), **changes)
        results[name] = build_repository(spec)
    return repo, results


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_passes_accuracy_gate_and_records_it(variants, name):
    repo, results = variants
    accuracy = results[name].accuracy
    assert accuracy is not None and accuracy.passed
    assert accuracy.cosine_mean >= 0.99 and accuracy.cosine_min >= 0.98
    card = (repo / name / "1" / "model_card.md").read_text()
    assert "Accuracy gate: **PASSED**" in card
    build = json.loads((repo / name / "1" / "build.json").read_text())
    assert build["accuracy"]["cosine_mean"] == accuracy.cosine_mean


def test_int8_static_model_has_qdq_nodes(variants):
    repo, _ = variants
    ops = {n.op_type for n in onnx.load(str(repo / "int8_model" / "1" / "model.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_optimised_model_has_fused_operators(variants):
    repo, _ = variants
    ops = {n.op_type for n in onnx.load(str(repo / "fp32_opt_model" / "1" / "model.onnx")).graph.node}
    # The optimiser's LayerNorm and GELU fusions match the dynamo export; its attention patterns do not.
    assert "SkipLayerNormalization" in ops
    assert "BiasGelu" in ops or "FastGelu" in ops or "Gelu" in ops


def test_fp16_model_keeps_fp32_inputs_and_outputs(variants):
    repo, _ = variants
    model = onnx.load(str(repo / "fp16_model" / "1" / "model.onnx"))
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)


@pytest.mark.e2e
def test_variants_serve_through_real_server_within_gate(variants, minilm_path):
    """The server serves exactly the gated model: same outputs as the gate's in-process path.

    The gate's mean-cosine threshold is asserted on the whole validation set above; on this
    48-text subset each text must still clear the gate's per-text floor (0.98).
    """
    import onnxruntime as ort

    from generator.accuracy import default_texts
    from generator.backends.onnxruntime.model import trim_padding
    from generator.triton_models.postprocess import l2_normalize
    from tests.test_e2e import _sentence_embeddings

    repo, _ = variants
    texts = default_texts("validation")[:48]
    expected = _sentence_embeddings(minilm_path, texts, max_length=256)
    with running_server(repo) as server:
        for name in VARIANTS:
            got = np.array([r["EMBEDDING"] for r in infer(texts, name=name, url=server.grpc_url)], np.float32)
            encoder = TextEncoder(
                str(repo / f"{name}_tokenizer" / "1" / "tokenizer.json"), 256, [32, 128],
                input_names=["input_ids", "attention_mask", "token_type_ids"],
            )  # fmt: skip
            session = ort.InferenceSession(str(repo / f"{name}_model" / "1" / "model.onnx"))
            # One request of 48 texts, padded and trimmed exactly as the tokenizer and backend do it
            # (dynamic int8 scales depend on the whole batch).
            gated = l2_normalize(session.run(None, trim_padding(encoder(texts)))[0])
            np.testing.assert_allclose(got, gated, atol=1e-4, err_msg=name)
            cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
            assert cosine.min() >= 0.98, f"{name}: min cosine {cosine.min():.4f}"


def test_classifier_gate_passes_fp16_and_refuses_int8_with_figures(sentiment_checkpoint, tmp_path, capsys):
    """A real case: INT8 flips labels of a head-only classifier with small margins; the gate must say so."""
    repo = tmp_path / "repo"
    base = ["build", "--model", str(sentiment_checkpoint), "--repository", str(repo), "--buckets", "32,128"]
    assert main([*base, "--name", "half", "--precision", "fp16"]) == 0
    assert "Accuracy gate: **PASSED**" in (repo / "half" / "1" / "model_card.md").read_text()
    assert main([*base, "--name", "q", "--precision", "int8", "--optimize"]) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("error: accuracy gate failed: INT8 static optimised vs FP32 PyTorch on 294 validation")
    assert "label agreement" in message and "(gate >= 99%)" in message
    assert not (repo / "q").exists()


def _perturbed(source, target, scale: float) -> None:
    model = onnx.load(str(source))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        weights = numpy_helper.to_array(init)
        if weights.dtype == np.float32 and weights.ndim == 2:
            init.CopyFrom(
                numpy_helper.from_array(weights + rng.normal(0, scale, weights.shape).astype(np.float32), init.name)
            )
    onnx.save(model, str(target))


def test_gate_refuses_model_with_perturbed_weights(sentiment_checkpoint, tmp_path):
    from transformers import AutoTokenizer

    from generator.checkpoint import inspect_checkpoint
    from generator.export import export_onnx

    checkpoint = inspect_checkpoint(str(sentiment_checkpoint))
    module = get_task("classification").load_module(checkpoint)
    encoder = TextEncoder(
        str(sentiment_checkpoint / "tokenizer.json"),
        512,
        [32, 128],
        input_names=["input_ids", "attention_mask", "token_type_ids"],
    )
    export_onnx(module, encoder(["a b", "a longer text here"]), "logits", tmp_path / "fp32.onnx")
    broken = tmp_path / "broken.onnx"
    _perturbed(tmp_path / "fp32.onnx", broken, scale=0.5)
    texts = [
        f"review {i}: {'great' if i % 3 else 'awful'} product, would {'' if i % 2 else 'not '}buy" for i in range(60)
    ]
    report = measure_accuracy(
        module,
        AutoTokenizer.from_pretrained(str(sentiment_checkpoint)),
        encoder,
        broken,
        gate="labels",
        texts=texts,
        max_length=512,
        variant="broken",
    )
    assert not report.passed
    with pytest.raises(AccuracyError, match=r"accuracy gate failed: broken vs FP32 PyTorch on 60 validation texts"):
        require_accuracy(report, accept_loss=False)
    require_accuracy(report, accept_loss=True)  # accepted loss does not raise


def test_build_exits_2_and_publishes_nothing_when_gate_fails(sentiment_checkpoint, tmp_path, capsys, monkeypatch):
    import generator.build as build_module

    real = build_module.optimize_model

    def broken_optimize(source, target, *args, **kwargs):
        report = real(source, target, *args, **kwargs)
        _perturbed(target, target, scale=0.5)
        return report

    monkeypatch.setattr(build_module, "optimize_model", broken_optimize)
    repo = tmp_path / "repo"
    argv = ["build", "--model", str(sentiment_checkpoint), "--name", "s", "--repository", str(repo), "--optimize"]
    assert main(argv) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("error: accuracy gate failed: FP32 optimised vs FP32 PyTorch on 294 validation texts")
    assert not repo.exists() or not any(repo.iterdir())
    assert main([*argv, "--accept-accuracy-loss"]) == 0
    assert "FAILED (accepted with --accept-accuracy-loss)" in (repo / "s" / "1" / "model_card.md").read_text()
    shutil.rmtree(repo)
