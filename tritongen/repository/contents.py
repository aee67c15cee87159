"""What a model repository holds: the four models of an ensemble, the steps and windows its configs serve.

Light on purpose: the commands that operate a built repository (serve, rollout, package, manifests, tune, the
gateway) read it through this module and never import the build. protobuf and tritonclient load when a config
is read (:func:`tritongen.configs.parser.read_config`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tritongen.contract import WINDOW_EXAMPLE
from tritongen.errors import RepositoryError

__all__ = ["built_sizing", "served_steps", "served_windows", "step_names"]


def step_names(name: str) -> dict[str, str]:
    """The four model names (and folders) of an ensemble called ``name``."""
    return {
        "ensemble": name,
        "tokenizer": f"{name}_tokenizer",
        "model": f"{name}_model",
        "postprocess": f"{name}_postprocess",
    }


def served_steps(repository: Path, name: str) -> tuple[str, ...] | None:
    """The steps the ensemble ``name`` in ``repository`` wires, in order; None when it is not built there.

    ``tokenizer``, ``model``, and ``postprocess`` unless the build folded it: the ensemble's
    ``config.pbtxt`` is the truth.
    """
    names = step_names(name)
    path = Path(repository) / names["ensemble"] / "config.pbtxt"
    if not path.is_file():
        return None
    from tritongen.configs.parser import read_config

    by_model = {model: step for step, model in names.items() if step != "ensemble"}
    wired = [by_model.get(model) for model in read_config(path).step_models]
    if not wired or None in wired:
        raise RepositoryError(f"{{path}} is not an ensemble of `{name}`'s steps; rebuild it", path=path)
    return tuple(step for step in wired if step is not None)


def served_windows(repository: Path, name: str) -> bool | None:
    """Whether the ensemble ``name`` in ``repository`` splits texts into windows; None when it is not built there.

    Its tokenizer step's ``config.pbtxt`` says so: a windowing tokenizer emits ``window_example``.
    """
    path = Path(repository) / step_names(name)["tokenizer"] / "config.pbtxt"
    if not path.is_file():
        return None
    from tritongen.configs.parser import read_config

    return any(output.name == WINDOW_EXAMPLE for output in read_config(path).outputs)


def built_sizing(repository: Path, name: str) -> dict[str, int]:
    """What the newest build of ``name`` was sized for; {} if unknown.

    ``cpu_cores``, ``tokenizer_instances``, and ``gpu`` (1 for a ``device: gpu`` build), read from its
    ``build.json``; a name not built there, or built before the record held it, gives {}.
    """
    folder = Path(repository) / name
    versions = (
        sorted((int(p.name) for p in folder.iterdir() if p.name.isdigit()), reverse=True) if folder.is_dir() else []
    )
    if not versions or not (folder / str(versions[0]) / "build.json").is_file():
        return {}
    spec = json.loads((folder / str(versions[0]) / "build.json").read_text()).get("spec", {})
    sizing = {
        "tokenizer_instances": (spec.get("tokenizer_instances") or {}).get("count") or 1,
        "gpu": int(spec.get("device") == "gpu"),
    }
    return {**sizing, "cpu_cores": spec["cpu_cores"]} if spec.get("cpu_cores") else sizing
