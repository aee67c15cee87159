"""Create the per-container venvs the build's container check and the tests use (``make compat-venv``).

For every supported Triton container (``tritongen.containers``), with that container's Python where this
machine has it (``python3.X`` on PATH or under pyenv):

- ``.venv-containers/<release>/runtimes``: the release there of every registered runtime (its pip package, at
  the release the container's native backend links: ``tritongen.runtimes.container_requirements``), from wheels;
- ``.venv-containers/<release>/steps``: exactly what a packaged Dockerfile installs there, resolved first
  for the image's Python and platform (``pip download --only-binary=:all: --python-version X.Y --platform
  ...`` into ``wheels/``), then installed, wheels only, into that Python. Each requirement line that
  resolved is kept in ``resolved.json``, which the tests compare with the Dockerfiles ``package`` writes.

Needs the package index; the tests that use the venvs run offline. A container whose Python is not on this
machine is skipped with one line (its tests skip too).
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tritongen.containers import CONTAINERS, Container
from tritongen.deploy.step_requirements import DISTRIBUTIONS, lock_pins, requirement_line
from tritongen.gates.compat import VENVS
from tritongen.runtimes import container_requirements

# The requirement lines a package can write: a text model's steps, an image model's, and a model with both
# towers (CLIP's text side beside its images).
LINES = {
    "text": ("numpy", "tokenizers"),
    "image": ("numpy", "pillow"),
    "image_text": ("numpy", "pillow", "tokenizers"),
}


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` (3.X) that runs: a pyenv build, else one on PATH (not a pyenv shim)."""
    builds = sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}.*/bin/python{version}")))
    for candidate in [*reversed(builds), shutil.which(f"python{version}")]:
        if candidate and "/shims/" not in candidate:
            ran = subprocess.run([candidate, "-c", "import venv"], capture_output=True, check=False)
            if ran.returncode == 0:
                return candidate
    return None


def _run(*args: str) -> None:
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)  # errors still reach stderr


def _venv(python: str, path: Path, marker: str) -> bool:
    """A fresh venv at ``path`` unless one was completed for ``marker``; True when it must be filled."""
    done = path / ".installed"
    if done.is_file() and done.read_text() == marker:
        return False
    shutil.rmtree(path, ignore_errors=True)
    _run(python, "-m", "venv", str(path))
    return True


def runtimes(target: Container, python: str, root: Path, numpy: str) -> None:
    """The container's release of every registered runtime, for the build's container check."""
    venv = root / "runtimes"
    packages = [*container_requirements(target), f"numpy=={numpy}"]
    if _venv(python, venv, " ".join(packages)):
        _run(str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *packages)
        (venv / ".installed").write_text(" ".join(packages))


def steps(target: Container, python: str, root: Path) -> None:
    """Resolve each requirement line for the image's Python and platform; install the widest into ``steps``."""
    pins = {**lock_pins(), **target.pins}
    resolved = {}
    for kind, distributions in LINES.items():
        line = requirement_line({d: pins[d] for d in distributions})
        args = target.pip_download(line, str(root / "wheels"))
        _run(sys.executable, "-m", "pip", "--quiet", *args)
        resolved[kind] = line
    widest = resolved["image_text"]
    venv = root / "steps"
    if _venv(python, venv, " ".join(widest)):
        # Wheels only, as the image installs them; from the index rather than wheels/, because pip download
        # evaluates environment markers for this Python, not the target's (tomli for Python 3.10).
        install = ["install", "--quiet", "--only-binary=:all:", *widest]
        _run(str(venv / "bin" / "python"), "-m", "pip", *install)
        (venv / ".installed").write_text(" ".join(widest))
    record = {"python": target.python, "platforms": list(target.platforms), "lines": resolved}
    (root / "resolved.json").write_text(json.dumps(record, indent=1))


def main() -> int:
    assert set(DISTRIBUTIONS.values()) == set(LINES["image_text"]), "a step distribution has no requirement line"
    numpy = lock_pins()["numpy"]
    for target in CONTAINERS.values():
        python = find_python(target.python)
        if python is None:
            print(f"skipped {target.release}: no Python {target.python} here (its container tests skip)")
            continue
        root = VENVS / target.release
        root.mkdir(parents=True, exist_ok=True)
        print(f"{target.describe()}: venvs in {root} (Python {target.python})", flush=True)
        runtimes(target, python, root, target.pins.get("numpy", numpy))
        steps(target, python, root)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        sys.exit(f"error: `{' '.join(map(str, exc.cmd))}` failed (exit {exc.returncode}); see its output above")
