"""``make test-repeat``'s runner: several fresh pytest sessions, and every test that failed in any of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A test that fails on its second run only (a counter file beside it), one that always passes, one skipped.
FLAKY = """
import os, pathlib, pytest
COUNT = pathlib.Path(os.environ["FLAKY_COUNT"])

def test_steady():
    assert True

def test_second_run_fails():
    runs = int(COUNT.read_text()) + 1 if COUNT.exists() else 1
    COUNT.write_text(str(runs))
    assert runs != 2, "the race lost"

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass
"""


def test_repeat_reports_a_test_that_failed_in_one_round_of_three_and_exits_1(tmp_path):
    (tmp_path / "test_flaky.py").write_text(FLAKY)
    out = tmp_path / "rounds"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "repeat_tests.py"), "--rounds", "3", "--out", str(out), "--",
         str(tmp_path / "test_flaky.py"), "-p", "no:xdist", "-c", "/dev/null", f"--rootdir={tmp_path}"],
        capture_output=True, text=True, timeout=300, env={"FLAKY_COUNT": str(tmp_path / "count"), "PATH": ""},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "round 1 of 3: 2 passed, 0 failed, 1 skipped in " in "\n".join(lines)
    assert any(line.startswith("round 2 of 3: 1 passed, 1 failed, 1 skipped in ") for line in lines)
    assert "1 of 2 tests failed in at least one of 3 rounds:" in lines
    assert any(line.endswith("test_second_run_fails: failed 1 of 3 rounds (2)") for line in lines)
    assert any("round 2: AssertionError: the race lost" in line for line in lines)
    assert sorted(p.name for p in out.glob("round-*.xml")) == ["round-1.xml", "round-2.xml", "round-3.xml"]


def test_repeat_says_none_failed_and_exits_0_when_every_round_passes(tmp_path):
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "repeat_tests.py"), "--rounds", "2", "--out", str(tmp_path / "r"),
         "--", str(tmp_path / "test_ok.py"), "-p", "no:xdist", "-c", "/dev/null", f"--rootdir={tmp_path}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "No test failed in 2 rounds (1 test ran)."
