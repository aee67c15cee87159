"""The model step's layout: which layouts are measured, how they are timed, and the rule that picks one.

The timings themselves depend on the machine, so nothing here asserts a time: the measuring is checked by what
it runs (every layout, every text, batches of one bucket each), and the rule on figures given to it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tritongen.builder.spec import load_spec
from tritongen.buildspec import usable_cores
from tritongen.errors import SpecError
from tritongen.runtimes import get_runtime
from tritongen.runtimes.onnxruntime import OnnxRuntimeSettings
from tritongen.sizing import (
    LATENCY_SLACK,
    CpuLayout,
    Layout,
    Measurement,
    SizingReport,
    candidates,
    choose,
    fixed_layout,
)
from tritongen.sizing import measure as measuring


def test_a_small_node_measures_one_thread_instances_only_where_the_python_steps_need_its_cores():
    assert candidates(2, reserved=2) == [Layout(1, 1), Layout(2, 1)]
    assert candidates(2, reserved=1) == [Layout(1, 1), Layout(2, 1)]
    assert candidates(1) == [Layout(1, 1)]
    assert candidates(4, reserved=2) == [Layout(1, 1), Layout(2, 1), Layout(4, 1), Layout(1, 2)]


def test_threads_that_spin_share_only_the_cores_the_python_steps_leave():
    big = candidates(16, reserved=2)
    assert [layout for layout in big if layout.threads == 1] == [Layout(n, 1) for n in (1, 2, 4, 8)]
    assert [layout for layout in big if layout.threads > 1] == [Layout(1, 14), Layout(2, 7), Layout(4, 3)]
    assert all(layout.instances * layout.threads <= 14 for layout in big if layout.threads > 1)


def test_preferring_latency_also_times_one_instance_on_every_core():
    onnx = get_runtime("onnx")
    latency = onnx.cpu_layout(load_spec(model="m", cpu_cores=2, model_layout={"prefer": "latency"}))
    assert latency.candidates() == [Layout(1, 1), Layout(2, 1), Layout(1, 2)]
    assert latency.candidates(folded=True) == [Layout(1, 1), Layout(2, 1), Layout(1, 2)]
    for prefer in ("balanced", "throughput"):  # it would always win balanced's latency slack
        spec = load_spec(model="m", cpu_cores=2, model_layout={"prefer": prefer})
        assert onnx.cpu_layout(spec).candidates() == candidates(2, reserved=2)
    eight = onnx.cpu_layout(load_spec(model="m", cpu_cores=8, model_layout={"prefer": "latency"}))
    assert eight.candidates()[-1] == Layout(1, 8) and eight.candidates().count(Layout(1, 8)) == 1
    one = onnx.cpu_layout(load_spec(model="m", cpu_cores=1, model_layout={"prefer": "latency"}))
    assert one.candidates() == [Layout(1, 1)]
    # served without Triton's batcher, which stalls one CPU instance of several threads
    assert not onnx.triton_batches(
        onnx.with_layout(
            load_spec(model="m", cpu_cores=2),
            latency.refined([Measurement(Layout(1, 2), 1.0, 100.0), Measurement(Layout(2, 1), 2.0, 150.0)])[0],
        )
    )


def _m(instances: int, threads: int, one_ms: float, rate: float) -> Measurement:
    return Measurement(Layout(instances, threads), one_ms, rate)


MEASURED = [_m(1, 2, 10.0, 100.0), _m(2, 1, 10.9, 150.0), _m(2, 2, 12.0, 200.0)]


def test_balanced_takes_the_most_texts_per_second_within_the_latency_slack():
    chosen, why = choose(MEASURED, "balanced")
    assert chosen.layout == Layout(2, 1)  # 10.9 ms is within 10% of 10.0; 12.0 is not
    assert f"within {LATENCY_SLACK:.0%} of the best (10.00 ms)" in why and "2 layouts" in why


def test_latency_and_throughput_take_their_own_best():
    assert choose(MEASURED, "latency")[0].layout == Layout(1, 2)
    assert choose(MEASURED, "throughput")[0].layout == Layout(2, 2)
    # Within the tie margin the other figure decides.
    near = [_m(1, 2, 10.0, 100.0), _m(2, 1, 10.1, 150.0)]
    assert choose(near, "latency")[0].layout == Layout(2, 1)
    with pytest.raises(ValueError, match="prefer must be one of"):
        choose(MEASURED, "fastest")


def test_the_card_lists_every_layout_and_says_why_the_chosen_one_won():
    chosen, why = choose(MEASURED, "balanced")
    report = SizingReport("balanced", 2, MEASURED, chosen, why, 32, 3.0)
    card = "\n".join(report.card_lines())
    assert card.count("| 2 × 1 thread |") == 1 and "**chosen**" in card.split("| 2 × 1 thread |")[1].splitlines()[0]
    assert all(m.layout.label in card for m in MEASURED)
    assert f"Chosen: 2 × 1 thread, because {why}." in card
    assert report.to_dict()["chosen"] == {
        "instances": 2, "threads": 1, "one_request_ms": 10.9, "texts_per_s": 150.0,
    }  # fmt: skip


class _Recorder:
    """Fake sessions: record each call's batch size and width, on which thread."""

    def __init__(self) -> None:
        self.opened: list[Layout] = []
        self.calls: list[tuple[Layout, int, int, str]] = []
        self.lock = threading.Lock()

    def open(self, layout: Layout):
        self.opened.append(layout)

        def run(feeds):
            rows, width = feeds["input_ids"].shape
            with self.lock:
                self.calls.append((layout, rows, width, threading.current_thread().name))

        return run


