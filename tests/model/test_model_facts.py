"""The model's inputs and length limit come from the model itself, not from its tokenizer's config."""

from __future__ import annotations

import pytest

from tests.tiny_checkpoints import ARCHITECTURES
from tritongen.errors import UnsupportedModelError
from tritongen.model.checkpoint import inspect_checkpoint
from tritongen.model.facts import model_inputs, read_model_facts
from tritongen.tasks import get_task

# Architectures whose tiny checkpoints embed two segments (type_vocab_size 2).
EXPECTED_TYPES = {"bert": True, "electra": True, "albert": True, "nomic_bert": True}


def _module(path):
    return get_task("classification").load_module(inspect_checkpoint(str(path)))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_read_model_facts_derives_inputs_and_limit_from_the_model_when_tokenizer_declares_nothing(arch, tiny_factory):
    facts = read_model_facts(_module(tiny_factory(arch, declare_limits=False)), token_id=5)
    types = ("token_type_ids",) if EXPECTED_TYPES.get(arch) else ()
    assert facts.inputs == ("input_ids", "attention_mask", *types)
    assert facts.position_limit == 64, facts.limit_source


def test_position_limit_is_lowered_to_what_runs_when_the_table_hides_its_offset(tiny_factory):
    # A RoBERTa whose position table lost its padding_idx: read naively it holds 66 positions, but the model
    # still numbers them from padding_idx + 1, so 66 tokens index past the table. The probe finds 64.
    module = _module(tiny_factory("roberta"))
    module.model.roberta.embeddings.position_embeddings.padding_idx = None
    facts = read_model_facts(module, token_id=5)
    assert facts.position_limit == 64
    assert "lowered" in facts.limit_source


def test_position_limit_without_a_table_is_the_trained_context(tiny_factory):
    facts = read_model_facts(_module(tiny_factory("deberta-v2")), token_id=5)  # relative positions only
    assert facts.position_limit == 64 and "max_position_embeddings" in facts.limit_source


def test_model_inputs_refuses_a_model_without_input_ids():
    class Vision:
        def forward(self, pixel_values):
            return pixel_values

    with pytest.raises(UnsupportedModelError, match="takes no input_ids"):
        model_inputs(Vision())


def test_position_limit_is_proven_only_up_to_the_longest_row_when_a_cap_is_declared(tiny_factory):
    # A decoder's trained context (Qwen3: 40,960 tokens) would cost a quadratic forward pass at that length;
    # no row is longer than the declared maximum, so the proof runs there and the limit is still reported.
    facts = read_model_facts(_module(tiny_factory("deberta-v2")), token_id=5, cap=16)
    assert facts.position_limit == 64
    assert "run at 16, the most a row holds" in facts.limit_source


def test_position_limit_is_the_declared_cap_when_the_model_declares_none(tiny_factory):
    module = _module(tiny_factory("deberta-v2"))
    module.model.config.max_position_embeddings = 0  # "none declared"
    with pytest.raises(UnsupportedModelError, match="declares no maximum length"):
        read_model_facts(module, token_id=5)
    facts = read_model_facts(module, token_id=5, cap=24)
    assert facts.position_limit == 24 and "the declared maximum length" in facts.limit_source
