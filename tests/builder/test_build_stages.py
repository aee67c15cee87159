"""Each build stage runs alone on a tiny checkpoint; nothing reaches the repository before `publish`."""

from __future__ import annotations

import dataclasses
import json

import pytest
from rich.console import Console

from tritongen.builder.pipeline import Findings, exported, inspect, optimise, parity, publish, render, write
from tritongen.builder.pipeline import size as size_stage
from tritongen.buildspec import BuildSpec
from tritongen.errors import ParityError
from tritongen.repository.staging import staging
from tritongen.runtimes import get_runtime
from tritongen.tasks import BuildPlan


@pytest.fixture(scope="module")
def quiet() -> Console:
    return Console(quiet=True)


@pytest.fixture(scope="module")
def inspected(tiny_factory, quiet) -> BuildPlan:
    return inspect(BuildSpec(model=str(tiny_factory("bert")), name="clf", buckets=(16, 32, 128)), quiet)


@pytest.fixture
def plan(inspected, tmp_path) -> BuildPlan:
    """The inspected plan, writing into this test's own repository."""
    return dataclasses.replace(inspected, spec=inspected.spec.replace(repository=tmp_path / "repo"))


def _published(repo) -> list[str]:
    return sorted(p.name for p in repo.iterdir()) if repo.exists() else []


def test_inspect_derives_row_length_and_buckets_once_when_model_is_shorter_than_buckets(plan):
    assert plan.bound.task == "classification"
    assert plan.max_length == 64  # the tiny checkpoint's limit, below the 128 bucket
    assert plan.buckets == [16, 32, 64]
    assert plan.inputs == ["input_ids", "attention_mask", "token_type_ids"]
    assert plan.names["model"] == "clf_model"


def test_render_uses_the_plans_buckets_for_tokenizer_and_warmup_without_touching_disk(plan):
    configs = render(plan)
    tokenizer, model = configs["tokenizer"][1], configs["model"][1]
    assert tokenizer.parameters["buckets"].string_value == "16,32,64"
    assert [w.name for w in model.model_warmup] == ["bucket_16", "bucket_32", "bucket_64"]
    assert _published(plan.spec.repository) == []


def test_stages_publish_nothing_until_publish(plan, quiet):
    repo = plan.spec.repository
    with staging(repo, list(plan.names.values())) as work:
        with exported(plan, work, quiet) as onnx:
            assert onnx.fp32_path.is_file() and not onnx.fp32_path.is_relative_to(work.root)
            report = parity(plan, onnx, quiet)
            variant = optimise(plan, get_runtime(plan.spec.runtime), onnx, quiet)
        assert not onnx.fp32_path.exists()
        assert report.passed and variant is None
        assert onnx.target.is_file()  # fp32 served as is
        write(plan, get_runtime(plan.spec.runtime), work, render(plan), Findings(report, variant))
        assert _published(repo) == []
        assert json.loads((work.root / "clf" / "1" / "build.json").read_text())["max_length"] == 64
        assert publish(plan, work, quiet) == 1
    assert _published(repo) == ["clf", "clf_model", "clf_postprocess", "clf_tokenizer"]
    assert (repo / "clf_model" / "1" / "model.onnx").is_file()


def test_size_stage_lays_out_the_model_step_only_where_the_spec_leaves_it_open(plan, quiet):
    from tritongen.buildspec import ModelLayoutSettings
    from tritongen.runtimes.onnxruntime import OnnxRuntimeSettings
    from tritongen.sizing import TIE, Layout, candidates

    open_plan = dataclasses.replace(
        plan, spec=plan.spec.replace(cpu_cores=2, model_layout=ModelLayoutSettings(prefer="latency", measure=True))
    )
    with staging(plan.spec.repository, list(plan.names.values())) as work:
        with exported(open_plan, work, quiet) as onnx:
            optimise(open_plan, get_runtime("onnx"), onnx, quiet)  # the served file, as the stage measures it
            sized, report = size_stage(open_plan, get_runtime("onnx"), onnx, quiet)
            unchanged, none = size_stage(
                plan, get_runtime("onnx"), onnx, quiet
            )  # measure off: the spec's layout stands
            left = ModelLayoutSettings(left_open=True, measure=False)
            fixed, unmeasured = size_stage(
                dataclasses.replace(plan, spec=plan.spec.replace(cpu_cores=2, model_layout=left)),
                get_runtime("onnx"), onnx, quiet,
            )  # fmt: skip
    assert none is None and unchanged is plan
    assert unmeasured is None and fixed.spec.model_instances.count == 2  # left open, not measured: the fixed default
    assert fixed.spec.section(OnnxRuntimeSettings).intra_op_threads == 1
    assert report is not None and report.prefer == "latency" and report.cores == 2
    # the tokenizer's and postprocess's cores kept, and (preferring latency) one instance on every core
    assert [m.layout for m in report.measurements] == [*candidates(2, reserved=2), Layout(1, 2)]
    chosen = report.chosen.layout
    assert report.chosen.one_ms <= min(m.one_ms for m in report.measurements) * (1 + TIE)  # `latency`'s rule
    assert sized.spec.model_instances.count == chosen.instances
    assert sized.spec.section(OnnxRuntimeSettings).intra_op_threads == chosen.threads
    config = render(sized)["model"][1]
    assert config.instance_group[0].count == chosen.instances
    assert config.parameters["intra_op_thread_count"].string_value == str(chosen.threads)
    assert config.HasField("dynamic_batching") == (chosen.instances > 1 or chosen.threads == 1)
    assert _published(plan.spec.repository) == []


def test_parity_stage_raises_and_export_cleans_up_when_tolerance_is_impossible(plan, quiet):
    strict = dataclasses.replace(plan, spec=plan.spec.replace(parity_tolerance=1e-15))
    with staging(strict.spec.repository, list(strict.names.values())) as work:
        with pytest.raises(ParityError), exported(strict, work, quiet) as onnx:
            parity(strict, onnx, quiet)
        assert not onnx.fp32_path.exists()
    assert _published(strict.spec.repository) == []


def test_a_documents_build_on_a_vnni_cpu_points_at_openvino_int8():
    from tritongen.builder.pipeline import documents_hint

    vnni = frozenset({"avx2", "avx512f", "avx512_vnni"})
    hint = documents_hint("documents", "onnx", "int8", vnni)
    assert hint is not None and "`--runtime openvino --precision int8`" in hint
    assert documents_hint("documents", "onnx", "fp32", frozenset({"amx_int8"})) is not None
    assert documents_hint("documents", "openvino", "fp32", vnni) is not None  # INT8 computes long texts faster still
    assert documents_hint("queries", "onnx", "int8", vnni) is None  # short texts stay faster on ONNX Runtime INT8
    assert documents_hint("documents", "openvino", "int8", vnni) is None
    assert documents_hint("documents", "onnx", "int8", frozenset({"avx2", "avx512f"})) is None
