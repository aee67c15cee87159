"""The build spec as a build reads it: YAML and options, the registered plug-ins' sections, the node's defaults.

The runtime's own checks run here too.

``tritongen.buildspec`` is the spec as data; this module is where it meets the registries, so that a task or a
runtime declares its section, its flags and its checks in its own folder and the spec needs no list of them.
"""

from __future__ import annotations

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
from tritongen.runtimes import RUNTIMES, Runtime, get_runtime
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

    Overrides whose value is ``None`` are ignored, so CLI options that were not given leave the file's (or the
    default) value in place. A section may be given whole (``question_answering={"doc_stride": 64}``) or by its
    flat names (``qa_doc_stride=64``).
    """
    sections = spec_sections()
    data = with_overrides(read_spec_file(path), overrides, sections)
    if "model" not in data:
        raise SpecError("no model given: name a checkpoint directory or a hub id")
    spec = spec_from_mapping(_device_defaults(data), sections)
    check_spec(spec)
    return spec


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
    none and no KIND_GPU model instances): each request padded to its longest row, the runtime's instances and
    threads for ``cpu_cores`` cores; where
    the spec leaves both open and the runtime can be measured, the build measures the layout
    (``model_layout.measure``, ``tritongen.sizing``) and the runtime's default is only where it starts.
    """
    runtime = get_runtime(data.get("runtime", BuildSpec.runtime))
    check_cpu_cores(data.get("cpu_cores"))
    if data.get("device") != "gpu":
        if (data.get("model_instances") or {}).get("kind", "KIND_CPU") != "KIND_CPU":
            return data
        data = {**data, "cpu_cores": data.get("cpu_cores") or usable_cores()}  # recorded: the node it is sized for
        data.setdefault("padding", "longest")
        layout = dict(data.get("model_layout") or {})
        if layout.get("measure") is None:  # this machine can stand in for a node of no more cores than its own
            layout["measure"] = _layout_open(runtime, data) and data["cpu_cores"] <= usable_cores()
        return runtime.cpu_defaults({**data, "model_layout": layout}, data["cpu_cores"])
    data = {**data, "cpu_cores": data.get("cpu_cores") or usable_cores()}  # the node's CPU feeds its GPU
    data["model_instances"] = {"kind": "KIND_GPU", **(data.get("model_instances") or {})}
    data.setdefault("precision", "fp16")
    data.setdefault("fold", True)
    return runtime.gpu_defaults(python_step_defaults(data, data["cpu_cores"]))


def _layout_open(runtime: Runtime, data: dict[str, Any]) -> bool:
    """Whether the spec mapping leaves the model step's instances and threads to the build, and it can measure."""
    if runtime.thread_setting is None or not runtime.measures_layout:
        return False
    section, key = runtime.thread_setting
    threads = (data.get(section.section) or {}).get(key)
    return (data.get("model_instances") or {}).get("count") is None and not threads
