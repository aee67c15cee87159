"""The version of an ensemble that its configs on disk serve: what a restart, an image or a published copy serves.

Triton picks the versions a model loads from its ``version_policy``, and the version an ensemble step
calls from the step's ``model_version`` (-1: the newest loaded). A build writes ``latest`` policies and -1
pins, so the newest build serves. A roll-out or rollback switches versions with config overrides, which
live in the server only; when it ends, :func:`pin` writes the same pinned configs to disk, so that the
repository says what the server serves. :func:`configured_version` reads that back for ``package``, and
refuses a repository whose models would serve different versions.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tritongen.configs.model_config import ModelConfig, VersionPolicy, to_text
from tritongen.configs.parser import read_config
from tritongen.errors import RepositoryError
from tritongen.repository.contents import served_steps
from tritongen.repository.staging import existing_versions

__all__ = ["configured_version", "loaded_versions", "pin", "pinned"]


def pinned(config: ModelConfig, versions: Iterable[int]) -> ModelConfig:
    """A copy of ``config`` that loads ``versions`` only; an ensemble's steps call the newest.

    An ensemble's own policy is pinned too, so that its metadata names the version its steps serve.
    """
    chosen = sorted(set(versions))
    steps = tuple(dataclasses.replace(step, model_version=chosen[-1]) for step in config.steps)
    return dataclasses.replace(config, version_policy=VersionPolicy(specific=tuple(chosen)), steps=steps)


def pin(repository: Path, configs: Mapping[str, ModelConfig], version: int) -> None:
    """Write each model's ``config.pbtxt`` (``configs``: model name to config, as read) pinned to ``version``.

    Each file is replaced at once and keeps its ``#`` header line (the config's comment). A server that loaded
    these models with the same pinned configs as overrides sees the files as changed; reloading a model from disk
    (Triton does so for an ensemble's steps when the ensemble loads) then gives the same versions.
    """
    for model, config in configs.items():
        path = Path(repository) / model / "config.pbtxt"
        temporary = path.with_name(f".config.pbtxt.{os.getpid()}")
        try:
            temporary.write_text(to_text(pinned(config, [version])), encoding="utf-8")
            os.replace(temporary, path)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise RepositoryError(f"cannot pin {{path}} to version {version}: {exc.strerror}", path=path) from None


def loaded_versions(config: ModelConfig, built: Sequence[int]) -> list[int]:
    """The versions of ``built`` (sorted) that Triton loads under ``config``'s version policy (none set: the newest)."""
    policy = config.version_policy or VersionPolicy()
    if policy.all:
        return list(built)
    if policy.specific:
        return [v for v in built if v in set(policy.specific)]
    return list(built)[-policy.latest :] if policy.latest > 0 else []


def configured_version(repository: Path, name: str) -> int:
    """The one version that every model of ensemble ``name`` serves when a server loads ``repository`` as it is.

    RepositoryError when ``name`` is not built there, when a model would not load the version the ensemble
    calls, or when its models would serve different versions (a hand-edited config, a deleted version).
    """
    repository = Path(repository)
    if served_steps(repository, name) is None:
        raise RepositoryError(f"`{name}` is not built in {{path}}", path=repository)
    fix = f"roll `{name}` out or back to one built version, which pins every model to it"
    ensemble = read_config(repository / name / "config.pbtxt")
    serves = {name: max(loaded_versions(ensemble, existing_versions(repository / name)), default=0)}
    for step in ensemble.steps:
        folder = repository / step.model_name
        loaded = loaded_versions(read_config(folder / "config.pbtxt"), existing_versions(folder))
        version = step.model_version if step.model_version > 0 else max(loaded, default=0)
        if version not in loaded:
            called = f"version {version}, which `{name}` calls" if version else "any built version"
            raise RepositoryError(f"{{path}} does not load {called}; {fix}", path=folder / "config.pbtxt")
        serves[step.model_name] = version
    if len(set(serves.values())) > 1:
        listed = ", ".join(f"`{model}` {version or 'none'}" for model, version in sorted(serves.items()))
        raise RepositoryError(
            f"the models of `{name}` in {{path}} serve different versions ({listed}); {fix}", path=repository
        )
    return serves[name]
