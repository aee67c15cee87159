from pathlib import Path

import pytest
import yaml

from tritongen.builder.spec import load_spec, recorded_spec
from tritongen.buildspec import DEFAULT_NAME, BuildSpec, DynamicBatchingSettings, InstanceGroup
from tritongen.errors import SpecError
from tritongen.runtimes import get_runtime
from tritongen.runtimes.onnxruntime import OnnxRuntimeSettings


def test_load_spec_defaults_when_only_model_given():
    spec = load_spec(model="m")
    assert spec.name == "minilm"  # the one default name of every command
    assert spec.max_batch_size == 64
    assert spec.dynamic_batching.enabled
    assert spec.repository == Path("model_repository")


def test_load_spec_reads_yaml_and_cli_overrides_win(tmp_path):
    path = tmp_path / "deploy.yaml"
    path.write_text(
        "model: ckpt\nname: sentiment\nmax_batch_size: 32\n"
        "dynamic_batching:\n  max_queue_delay_microseconds: 500\n  preferred_batch_size: [8, 16]\n"
        "  queue_policy: {max_queue_size: 100}\n"
        "model_instances: {count: 2}\n"
    )
    spec = load_spec(path, name="other", model_instances={"kind": "KIND_CPU"})
    assert spec.name == "other"
    assert spec.max_batch_size == 32
    assert spec.dynamic_batching.preferred_batch_size == (8, 16)
    assert spec.dynamic_batching.queue_policy.max_queue_size == 100
    assert spec.model_instances == InstanceGroup(count=2, kind="KIND_CPU")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dynamic_batching": DynamicBatchingSettings(preferred_batch_size=(128,))}, "preferred batch size 128"),
        ({"max_batch_size": 0}, "dynamic batching needs max_batch_size > 0"),
        ({"name": "bad name"}, "model name `bad name` is invalid"),
        ({"buckets": (64, 32)}, "strictly increasing"),
        ({"model_instances": InstanceGroup(count=0)}, "model instance count"),
        ({"tokenizer_instances": InstanceGroup(gpus=(0,))}, "kind is KIND_CPU"),
    ],
)
def test_build_spec_raises_spec_error_when_settings_contradict(changes, message):
    with pytest.raises(SpecError, match=message):
        BuildSpec(model="m", **changes)


def test_load_spec_raises_when_yaml_has_unknown_key(tmp_path):
    path = tmp_path / "deploy.yaml"
    path.write_text("model: m\nmax_batch: 3\n")
    with pytest.raises(SpecError, match=r"unknown setting\(s\) \['max_batch'\]"):
        load_spec(path)


def test_a_retired_setting_is_refused_with_why():
    with pytest.raises(SpecError, match=r"`onnxruntime.allow_spinning` is no longer a setting: Triton's onnxruntime "
                       r"backend has no switch for it .*; remove it"):  # fmt: skip
        load_spec(model="m", onnxruntime={"allow_spinning": False})
    # a spec an earlier version recorded in build.json loads without it (the bench rebuilds from the record)
    recorded = load_spec(model="m").to_dict()
    recorded["onnxruntime"]["allow_spinning"] = False
    assert load_spec(None, **recorded_spec(recorded)) == load_spec(model="m")
    # a layout the build decided is still open in the record, for the rebuild to decide; one the spec gave is kept
    runtime = get_runtime("onnx")
    opened = load_spec(model="m", cpu_cores=2, model_layout={"measure": False})
    sized = runtime.with_layout(opened, runtime.decided_layout(opened, usable=2)).to_dict()
    assert (sized["model_instances"]["count"], sized["onnxruntime"]["intra_op_threads"]) == (2, 1)
    again = load_spec(None, **recorded_spec(sized))
    assert again.model_layout.left_open
    assert runtime.decided_layout(again, usable=2).layout == runtime.decided_layout(opened, usable=2).layout
    given = load_spec(model="m", model_instances={"count": 3}).to_dict()
    assert load_spec(None, **recorded_spec(given)).model_instances.count == 3


