"""The build spec as a build reads it: YAML and options, the registered plug-ins' sections, the node's defaults.

The runtime's own checks run here too.

``tritongen.buildspec`` is the spec as data; this module is where it meets the registries, so that a task or a
runtime declares its section, its flags and its checks in its own folder and the spec needs no list of them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tritongen.buildspec import (
    BuildSpec,
    check_cpu_cores,
    gather_sections,
    python_step_defaults,
    read_spec_file,
    sections_by_name,
    spec_from_mapping,
    usable_cores,
    with_overrides,
)
from tritongen.buildspec.sections import SpecSection
from tritongen.errors import SpecError
from tritongen.runtimes import RUNTIMES, get_runtime
from tritongen.tasks import TASKS

__all__ = ["check_spec", "flat_names", "load_spec", "recorded_spec", "spec_sections"]


def spec_sections() -> dict[str, type[SpecSection]]:
    """Every registered task's and runtime's section class, by section name (their keys checked as they register)."""
    declared = [task.Settings for task in TASKS.values() if task.section] + [
        cls for runtime in RUNTIMES.values() for cls in runtime.settings
    ]
    return sections_by_name(declared)


def flat_names() -> dict[str, tuple[str, str]]:
    """Flat spec keys and command-line destinations (``qa_doc_stride``) -> (section, field)."""
    return {old: (name, new) for name, cls in spec_sections().items() for old, new in cls.flat_names.items()}


def load_spec(path: Path | None = None, **overrides: Any) -> BuildSpec:
    """Build a :class:`BuildSpec` from an optional YAML file plus keyword overrides.

    The spec checks its own fields and sections; its runtime's checks (:func:`check_spec`) run once, in the
    build's first stage, for a loaded spec and one made in code alike.

    Overrides whose value is ``None`` are ignored, so CLI options that were not given leave the file's (or the
    default) value in place. A section may be given whole (``question_answering={"doc_stride": 64}``) or by its
    flat names (``qa_doc_stride=64``).
    """
    sections = spec_sections()
    data = with_overrides(read_spec_file(path), overrides, sections)
    if "model" not in data:
        raise SpecError("no model given: name a checkpoint directory or a hub id")
    return _laid_out(spec_from_mapping(_device_defaults(data), sections), data)


def recorded_spec(data: dict[str, Any]) -> dict[str, Any]:
    """A spec a build recorded in its ``build.json``, as :func:`load_spec` overrides, less retired settings.

    A user's own spec that sets a retired setting is refused; a record an earlier version wrote is not theirs to edit.
    """
    sections = spec_sections()
    data = gather_sections(data, sections)
    for name, cls in sections.items():
        if isinstance(data.get(name), dict):
            data[name] = {key: value for key, value in data[name].items() if key not in cls.retired}
    return data


def check_spec(spec: BuildSpec) -> None:
    """The checks that need the registries: the runtime's own (an unknown runtime lists the registered ones)."""
    get_runtime(spec.runtime).check_spec(spec)


def _device_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The device fills what its node wants wherever the spec leaves it open (an explicit value wins).

    ``device: gpu``: KIND_GPU instances, FP16 and the runtime's GPU settings. A CPU build (``device: cpu``, or
    none and no KIND_GPU model instances): each request padded to its longest row, and the node's cores recorded
    (``cpu_cores``), for which the build lays out the model step.
    """
    runtime = get_runtime(data.get("runtime", BuildSpec.runtime))
    check_cpu_cores(data.get("cpu_cores"))
    if data.get("device") != "gpu":
        if not _cpu_build(data):
            return data
        data = {**data, "cpu_cores": data.get("cpu_cores") or usable_cores()}  # recorded: the node it is sized for
        data.setdefault("padding", "longest")
        return data
    data = {**data, "cpu_cores": data.get("cpu_cores") or usable_cores()}  # the node's CPU feeds its GPU
    data["model_instances"] = {"kind": "KIND_GPU", **(data.get("model_instances") or {})}
    data.setdefault("precision", "fp16")
    data.setdefault("fold", True)
    return runtime.gpu_defaults(python_step_defaults(data, data["cpu_cores"]))


def _cpu_build(data: dict[str, Any]) -> bool:
    """Whether the spec mapping builds for a CPU node: no ``device: gpu`` and no KIND_GPU model instances."""
    return data.get("device") != "gpu" and (data.get("model_instances") or {}).get("kind", "KIND_CPU") == "KIND_CPU"


def _laid_out(spec: BuildSpec, data: dict[str, Any]) -> BuildSpec:
    """``spec`` with what its mapping ``data`` says of the model step's layout: left open to the build, or given.

    Only the fact is recorded (``model_layout.left_open``); the build's size stage decides the layout from it, once.
    Written (``build.json`` records it), it stands: a rebuild from the record decides the layout again.
    """
    left_open = _cpu_build(data) and get_runtime(spec.runtime).layout_open(data)
    return spec.replace(model_layout=dataclasses.replace(spec.model_layout, left_open=left_open))
