"""Every file in ``scripts/`` earns its place: a ``make`` target or a test runs it.

Most scripts are run by the tests of what they serve (the GPU node check's dry run, the suite's timeline, the
repeated rounds) or by the Makefile (the container venvs). The measurement scripts, whose real runs need a built
repository and minutes, are run here with ``--help``: each imports what it uses from the package and builds its
options, so a renamed function or option fails here, not on the day someone measures. The QA checkpoint maker
writes the test assets, and must write them again byte for byte.
"""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}  # the package from this checkout
# Run here with --help: measurements and the checkpoints they measure, each needing a built repository or minutes.
MEASUREMENTS = (
    "make_base_checkpoint.py",
    "make_finetuned_classifier.py",
    "overload.py",
    "padding_bench.py",
    "sensitivity_bench.py",
)


def _run_elsewhere(name: str) -> bool:
    """Whether the Makefile or a test module other than this one names ``name``."""
    if name in (ROOT / "Makefile").read_text(encoding="utf-8"):
        return True
    tests = (p for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name)
    return any(name in p.read_text(encoding="utf-8") for p in tests)


def test_every_script_is_run_by_a_make_target_or_a_test():
    here = {*MEASUREMENTS, "make_qa_checkpoints.py"}
    orphans = sorted(
        p.name for p in SCRIPTS.iterdir() if p.is_file() and p.name not in here and not _run_elsewhere(p.name)
    )
    assert orphans == []


@pytest.mark.parametrize("name", MEASUREMENTS)
def test_a_measurement_script_loads_and_describes_its_options(name):
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / name), "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env=ENV,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage:")


def test_the_qa_checkpoint_maker_writes_the_committed_test_assets_again(tmp_path):
    subprocess.run(
        [sys.executable, str(SCRIPTS / "make_qa_checkpoints.py"), "--out", str(tmp_path)], check=True,
        capture_output=True, timeout=300, env=ENV,
    )  # fmt: skip
    committed = ROOT / "tests" / "assets" / "qa"
    for arch in sorted(p.name for p in committed.iterdir() if p.is_dir()):
        names = sorted(p.name for p in (committed / arch).iterdir())
        assert sorted(p.name for p in (tmp_path / arch).iterdir()) == names
        _, mismatch, errors = filecmp.cmpfiles(committed / arch, tmp_path / arch, names, shallow=False)
        assert (mismatch, errors) == ([], []), arch
