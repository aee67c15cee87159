"""Bring another version of a deployment into service while the server keeps answering.

The sequence (:func:`switch`), with Triton's repository API and config overrides, the files on
disk untouched until the server serves one version again:

1. pin each step, then the ensemble and its steps, to the serving version ``old`` (config overrides;
   a step is always loaded again right before an ensemble load, see ``pin_ensemble``);
2. load each step with ``version_policy: specific [old, new]``: ``new`` loads and warms up
   beside ``old``, which keeps serving;
3. canary: the parity texts go through the steps of ``new`` directly (``model_version``), and
   the model step's outputs must match what the build recorded (:mod:`tritongen.repository.canary`);
4. load the steps with ``[old, new]`` again, then pin the ensemble to ``new`` (traffic moves);
5. load each step with ``specific [new]``: ``old`` is unloaded, after ``new`` answered;
6. write the same pinned configs to disk (:func:`tritongen.repository.pins.pin`), so that a restart, an
   image (``tritongen package``) or a published copy serves ``new`` too.

Any failure before 4 reloads the steps with ``old`` only, pins the configs on disk to it and
raises :class:`RolloutError`, so the old version keeps serving. A rollback is the same switch
back to the previous version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.configs.model_config import ModelConfig, to_json
from tritongen.configs.parser import read_config
from tritongen.errors import RepositoryError, RolloutError, describe
from tritongen.repository.canary import CANARY_FILE, Canary, chunks, compare, join
from tritongen.repository.contents import served_steps
from tritongen.repository.pins import pin, pinned
from tritongen.repository.staging import existing_versions

__all__ = ["Switch", "rollback", "rollout", "serving_version", "switch"]


@dataclass(frozen=True)
class Switch:
    """A completed switch of ``name`` from version ``old`` to ``new``."""

    name: str
    old: int
    new: int


def _model(name: str, step: str) -> str:
    return name if step == "ensemble" else f"{name}_{step}"


def _disk_config(repository: Path, model: str) -> ModelConfig:
    try:
        return read_config(Path(repository) / model / "config.pbtxt")
    except RepositoryError as exc:
        raise RolloutError(str(exc)) from None


def _steps(repository: Path, name: str) -> tuple[str, ...]:
    """The steps the ensemble wires: a name keeps one shape across its versions (the build refuses others)."""
    try:
        steps = served_steps(repository, name)
    except RepositoryError as exc:
        raise RolloutError(str(exc)) from None
    if steps is None:
        raise RolloutError(f"`{name}` is not built in {{path}}", path=repository)
    return steps


def _error(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def serving_version(client: Any, name: str) -> int:
    """The version of ``name`` that takes traffic: the ensemble's pin, else the loaded model step.

    Reads the repository index first: an admin key the server refuses stops here, before any change.
    """
    try:
        index = client.get_model_repository_index()
        config = client.get_model_config(name)
    except Exception as exc:  # tritonclient errors (a refused key, an unknown model) and transport failures
        raise RolloutError(f"cannot read the state of `{name}` from the server: {_error(exc)}") from None
    for step in config.get("ensemble_scheduling", {}).get("step", []):
        if step.get("model_name") == _model(name, "model") and int(step.get("model_version", -1)) > 0:
            return int(step["model_version"])
    ready = [
        int(row["version"])
        for row in index
        if row.get("name") == _model(name, "model") and row.get("state") == "READY" and row.get("version")
    ]
    if not ready:
        raise RolloutError(f"`{name}` is not being served: its model step has no loaded version")
    return max(ready)


class _Deployment:
    """One ensemble and its steps as the server sees them, through an admin ``client`` (HTTP)."""

    def __init__(self, client: Any, repository: Path, name: str, log: Callable[[str], None]) -> None:
        self.client, self.repository, self.name, self.log = client, Path(repository), name, log
        self.steps = _steps(self.repository, name)
        self.configs = {step: _disk_config(self.repository, _model(name, step)) for step in ("ensemble", *self.steps)}

    def pin_ensemble(self, version: int) -> None:
        """Load the ensemble with every step pinned to ``version``.

        Loading an ensemble makes Triton poll its steps' folders too, and reload from
        ``config.pbtxt`` (newest version only) any step changed on disk since its last load.
        A Python stub writes ``__pycache__`` into a version folder the first time it loads it,
        after that load was stamped; so each step must have been loaded again (same override)
        after its versions first loaded, or the pins would point at unloaded versions, and a
        failed ensemble load leaves no ensemble at all.

        The ensemble itself loads version ``version`` (``specific``), not its disk policy's newest:
        Triton 2.51 reports an ensemble's loaded versions as its versions (``/v2/models/NAME``), so
        after a rollback the metadata would name a version that no longer serves. Its version folders
        share one wiring (the build refuses another), and Triton unloads the old version only once
        the new one is loaded, so traffic never finds no ensemble. A fresh ensemble version would
        need a folder written under traffic and numbers no longer matching the builds'.
        """
        self.client.load_model(self.name, config=to_json(pinned(self.configs["ensemble"], [version])))

    def load_steps(self, versions: list[int]) -> None:
        for step in self.steps:
            self.client.load_model(_model(self.name, step), config=to_json(pinned(self.configs[step], versions)))

    def record(self, version: int) -> None:
        """Pin the configs on disk to ``version``, the one the server now serves (:mod:`~tritongen.repository.pins`)."""
        pin(self.repository, {_model(self.name, step): config for step, config in self.configs.items()}, version)

    def canary(self, version: int) -> str | None:
        """Send the recorded texts through the steps of ``version``; None when it answers as recorded."""
        path = self.repository / self.name / str(version) / CANARY_FILE
        try:
            canary = Canary.load(path)
        except (OSError, ValueError, KeyError) as exc:
            return f"no usable canary record {path} ({describe(exc, 120)}); rebuild that version"
        count = len(next(iter(canary.inputs.values())))
        served = []
        for rows in chunks(count, canary.batch):  # the requests the build recorded
            texts = {name: values[rows] for name, values in canary.inputs.items()}
            answer = self._through_steps(texts, version, canary.output)
            if isinstance(answer, str):
                return answer
            served.append(answer)
        why = compare(canary, join(served))
        return None if why is None else f"`{_model(self.name, 'model')}` version {version}: {why}"

    def _through_steps(self, texts: dict[str, list[str]], version: int, output: str) -> np.ndarray | str:
        """One request of ``texts`` through the steps of ``version``: the model step's ``output``, or why not."""
        tensors = {name: np.array([[t.encode()] for t in values], dtype=np.object_) for name, values in texts.items()}
        for step in self.configs["ensemble"].steps:
            # the inputs the record holds (an optional one it has no rows of is left out, as a client would)
            sent = {key: tensors[value] for key, value in step.input_map.items() if value in tensors}
            outputs = self._infer(step.model_name, version, sent)
            if step.model_name == _model(self.name, "model"):
                if output not in outputs:
                    return f"`{step.model_name}` version {version} has no output `{output}`"
                return outputs[output]
            tensors.update({value: outputs[key] for key, value in step.output_map.items()})
        return f"`{self.name}` version {version} has no model step"

    def _infer(self, model: str, version: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tritonclient.http as httpclient
        from tritonclient.utils import np_to_triton_dtype

        tensors = []
        for key, array in inputs.items():
            tensor = httpclient.InferInput(key, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        result = self.client.infer(model, tensors, model_version=str(version))
        return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


def switch(
    client: Any, repository: Path, name: str, old: int, new: int, *, log: Callable[[str], None] = print
) -> Switch:
    """Move ``name`` from version ``old`` to ``new`` under traffic (see the module docstring)."""
    if old == new:
        raise RolloutError(f"version {new} of `{name}` is already serving")
    for step in ("ensemble", *_steps(Path(repository), name)):
        folder = Path(repository) / _model(name, step)
        if new not in existing_versions(folder):
            raise RolloutError(f"{{path}} has no version {new}", path=folder)
    deployment = _Deployment(client, repository, name, log)
    try:
        # Steps loaded from disk before `new` was built count as modified there: loading the ensemble
        # would reload them with their disk policy (latest only, i.e. `new`) and fail its pins. So the
        # steps are first pinned to `old` by override, then the ensemble, and only then does `new` load.
        deployment.load_steps([old])
        deployment.pin_ensemble(old)
        log(f"`{name}`: ensemble pinned to version {old}; loading version {new} of each step beside it")
        deployment.load_steps([old, new])
        why = deployment.canary(new)
    except Exception as exc:  # tritonclient errors and transport failures alike
        why = f"loading version {new} failed: {_error(exc)}"
    if why is not None:
        _restore(deployment, old, log)
        raise RolloutError(f"canary of `{name}` version {new} failed: {why}; version {old} still serves")
    log(f"`{name}`: canary of version {new} matches the build's outputs; moving traffic")
    try:
        deployment.load_steps([old, new])  # again: see _Deployment.pin_ensemble
        deployment.pin_ensemble(new)
    except Exception as exc:
        _restore(deployment, old, log)
        raise RolloutError(
            f"pinning `{name}` to version {new} failed: {_error(exc)}; version {old} still serves"
        ) from None
    deployment.load_steps([new])
    try:
        deployment.record(new)
    except RepositoryError as exc:  # the switch is done: say which version serves, and what a restart would miss
        raise RepositoryError(
            f"`{name}` serves version {new}, but {exc.message}; a restart would serve another version", path=exc.path
        ) from None
    log(f"`{name}`: version {new} serves; version {old} unloaded; the configs in {repository} name it")
    return Switch(name, old, new)


def _restore(deployment: _Deployment, old: int, log: Callable[[str], None]) -> None:
    """Steps back to ``old`` only, then the ensemble pinned to it (a failed ensemble load leaves none).

    The configs on disk are pinned to ``old`` too: a build published ``new`` as the newest version, and a
    restart would otherwise serve the version that just failed.
    """
    try:
        deployment.load_steps([old])
        deployment.pin_ensemble(old)
        deployment.record(old)
    except Exception as exc:  # the switch already failed: say so, and keep the first error
        log(f"`{deployment.name}`: restoring version {old} failed too: {_error(exc)}")


def rollout(
    client: Any, repository: Path, name: str, *, version: int | None = None, log: Callable[[str], None] = print
) -> Switch:
    """Switch ``name`` to ``version`` (default: the newest built) from the serving version."""
    old = serving_version(client, name)
    new = version if version is not None else max(existing_versions(Path(repository) / name), default=0)
    if new == 0:
        raise RolloutError(f"{{path}} has no built version of `{name}`", path=Path(repository) / name)
    return switch(client, repository, name, old, new, log=log)


def rollback(client: Any, repository: Path, name: str, *, log: Callable[[str], None] = print) -> Switch:
    """Switch ``name`` back to the newest version built before the serving one."""
    old = serving_version(client, name)
    earlier = [v for v in existing_versions(Path(repository) / name) if v < old]
    if not earlier:
        raise RolloutError(
            f"`{name}` serves version {old} and {{path}} holds no earlier one", path=Path(repository) / name
        )
    return switch(client, repository, name, old, earlier[-1], log=log)
