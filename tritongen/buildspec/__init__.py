"""The typed build specification: everything `build_repository` needs, validated.

A spec comes from CLI options, from a YAML file (``make repo SPEC=deploy.yaml``), or both
(options given on the command line override the file). Defaults are documented on the
fields and in docs/building.md.

This package is the spec as data: its fields and the checks that need nothing else (``spec``), the reading of a
file and overrides into sections whose classes it is given (``reading``), the registries' plumbing (``plugins``)
and the node's cores (``cores``). The tasks' and runtimes' sections (``buildspec.sections``) are declared
in their own folders; ``tritongen.builder.spec.load_spec`` finds them through the registries, fills the node's
defaults and runs the runtime's checks.
"""

from tritongen.buildspec.cores import check_cpu_cores, python_step_defaults, usable_cores
from tritongen.buildspec.plugins import claim_sections, plugin_entry, register_plugin, section_source, sections_by_name
from tritongen.buildspec.reading import gather_sections, read_spec_file, spec_from_mapping, with_overrides
from tritongen.buildspec.sections import RuntimeSettings, SpecSection, TaskSettings
from tritongen.buildspec.spec import (
    DEFAULT_NAME,
    QUEUE_BATCHES,
    BuildSpec,
    DynamicBatchingSettings,
    ModelLayoutSettings,
    VersionPolicySettings,
    bucket_lengths,
    instance_group,
)
from tritongen.configs.model_config import InstanceGroup, QueuePolicy

__all__ = [
    "DEFAULT_NAME",
    "QUEUE_BATCHES",
    "BuildSpec",
    "DynamicBatchingSettings",
    "InstanceGroup",
    "ModelLayoutSettings",
    "QueuePolicy",
    "RuntimeSettings",
    "SpecSection",
    "TaskSettings",
    "VersionPolicySettings",
    "bucket_lengths",
    "check_cpu_cores",
    "claim_sections",
    "gather_sections",
    "instance_group",
    "plugin_entry",
    "python_step_defaults",
    "read_spec_file",
    "register_plugin",
    "section_source",
    "sections_by_name",
    "spec_from_mapping",
    "usable_cores",
    "with_overrides",
]
