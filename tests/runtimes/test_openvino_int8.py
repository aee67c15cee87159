"""OpenVINO INT8: which MatMuls each candidate keeps in float, and the order the candidates are tried in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tritongen.gates.accuracy import AccuracyReport
from tritongen.runtimes.openvino.int8 import CANDIDATES, MatMulKind, float_matmuls, search_int8_ir

HIDDEN, WIDE = 8, 32


def _block(path: Path | None = None):
    """One transformer-shaped block as IR: up projection, GELU, down projection, and an attention product."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)

    def weighted(source, rows: int, cols: int, name: str):
        weight = ops.constant(rng.normal(size=(rows, cols)).astype(np.float32))
        product = ops.matmul(source, weight, False, False)
        product.set_friendly_name(name)
        return product

    x = ops.parameter([-1, -1, HIDDEN], np.float32, name="x")
    down = weighted(ops.gelu(weighted(x, HIDDEN, WIDE, "up"), "erf"), WIDE, HIDDEN, "down")
    scores = ops.matmul(down, down, False, True)
    scores.set_friendly_name("scores")
    context = ops.matmul(ops.softmax(scores, -1), down, False, False)
    context.set_friendly_name("context")
    model = ov.Model([ops.result(ops.add(context, x))], [x], "block")
    if path is not None:
        ov.save_model(model, str(path), compress_to_fp16=False)
    return model


def test_float_matmuls_finds_the_down_projections_and_the_attention_products():
    model = _block()
    assert float_matmuls(model, [MatMulKind.DOWN]) == ["down"]
    assert sorted(float_matmuls(model, [MatMulKind.ATTENTION])) == ["context", "scores"]
    assert sorted(float_matmuls(model, [MatMulKind.DOWN, MatMulKind.ATTENTION])) == ["context", "down", "scores"]
    assert float_matmuls(model, []) == []


def _report(cosine_min: float) -> AccuracyReport:
    return AccuracyReport("OpenVINO INT8+F32", "cosine", 8, cosine_mean=0.999, cosine_min=cosine_min, loss=0.001)


@pytest.mark.build
def test_int8_candidates_go_fastest_first_and_the_first_that_passes_is_served(tmp_path):
    """The gate is the test's own: it refuses the whole model and passes the next, so the order is certain."""
    source = tmp_path / "fp32.xml"
    _block(source)
    feeds = [{"x": np.random.default_rng(i).normal(size=(1, 4, HIDDEN)).astype(np.float32)} for i in range(8)]
    gated = []

    def gate(path, candidate):
        gated.append(path.read_text().count('type="FakeQuantize"'))
        return [_report(0.97 if not candidate.keeps else 0.99)]

    target = tmp_path / "served" / "model.xml"
    target.parent.mkdir()
    trials, chosen, version = search_int8_ir(source, target, feeds, gate)
    assert [t.candidate for t in trials] == list(CANDIDATES[:2]) and chosen is trials[1] and chosen.passed
    assert chosen.kept == 1 and version
    whole_fq, down_fq = gated
    assert down_fq < whole_fq  # the down projection's input and weight are no longer quantised
    assert target.read_text().count('type="FakeQuantize"') == down_fq and target.with_suffix(".bin").exists()
    assert not (target.parent / "_int8_candidates").exists()


@pytest.mark.build
def test_int8_serves_the_most_accurate_candidate_when_none_passes(tmp_path):
    source = tmp_path / "fp32.xml"
    _block(source)
    feeds = [{"x": np.ones((1, 4, HIDDEN), np.float32)}]
    figures = {CANDIDATES[0]: 0.95, CANDIDATES[1]: 0.97, CANDIDATES[2]: 0.96}
    trials, chosen, _ = search_int8_ir(
        source, tmp_path / "model.xml", feeds, lambda path, candidate: [_report(figures[candidate])]
    )
    assert [t.candidate for t in trials] == list(CANDIDATES) and not any(t.passed for t in trials)
    assert chosen.candidate == CANDIDATES[1]
    assert "refused" in chosen.line() and "the down projections in float, 1 MatMul in float" in chosen.line()


@pytest.mark.build
def test_int8_a_candidate_must_pass_where_it_will_be_served_too(tmp_path):
    """Gated again where it will run (the target container's OpenVINO): refused there, the next candidate is tried."""
    source = tmp_path / "fp32.xml"
    _block(source)
    feeds = [{"x": np.ones((1, 4, HIDDEN), np.float32)}]
    there = iter([0.97, 0.99])  # the first candidate that passes here fails there; the next passes both
    trials, chosen, _ = search_int8_ir(
        source, tmp_path / "model.xml", feeds,
        lambda path, candidate: [_report(0.97 if not candidate.keeps else 0.99)],
        lambda path: [_report(next(there))],
    )  # fmt: skip
    assert [t.candidate for t in trials] == list(CANDIDATES)
    assert not trials[0].there  # refused here: not gated there
    assert trials[1].reports[0].passed and not trials[1].passed
    assert chosen is trials[2] and chosen.passed and chosen.there
