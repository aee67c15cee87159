"""Step parameters: one typed declaration per step, written by the build, read by the step, and nothing undeclared.

The fast tests check the declarations' reading and writing; the build test renders one ensemble per task (and
per runtime) from the tiny checkpoints and finds every ``parameters`` key of every config in a declaration.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

import tritongen.steps.image  # noqa: F401  (the image step declares its own settings)
from tritongen.parameters import (
    DECLARED,
    MultiVectorParameters,
    PromptParameters,
    QaWindowParameters,
    SelectionParameters,
    TokenizerParameters,
    written,
)
from tritongen.runtimes.onnxruntime.settings import OnnxRuntimeParameters  # noqa: F401  (a runtime's declaration)
from tritongen.runtimes.openvino.settings import OpenVinoParameters  # noqa: F401
from tritongen.steps.image import ImageSettings


def _ours() -> list[type]:
    return [d for d in DECLARED if d.__module__.startswith("tritongen.")]


def test_no_key_is_declared_twice_when_the_built_in_declarations_are_read_together():
    counts = Counter(key for declaration in _ours() for key in declaration.keys())
    assert [key for key, n in counts.items() if n > 1] == []


def test_each_declaration_reads_back_what_it_writes_when_its_fields_are_set():
    samples = [
        TokenizerParameters(max_length=128, buckets=(16, 32), padding="longest", pad_id=1, padding_side="left"),
        PromptParameters({"query": "query: ", "document": ""}, "query"),
        QaWindowParameters(max_seq_len=384, doc_stride=128, cls_id=101),
        SelectionParameters(threshold=0.25, top_k=3),
        MultiVectorParameters(hidden_size=32, colbert_dim=16, unused_token_ids=[0, 2, 3]),
        ImageSettings(size="shortest_edge=32", crop_size="32x32", image_mean=(0.48145466, 0.4578275, 0.40821073)),
    ]
    for sample in samples:
        text = sample.to_parameters()
        assert all(isinstance(v, str) and v for v in text.values()), text  # protobuf's JSON drops empty strings
        assert type(sample).from_parameters(text) == sample


def test_to_parameters_spells_each_type_as_the_steps_read_it():
    assert TokenizerParameters(max_length=64, buckets=(16, 32, 64)).to_parameters() == {
        "max_length": "64", "buckets": "16,32,64", "pad_id": "0", "pad_type_id": "0",
    }  # fmt: skip
    assert SelectionParameters(threshold=0.5, top_k=0).to_parameters() == {"threshold": "0.5", "top_k": "0"}
    assert MultiVectorParameters(8, 4, [1, 2]).to_parameters()["unused_token_ids"] == "[1, 2]"
    assert written(SelectionParameters(), PromptParameters({"q": "x"})) == {
        "threshold": "0.5", "top_k": "0", "prompts": '{"q": "x"}', "default_prompt_name": "",
    }  # fmt: skip


def test_from_parameters_takes_defaults_and_reads_an_empty_optional_as_none_when_keys_are_absent():
    read = TokenizerParameters.from_parameters({"max_length": "32", "other": "ignored"})
    assert read == TokenizerParameters(max_length=32)
    assert QaWindowParameters.from_parameters({"max_seq_len": "8", "doc_stride": "2", "cls_id": ""}).cls_id is None


def test_from_parameters_raises_naming_the_step_and_key_when_a_required_key_is_absent_or_bad():
    with pytest.raises(ValueError, match="model `x_tokenizer`'s config has no parameter `max_length`: rebuild"):
        TokenizerParameters.from_parameters({}, "model `x_tokenizer`")
    with pytest.raises(ValueError, match="parameter `max_length` of the step is `long`"):
        TokenizerParameters.from_parameters({"max_length": "long"})


# --- every rendered config's keys are declared -------------------------------------------------------------------


def _tiny(checkpoint_cache, tiny_factory) -> dict[str, tuple[Path, dict]]:
    """One checkpoint per task (and per shape a task's parameters take), with the spec settings it builds with."""
    from tests.tiny_decoders import make_decoder_embedder
    from tests.tiny_images import make_image_checkpoint
    from tests.tiny_ner import make_token_classifier
    from tests.tiny_rerankers import make_qwen3_reranker
    from tests.tiny_sparse import make_bge_m3, make_splade
    from tests.tiny_variants import make_cross_encoder, make_multilabel_classifier, make_pair_classifier
    from tests.tiny_zeroshot import make_nli_checkpoint

    qa = Path(__file__).parents[1] / "assets" / "qa" / "bert"
    return {
        "cls": (tiny_factory("bert"), {}),
        "cls_openvino": (tiny_factory("bert"), {"runtime": "openvino"}),
        "multilabel": (checkpoint_cache(make_multilabel_classifier, "bert"), {}),
        "pair": (checkpoint_cache(make_pair_classifier, "bert"), {}),
        "emb": (tiny_factory("bert", "embedding"), {}),
        "emb_chunk": (tiny_factory("bert", "embedding"), {"embedding": {"long_text": "chunk"}}),
        "decoder_emb": (checkpoint_cache(make_decoder_embedder, "qwen3", padding_side="left"), {}),
        "ner": (checkpoint_cache(make_token_classifier, "bert"), {}),
        "qa": (qa, {}),
        "zero_shot": (checkpoint_cache(make_nli_checkpoint, "bert"), {"task": "zero-shot-classification"}),
        "cross_encoder": (checkpoint_cache(make_cross_encoder), {}),
        "prompted_reranker": (checkpoint_cache(make_qwen3_reranker), {"task": "reranking"}),
        "sparse": (checkpoint_cache(make_splade), {}),
        "multi": (checkpoint_cache(make_bge_m3), {}),
        "image_cls": (checkpoint_cache(make_image_checkpoint, "vit"), {}),
        "image_emb": (checkpoint_cache(make_image_checkpoint, "clip"), {}),
    }


@pytest.mark.build  # loads the tiny checkpoints' PyTorch weights
def test_every_parameter_of_every_rendered_config_is_declared_when_each_task_is_rendered(
    checkpoint_cache, tiny_factory
):
    from rich.console import Console

    from tritongen.builder.pipeline import inspect, render
    from tritongen.builder.spec import load_spec
    from tritongen.tasks._registry import TASKS

    declared = {key for declaration in DECLARED for key in declaration.keys()}
    undeclared, tasks = [], set()
    for name, (path, settings) in _tiny(checkpoint_cache, tiny_factory).items():
        plan = inspect(load_spec(None, model=str(path), name=name, **settings), Console(quiet=True))
        tasks.add(plan.bound.task)
        for step, (_, message) in render(plan).items():
            undeclared += [f"{name} {step}: {key}" for key in message.parameters if key not in declared]
            for declaration in _ours():  # and each declaration present reads back from the config
                if any(key in message.parameters for key in declaration.keys()):
                    read = declaration.from_parameters({k: v.string_value for k, v in message.parameters.items()})
                    assert dataclasses.is_dataclass(read)
    assert undeclared == []
    built_in = {name for name, task in TASKS.items() if type(task).__module__.startswith("tritongen.")}
    assert built_in - tasks == {"image-embedding-text"}  # CLIP's text tower: the embedding task's parameters
