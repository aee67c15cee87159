"""The canary's record: requests of at most the step's batch, their outputs joined, a tolerance by precision."""

from __future__ import annotations

import numpy as np

from tritongen.repository.canary import Canary, Recorder, chunks, compare, join, record, tolerance


def test_chunks_cut_the_texts_into_requests_of_the_steps_batch_and_zero_sends_one():
    assert chunks(10, 4) == [slice(0, 4), slice(4, 8), slice(8, 12)]
    assert chunks(3, 0) == [slice(0, 3)] and chunks(0, 4) == []


def test_join_pads_a_sequence_axis_to_the_widest_request():
    joined = join([np.ones((2, 3, 4)), np.ones((1, 5, 4))])
    assert joined.shape == (3, 5, 4) and joined[0, 3:].sum() == 0 and joined[2].sum() == 20
    assert join([np.ones((2, 4)), np.zeros((1, 4))]).shape == (3, 4)


def test_tolerance_follows_the_precision_and_never_falls_below_parity():
    values = np.array([[0.5, -2.0]], dtype=np.float32)
    assert tolerance("fp32", 1e-4, values) == 1e-4
    assert tolerance("fp16", 1e-4, values) == 2e-2 and tolerance("int8", 1e-4, values) == 0.1
    assert tolerance("fp16", 1e-4, np.zeros((1, 2))) == 1e-4


class _Encoder:
    """Each text's ids are its characters' codes, padded per request to its longest row."""

    def encode(self, texts, pairs=None):
        return [type("E", (), {"ids": [ord(c) for c in t]})() for t in texts]

    def pack(self, encodings):
        width = max(len(e.ids) for e in encodings)
        return {"input_ids": np.array([e.ids + [0] * (width - len(e.ids)) for e in encodings], dtype=np.int64)}


def test_record_sends_requests_of_the_batch_and_the_served_answer_matches_it(tmp_path):
    calls = []

    def run(feeds):
        calls.append(feeds["input_ids"].shape)
        return {"tokens": feeds["input_ids"][..., None].astype(np.float32)}

    texts = ["ab", "abcd", "a", "abc", "abcde"]
    record(tmp_path / "canary.json", Recorder(run, "a test step", batch=2), _Encoder(), inputs={"TEXT": texts},
           output="tokens", tolerance_of=lambda values: 1e-4)  # fmt: skip
    assert calls == [(2, 4), (2, 3), (1, 5)]  # three requests, each padded to its own longest row
    canary = Canary.load(tmp_path / "canary.json")
    assert canary.batch == 2 and canary.values.shape == (5, 5, 1) and canary.lengths == (2, 4, 1, 3, 5)
    served = join([run(_Encoder().pack(_Encoder().encode(texts[rows])))["tokens"] for rows in chunks(5, 2)])
    assert compare(canary, served) is None
    served[3, 1] += 1.0
    assert "differs from the build's by up to 1.00e+00" in compare(canary, served)
