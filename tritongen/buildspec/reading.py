"""Reading a spec: a YAML file, overrides on top of it, the plug-in sections gathered, and the typed spec made.

Sections may be given whole (``question_answering: {doc_stride: 64}``) or by their flat keys (``qa_doc_stride``);
the classes of the sections come from the caller (``tritongen.builder.spec`` finds them through the registries).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tritongen.buildspec.sections import RuntimeSettings, SpecSection, TaskSettings
from tritongen.buildspec.spec import BuildSpec, DynamicBatchingSettings, ModelLayoutSettings, VersionPolicySettings
from tritongen.configs.model_config import InstanceGroup, QueuePolicy
from tritongen.errors import SpecError

__all__ = ["Sections", "gather_sections", "read_spec_file", "spec_from_mapping", "with_overrides"]

_NESTED = {
    "dynamic_batching": DynamicBatchingSettings,
    "tokenizer_instances": InstanceGroup,
    "model_instances": InstanceGroup,
    "postprocess_instances": InstanceGroup,
    "version_policy": VersionPolicySettings,
    "model_layout": ModelLayoutSettings,
}
_TABLES = {TaskSettings: "task_settings", RuntimeSettings: "runtime_settings"}  # where each kind of section goes

Sections = Mapping[str, type[SpecSection]]  # the plug-in sections by name (``tritongen.builder.spec`` has them)


def read_spec_file(path: Path | None) -> dict[str, Any]:
    """The mapping a YAML spec file holds ({} for no file); one-line errors for a missing or broken file."""
    if path is None:
        return {}
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError("spec file {path} does not exist", path=path) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {{path}} is not valid YAML: {exc}".splitlines()[0], path=path) from None
    if loaded is not None and not isinstance(loaded, dict):
        raise SpecError("spec file {path} must hold a mapping at the top level", path=path)
    return dict(loaded or {})


def with_overrides(data: dict[str, Any], overrides: Mapping[str, Any], sections: Sections) -> dict[str, Any]:
    """``data`` (a spec mapping) with ``overrides`` applied; an override of None leaves the value in place.

    Sections may be given whole (``question_answering={"doc_stride": 64}``) or by their flat names
    (``qa_doc_stride=64``); a nested mapping's None values leave their keys in place too. The result holds each
    section as one mapping under its name.
    """
    data = gather_sections(data, sections)
    flat = {old for cls in sections.values() for old in cls.flat_names}
    given = gather_sections({k: v for k, v in overrides.items() if k in flat or k in sections}, sections)
    for key, value in [*given.items(), *((k, v) for k, v in overrides.items() if k not in flat and k not in sections)]:
        if value is None:
            continue
        if (key in _NESTED or key in sections) and isinstance(value, dict):
            kept = {k: v for k, v in value.items() if v is not None}
            if not kept:
                continue
            value = {**(data.get(key) or {}), **kept}
        data[key] = value
    return data


def gather_sections(data: dict[str, Any], sections: Sections) -> dict[str, Any]:
    """A spec mapping with each plug-in section as one mapping under its name, its flat keys read into it.

    The sections may also come in ``task_settings`` or ``runtime_settings`` (as :meth:`BuildSpec.to_dict`'s
    layout nests them in earlier versions); a flat key gives way to the section's own value.
    """
    data = dict(data)
    for table in _TABLES.values():
        for name, values in (data.pop(table, None) or {}).items():
            data[name] = {**(data.get(name) or {}), **values}
    for name, cls in sections.items():
        value = data.get(name)
        if value is not None and not isinstance(value, dict):
            raise SpecError(f"`{name}` must be a mapping, got {type(value).__name__}")
        merged = dict(value or {})
        for old, new in cls.flat_names.items():
            if old in data:
                merged.setdefault(new, data.pop(old))
        if merged or name in data:
            data[name] = merged
    return data


def spec_from_mapping(data: dict[str, Any], sections: Sections) -> BuildSpec:
    """The :class:`BuildSpec` a mapping describes; ``sections`` are the plug-in sections' classes by name.

    Every section is filled in, at its defaults where the mapping has none, so the spec records them all.
    """
    data = gather_sections(data, sections)
    for name, cls in sections.items():
        data.setdefault(_table(cls), {})[name] = data.pop(name, None) or {}
    return _build(BuildSpec, data, "spec", sections)


def _table(cls: type[SpecSection]) -> str:
    return next(table for base, table in _TABLES.items() if issubclass(cls, base))


def _build(cls: type, data: dict[str, Any], where: str, sections: Sections) -> Any:
    if not isinstance(data, dict):
        raise SpecError(f"`{where}` must be a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    for key in unknown:
        why = getattr(cls, "retired", {}).get(key)
        if why is not None:
            raise SpecError(f"`{where}.{key}` is no longer a setting: {why}; remove it")
    if unknown:
        listed = sorted(set(known) - set(_TABLES.values()) | (set(sections) if cls is BuildSpec else set()))
        raise SpecError(f"unknown setting(s) {unknown} in `{where}`; known: {listed}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if cls is BuildSpec and key in _TABLES.values():
            value = {name: _section(name, v, sections) for name, v in value.items()}
        elif cls is BuildSpec and key == "containers":
            value = _releases(value)
        elif cls is BuildSpec and key in _NESTED:
            value = _build(_NESTED[key], value, key, sections)
        elif cls is DynamicBatchingSettings and key == "queue_policy" and value is not None:
            value = _build(QueuePolicy, value, "dynamic_batching.queue_policy", sections)
        elif isinstance(value, list):
            value = tuple(value)
        elif key in ("repository", "calibration", "validation") and value is not None:
            value = Path(value)
        values[key] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise SpecError(f"invalid `{where}`: {exc}") from None


def _section(name: str, value: Any, sections: Sections) -> SpecSection:
    if name not in sections:
        raise SpecError(f"unknown section `{name}`; known: {sorted(sections)}")
    return _build(sections[name], value, name, sections)  # type: ignore[no-any-return]


def _releases(value: Any) -> tuple[str, ...]:
    """Container releases from a list or a comma-separated string; YAML reads an unquoted 24.10 as 24.1."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
    return tuple(f"{item:.2f}" if isinstance(item, float) else str(item).strip() for item in items)