def _encode(texts):
    """Pads to buckets of 8 and 16 by word count, as the served tokenizer pads to its buckets."""
    width = 8 if max(len(t.split()) for t in texts) <= 8 else 16
    return {"input_ids": np.zeros((len(texts), width), np.int64)}


def test_every_layout_runs_every_text_alone_and_in_batches_of_one_bucket_over_its_instances():
    texts = [" ".join(["w"] * n) for n in (2, 3, 12, 4, 14, 5, 15, 6, 7, 13)]
    recorder, layouts = _Recorder(), [Layout(1, 2), Layout(2, 1)]
    measured = measuring.measure_layouts(layouts, recorder.open, _encode, texts)
    assert [m.layout for m in measured] == layouts
    assert recorder.opened == [Layout(1, 2), Layout(2, 1), Layout(2, 1)] * measuring.ROUNDS  # a session per instance
    for layout in layouts:
        calls = [c for c in recorder.calls if c[0] == layout]
        singles = [c for c in calls if c[1] == 1]
        assert len(singles) >= (len(texts) + 1) * measuring.ROUNDS  # each text alone, after a warm-up call
        batched = [c for c in calls if c[1] > 1]
        # Saturating: 6 short texts in bucket 8, 4 long ones in bucket 16, each bucket in batches of at most 16
        # (one instance) or 8 (two), every text once per round after one warm-up batch per instance.
        assert sum(rows for _, rows, _, _ in batched) >= len(texts) * measuring.ROUNDS
        assert {rows for _, rows, _, _ in batched} <= set(range(2, 16 // layout.instances + 1))
    # Each instance on its own thread, one requests alone in turn, as Triton hands them to the next instance.
    two = [c for c in recorder.calls if c[0] == Layout(2, 1)]
    assert len({c[3] for c in two if c[1] == 1}) == 2 * measuring.ROUNDS and "MainThread" not in {c[3] for c in two}


def test_documents_run_each_request_whole_alone_and_drained_over_the_instances_when_timed_on_documents():
    texts = measuring.documents_of(["one two three", "four five", ""], count=8, words=12)
    assert len(texts) == 8 and all(len(t.split()) == 12 for t in texts)  # the texts taken again where they run out
    recorder, layouts = _Recorder(), [Layout(1, 2), Layout(2, 1)]
    measured = measuring.measure_layouts(layouts, recorder.open, _encode, texts, per_request=4)
    assert [m.layout for m in measured] == layouts and all(m.texts_per_s > 0 for m in measured)
    assert {rows for _, rows, _, _ in recorder.calls} == {4}  # every call one whole request of 4 documents
    two = [c for c in recorder.calls if c[0] == Layout(2, 1)]
    assert len({c[3] for c in two}) == 2 * measuring.ROUNDS  # both instances, each on its own thread


def test_documents_give_an_instance_threads_on_every_core_when_the_workload_says_so():
    spec = load_spec(model="m", cpu_cores=2, model_layout={"workload": "documents"})
    decided = get_runtime("onnx").cpu_layout(spec)
    assert decided.workload == "documents"
    assert decided.candidates() == [Layout(1, 1), Layout(2, 1), Layout(1, 2)]  # beside the queries' one-thread ones
    assert get_runtime("onnx").cpu_layout(load_spec(model="m", cpu_cores=2)).candidates() == candidates(2, reserved=2)
    chosen, why = choose(MEASURED, "balanced")
    card = "\n".join(SizingReport("balanced", 2, MEASURED, chosen, why, 128, 3.0, workload="documents").card_lines())
    assert "workload `documents`: 128 documents" in card and "| texts/s, 4 requests in flight |" in card
    with pytest.raises(SpecError, match=r"model_layout\.workload must be queries or documents, got pages"):
        load_spec(model="m", model_layout={"workload": "pages"})


def test_a_session_that_fails_fails_the_measuring():
    def broken(layout):
        def run(feeds):
            if feeds["input_ids"].shape[0] > 1:
                raise RuntimeError("out of memory")

        return run

    with pytest.raises(RuntimeError, match="out of memory"):
        measuring.measure_layouts([Layout(2, 1)], broken, _encode, ["a b", "c d", "e f"])


def test_a_layout_reaches_every_setting_of_its_runtime_section_at_once():
    runtime = get_runtime("onnx")
    spec = load_spec(model="m", cpu_cores=2, model_layout={"measure": False})
    spec = runtime.with_layout(spec, CpuLayout(2, (1, 1), Layout(1, 2), measure=True))
    assert spec.model_instances.count == 1 and spec.section(OnnxRuntimeSettings).intra_op_threads == 2
    assert spec.model_layout.measure and runtime.cpu_layout(spec).layout == Layout(1, 2)


def test_the_loader_records_an_open_layout_and_the_size_stage_decides_it_once():
    runtime = get_runtime("onnx")
    spec = load_spec(model="m", cpu_cores=2, tokenizer_instances={"count": 2}, model_layout={"prefer": "latency"})
    assert spec.model_layout.left_open and spec.model_layout.measure is None  # recorded, not decided
    assert runtime.cpu_layout(spec).layout == Layout(1, 0)  # as loaded: nothing written yet
    decided = runtime.decided_layout(spec, usable=usable_cores())
    assert decided == CpuLayout(2, (2, 1), fixed_layout(2, reserved=3), measure=usable_cores() >= 2, prefer="latency")
    # a folded postprocess keeps no core; preferring latency, one instance on every core is timed too
    assert decided.candidates() == [*candidates(2, reserved=3), Layout(1, 2)]
    assert decided.candidates(folded=True) == [*candidates(2, reserved=2), Layout(1, 2)]
    refined, chosen, why = decided.refined(MEASURED)
    assert (refined.layout, chosen.layout) == (Layout(1, 2), Layout(1, 2)) and "fastest" in why
    laid_out = runtime.with_layout(spec, refined)
    assert runtime.cpu_layout(laid_out) == refined  # what the configs are rendered from
    assert laid_out.to_dict()["onnxruntime"]["intra_op_threads"] == 2 and laid_out.model_instances.count == 1


def test_the_fixed_default_is_written_only_where_the_spec_leaves_the_layout_open():
    given = CpuLayout(8, (1, 1), Layout(1, 0))
    open_here = given.decided(left_open=True, measure=None, usable=8)
    assert open_here.layout == fixed_layout(8, reserved=2) == Layout(2, 3) and open_here.measure
    assert not given.decided(left_open=True, measure=None, usable=4).measure  # a bigger node than this machine
    assert not given.decided(left_open=True, measure=False, usable=8).measure
    kept = given.decided(left_open=False, measure=None, usable=8)
    assert kept.layout == Layout(1, 0) and not kept.measure  # the spec's own sizing, as given
    assert given.decided(left_open=False, measure=True, usable=8).measure  # measured only where asked


def test_the_loader_records_the_layout_open_only_where_the_spec_leaves_it_open():
    assert load_spec(model="m").model_layout.left_open
    assert not load_spec(model="m", model_instances={"count": 1}).model_layout.left_open
    assert not load_spec(model="m", onnxruntime={"intra_op_threads": 2}).model_layout.left_open
    assert not load_spec(model="m", device="gpu").model_layout.left_open
    assert not load_spec(model="m", runtime="openvino").model_layout.left_open  # not measured: OpenVINO's own default
    assert not load_spec(model="m", model_layout={"left_open": False}).model_layout.left_open  # written, it stands
    runtime = get_runtime("onnx")
    fixed = runtime.decided_layout(load_spec(model="m", cpu_cores=2, model_layout={"measure": False}), usable=2)
    assert not fixed.measure and fixed.layout == Layout(2, 1)  # the fixed CPU default
    assert load_spec(model="m", model_layout={"prefer": "latency"}).model_layout.prefer == "latency"
    # A node bigger than this machine cannot be measured here: the fixed default, sized for its cores.
    bigger = runtime.decided_layout(load_spec(model="m", cpu_cores=3), usable=2)
    assert not bigger.measure and bigger.layout == Layout(2, 1)
    given = runtime.decided_layout(load_spec(model="m", cpu_cores=2, model_instances={"count": 3}), usable=2)
    assert not given.measure and given.layout == Layout(3, 0)  # as the spec sets it


def test_the_card_says_how_every_cpu_build_got_its_layout():
    from tritongen.builder.card import _sizing_line

    chosen, why = choose(MEASURED, "balanced")
    measured = _sizing_line(load_spec(model="m", cpu_cores=1), SizingReport("balanced", 1, MEASURED, chosen, why, 32))
    assert measured.endswith("measured and chosen at build time (balanced, [below](#model-step-layout))")
    given = _sizing_line(load_spec(model="m", model_instances={"count": 1}))
    assert given.endswith("as the spec sets it, not measured")
    assert "without Triton's dynamic batcher" in given  # one instance, the runtime's own (several) threads
    one = _sizing_line(load_spec(model="m", model_instances={"count": 1}, onnxruntime={"intra_op_threads": 1}))
    assert "dynamic batcher" not in one
    assert "OpenVINO's layout is not measured" in _sizing_line(load_spec(model="m", runtime="openvino"))
    bigger = _sizing_line(load_spec(model="m", cpu_cores=usable_cores() + 1))
    assert bigger.endswith("the fixed default, not measured (the node has more cores than the build machine)")
    asked = _sizing_line(load_spec(model="m", cpu_cores=1, model_layout={"measure": False}))
    assert asked.endswith("the fixed default, not measured (`model_layout: {measure: false}`)")
    assert "measured" not in _sizing_line(load_spec(model="m", device="gpu"))
