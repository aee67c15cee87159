"""`.ci/run`'s first step: a disk too full for setup and the suite is named in one line before anything installs.

The script reads free space from `df`; these tests put a `df` first on PATH that reports chosen MiB and mounts, so
both branches (the clone and the temporary folder on one filesystem, or on two) run on any machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "disk_check.sh"
VENVS = (".venv", ".venv-containers", ".venv-st", ".venv-infinity")


def _run(tmp_path: Path, clone: tuple[int, str], tmp: tuple[int, str], installed: tuple[str, ...] = ()):
    """Runs the script in a copy of the checkout; `df` reports (free MiB, mount) for the clone and for TMPDIR."""
    checkout, tmp_dir, bin_dir = tmp_path / "clone", tmp_path / "tmp", tmp_path / "bin"
    for folder in (checkout / "scripts", tmp_dir, bin_dir):
        folder.mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / "scripts" / SCRIPT.name)
    for venv in installed:
        (checkout / venv).mkdir()
        (checkout / venv / ".installed").touch()
    (bin_dir / "df").write_text(
        "#!/usr/bin/env bash\n"
        'echo "Filesystem 1M-blocks Used Available Capacity Mounted on"\n'
        f'case "$(cd "${{@: -1}}" && pwd -P)" in\n'
        f'  {tmp_dir.resolve()}) echo "fake 1 1 {tmp[0]} 1% {tmp[1]}";;\n'
        f'  *) echo "fake 1 1 {clone[0]} 1% {clone[1]}";;\n'
        "esac\n"
    )
    (bin_dir / "df").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(tmp_dir)}
    script = checkout / "scripts" / SCRIPT.name
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)


def test_a_fresh_clone_on_a_disk_too_full_for_the_venvs_and_the_builds_is_refused_in_one_line(tmp_path):
    # One disk: 9000 MiB would hold the four venvs (8000) but not them and one run's builds (2100) as well.
    result = _run(tmp_path, clone=(9000, "/disk"), tmp=(9000, "/disk"))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: 8.7 GiB free on /disk, and the venvs to install and the suite's builds need about 9.8 GiB there: "
        "free some space"
    )


def test_a_checkout_with_its_venvs_needs_room_only_for_the_builds(tmp_path):
    result = _run(tmp_path, clone=(3000, "/disk"), tmp=(3000, "/disk"), installed=VENVS)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_a_temporary_folder_on_its_own_small_filesystem_is_named(tmp_path):
    # Two filesystems: the clone's has room for the venvs; the temporary folder's cannot hold one run's builds.
    result = _run(tmp_path, clone=(9000, "/work"), tmp=(1000, "/tmp"))
    assert result.returncode == 1
    assert result.stderr.startswith("error: 0.9 GiB free on /tmp, and the suite's builds (")
    assert "need about 2.0 GiB there" in result.stderr
    roomy = _run(tmp_path / "roomy", clone=(9000, "/work"), tmp=(3000, "/tmp"))
    assert (roomy.returncode, roomy.stderr) == (0, "")