def test_load_spec_raises_when_file_missing(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.yaml")


def test_example_spec_lists_every_setting_at_its_default():
    path = Path(__file__).parents[2] / "examples" / "deploy.yaml"
    spec = load_spec(path)
    defaults = load_spec(None, model=spec.model)  # the dataclass's, and the CPU sizing filled in for this machine
    assert spec == defaults  # what it claims: the defaults
    assert all(settings == type(settings)() for settings in spec.task_settings.values())
    assert spec.model == "sentence-transformers/all-MiniLM-L6-v2" and spec.name == DEFAULT_NAME == "minilm"
    assert set(yaml.safe_load(path.read_text())) >= set(defaults.to_dict())  # and none is left out


def test_load_spec_maps_old_flat_task_keys_into_sections_when_yaml_uses_them(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("model: m\nqa_doc_stride: 32\naggregation_strategy: max\nner_stride: 0\nmulti_label_top_k: 2\n")
    spec = load_spec(path, qa_max_answer_len=7)
    qa = spec.task_settings["question_answering"]
    assert (qa.doc_stride, qa.max_answer_len) == (32, 7)
    assert spec.task_settings["token_classification"].aggregation_strategy == "max"
    assert spec.task_settings["token_classification"].stride == 0
    assert spec.task_settings["classification"].multi_label_top_k == 2
    assert load_spec(path, question_answering={"doc_stride": 16}).task_settings["question_answering"].doc_stride == 16


def test_spec_round_trips_task_sections_through_yaml(tmp_path):
    spec = load_spec(model="m", question_answering={"max_seq_len": 64, "doc_stride": 16})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict()))
    assert load_spec(path) == spec


def test_spec_refuses_unknown_field_in_task_section():
    with pytest.raises(SpecError, match=r"unknown setting\(s\) \['window'\] in `question_answering`"):
        load_spec(model="m", question_answering={"window": 64})


def test_the_batcher_waits_by_default_only_where_the_model_step_is_a_gpu():
    """A CPU encoder is compute-bound: waiting for a partner costs latency and buys no throughput."""
    assert load_spec(model="m").queue_delay_us == 0
    assert load_spec(model="m", model_instances={"kind": "KIND_GPU"}).queue_delay_us == 2000
    assert load_spec(model="m", dynamic_batching={"max_queue_delay_microseconds": 500}).queue_delay_us == 500
    gpu_zero = load_spec(
        model="m", model_instances={"kind": "KIND_GPU"}, dynamic_batching={"max_queue_delay_microseconds": 0}
    )
    assert gpu_zero.queue_delay_us == 0  # an explicit 0 is kept


def test_a_cpu_build_is_sized_for_its_cores_where_the_spec_leaves_it_open():
    runtime = get_runtime("onnx")

    def laid_out(**given):  # as the size stage writes it, where nothing is measured
        spec = load_spec(None, model="m", model_layout={"measure": False}, **given)
        spec = runtime.with_layout(spec, runtime.decided_layout(spec, usable=16))
        return spec.model_instances.count, spec.section(OnnxRuntimeSettings).intra_op_threads

    # Two instances sharing the cores the two Python steps leave (threads beyond one spin), one thread at least.
    for cores, threads in ((1, 1), (2, 1), (4, 1), (16, 7)):
        assert laid_out(cpu_cores=cores) == (1 if cores == 1 else 2, threads)
    # An explicit count or thread setting is the user's sizing: nothing is filled in beside it.
    assert laid_out(cpu_cores=16, model_instances={"count": 3}) == (3, 0)
    assert laid_out(cpu_cores=16, onnxruntime={"intra_op_threads": 4}) == (1, 4)
    # A GPU build and the other runtimes keep their own defaults.
    assert load_spec(None, model="m", device="gpu").model_instances.count == 1
    assert load_spec(None, model="m", runtime="openvino").model_instances.count == 1


def test_cpu_cores_must_be_a_whole_number():
    with pytest.raises(SpecError, match="cpu_cores must be a whole number >= 1"):
        load_spec(None, model="m", cpu_cores=0)


def test_each_flag_of_every_section_is_declared_once_on_its_field():
    """A flat key, its field and its command-line flag are one ``setting(...)``: the section's maps are read from it."""
    import dataclasses

    from tritongen.builder.spec import spec_sections

    for name, cls in spec_sections().items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert set(cls.flat_names) == set(cls.cli_flags), name
        for flat, field_name in cls.flat_names.items():
            assert fields[field_name].metadata["flag"] == flat
            assert cls.cli_flags[flat] == dict(fields[field_name].metadata["cli"])
    assert spec_sections()["question_answering"].flat_names["qa_doc_stride"] == "doc_stride"
