"""The suite's own schedule under pytest-xdist: its groups, their order, and the timeline that measures them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import _LONGEST_FIRST, _MINILM_MODULES, xdist_group_of

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def test_every_group_ordered_first_is_a_group_the_suite_has():
    """A renamed module would silently fall to the back of the schedule: each name must still be a group."""
    modules = {path.stem: path for path in TESTS.rglob("test_*.py")}
    groups = {xdist_group_of(f"{path.relative_to(ROOT)}::test_x") for path in modules.values()} | {"finetuned"}
    assert set(_LONGEST_FIRST) <= groups
    assert len(set(_LONGEST_FIRST)) == len(_LONGEST_FIRST)
    assert _MINILM_MODULES <= set(modules)


def test_the_shared_builds_keep_their_tests_on_one_worker():
    assert xdist_group_of("tests/gates/test_compat.py::test_a[int8]") == "minilm"
    fine_tuned = "tests/precision/test_precision.py::test_fp16_passes_the_gate_on_a_fine_tuned_classifier"
    assert xdist_group_of(fine_tuned) == "finetuned"
    assert xdist_group_of("tests/gateway/test_gateway.py::test_b") == "test_gateway"


def test_the_timeline_shows_each_workers_end_and_the_longest_groups(tmp_path):
    rows = [
        {"worker": "gw0", "group": "minilm", "test": "tests/gates/test_compat.py::a", "start": 100.0, "end": 160.0},
        {"worker": "gw0", "group": "test_tune", "test": "tests/bench/test_tune.py::b", "start": 160.0, "end": 170.0},
        {"worker": "gw1", "group": "test_fold", "test": "tests/model/test_fold.py::c", "start": 100.0, "end": 130.0},
    ]
    timeline = tmp_path / "timeline.jsonl"
    timeline.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "test_timeline.py"), str(timeline)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    lines = out.splitlines()
    assert lines[0] == "3 tests in 70 s on 2 workers"
    assert "gw0: busy 70 s, finished at 70 s (0 s before the end)" in lines[1]
    assert "gw1: busy 30 s, finished at 30 s (40 s before the end)" in lines[2]
    assert lines[4].split() == ["60", "gw0", "0-", "60", "minilm", "(1", "tests)"]
    assert lines[5].split()[-3] == "test_fold" and lines[6].split()[-3] == "test_tune"
