"""The bench's tuning sweep: instance and thread counts of the served ensemble, on this machine.

Each setting is applied to the running server through Triton's load API with a config override
(``load_model(step, config=...)``), the way ``tritongen rollout`` loads versions, but never written to
disk; every setting meets the same server, texts and perf_analyzer sweep in one run. The
setting the build wrote is always measured too, so the report gives the best setting as a ratio
to it and the spec lines that make it permanent.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tritongen.bench.perf import PerfPoint, Sweep, run_perf_analyzer
from tritongen.configs.model_config import InstanceGroup, ModelConfig, to_json
from tritongen.configs.parser import read_config
from tritongen.errors import BenchError, RepositoryError
from tritongen.repository.contents import step_names
from tritongen.runtimes.registry import RUNTIMES, runtime_of_backend

__all__ = ["Setting", "TuneGrid", "TunePlan", "TunePoint", "apply", "best", "ratios", "thread_parameter", "tune"]


@dataclass(frozen=True)
class Setting:
    """One setting of the served steps.

    Tokenizer and model instances, the model's threads per instance (0: the runtime's default), and postprocess
    instances (0: the build has no postprocess step, folded into the graph).
    """

    tokenizer: int
    model: int
    threads: int
    postprocess: int = 1

    @property
    def label(self) -> str:
        """The setting in words, for progress and the report."""
        post = {0: " · postprocess folded", 1: ""}.get(self.postprocess, f" · postprocess {self.postprocess}")
        return f"tokenizer {self.tokenizer} · model {self.model} · threads {self.threads or 'default'}{post}"

    @property
    def slug(self) -> str:
        """The setting as a file-name-safe tag (perf_analyzer's CSV and log names)."""
        post = f"_p{self.postprocess}" if self.postprocess != 1 else ""
        return f"tune_t{self.tokenizer}_m{self.model}_th{self.threads}{post}"

    def spec_lines(self, backend: str) -> list[str]:
        """The build spec's YAML that makes this setting the built one."""
        runtime = runtime_of_backend(backend)
        threads = runtime.thread_lines(self.threads) if runtime is not None else []
        post = ["postprocess_instances:", f"  count: {self.postprocess}"] if self.postprocess else []
        return [
            "tokenizer_instances:", f"  count: {self.tokenizer}",
            "model_instances:", f"  count: {self.model}",
            *threads,
            *post,
        ]  # fmt: skip


@dataclass(frozen=True)
class TuneGrid:
    """The values to try; an empty axis keeps the built value."""

    tokenizer: tuple[int, ...] = ()
    model: tuple[int, ...] = ()
    threads: tuple[int, ...] = ()
    postprocess: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tokenizer or self.model or self.threads or self.postprocess)

    def validate(self) -> None:
        """BenchError for counts no server can take."""
        if any(n < 1 for n in (*self.tokenizer, *self.model, *self.postprocess)):
            raise BenchError(
                "instance counts must be at least 1; fix --tokenizer-instances/--model-instances/"
                "--postprocess-instances"
            )
        if any(n < 0 for n in self.threads):
            raise BenchError("thread counts must be 0 (the runtime's default) or more; fix --threads")

    def settings(self, built: Setting) -> list[Setting]:
        """The built setting first, then every combination of the grid (without repeating it)."""
        if self.postprocess and not built.postprocess:
            raise BenchError("this build folded its postprocess step into the graph; leave out --postprocess-instances")
        combos = itertools.product(
            self.tokenizer or (built.tokenizer,), self.model or (built.model,), self.threads or (built.threads,),
            self.postprocess or (built.postprocess,),
        )  # fmt: skip
        return [built, *(s for s in (Setting(*c) for c in combos) if s != built)]


@dataclass(frozen=True)
class TunePoint:
    """One setting measured at one concurrency."""

    setting: Setting
    point: PerfPoint


def thread_parameter(model_config: ModelConfig) -> str:
    """The parameter that sets the model step's threads per instance; BenchError for other backends."""
    backend = model_config.backend or model_config.platform
    runtime = runtime_of_backend(backend)
    if runtime is None or runtime.thread_parameter is None:
        tunable = [r.backend for r in RUNTIMES.values() if r.owns_backend and r.thread_parameter]
        raise BenchError(
            f"the model step runs on `{backend}`; thread tuning applies to {' and '.join(tunable)} model steps "
            "(leave out --threads)"
        )
    return runtime.thread_parameter


def _with_count(config: ModelConfig, count: int) -> ModelConfig:
    group = replace(config.instance_group or InstanceGroup(), count=count)
    return replace(config, instance_group=group)


def _with_threads(config: ModelConfig, parameter: str, threads: int) -> ModelConfig:
    parameters = {key: value for key, value in config.parameters.items() if key != parameter}
    return replace(config, parameters={**parameters, parameter: str(threads)} if threads else parameters)


class TunePlan:
    """The settings to measure for ``name``, from its served configs; BenchError up front if they cannot be."""

    def __init__(self, repository: Path, name: str, grid: TuneGrid) -> None:
        grid.validate()
        self.name = name
        names = step_names(name)
        steps = ("tokenizer", "model", "postprocess")
        self.models = {step: names[step] for step in steps if (repository / names[step]).is_dir()}
        try:
            self.configs = {step: read_config(repository / m / "config.pbtxt") for step, m in self.models.items()}
        except RepositoryError as exc:
            raise BenchError(str(exc)) from None
        if "tokenizer" not in self.configs or "model" not in self.configs:
            raise BenchError(f"no ensemble `{name}` in {repository}; build it first")
        model = self.configs["model"]
        self.backend = model.backend or model.platform
        runtime = runtime_of_backend(self.backend)
        self.parameter = thread_parameter(model) if grid.threads else (runtime and runtime.thread_parameter) or ""
        try:
            threads = (model.int_parameter(self.parameter) if self.parameter else None) or 0
        except ValueError as exc:
            raise BenchError(f"{repository / self.models['model'] / 'config.pbtxt'}: {exc}") from None
        post = self.configs["postprocess"].instances if "postprocess" in self.configs else 0
        self.built = Setting(self.configs["tokenizer"].instances, model.instances, threads, post)
        self.settings = grid.settings(self.built)

    def changes(self, setting: Setting, current: Setting) -> dict[str, ModelConfig]:
        """The step configs to load to go from ``current`` to ``setting``."""
        out = {}
        if setting.tokenizer != current.tokenizer:
            out["tokenizer"] = _with_count(self.configs["tokenizer"], setting.tokenizer)
        if setting.postprocess != current.postprocess:
            out["postprocess"] = _with_count(self.configs["postprocess"], setting.postprocess)
        if (setting.model, setting.threads) != (current.model, current.threads):
            config = _with_count(self.configs["model"], setting.model)
            out["model"] = _with_threads(config, self.parameter, setting.threads) if self.parameter else config
        return out


def tune(
    client: Any,
    plan: TunePlan,
    *,
    url: str,
    sweep: Sweep,
    input_data: Path,
    workdir: Path,
    progress: Callable[[str], None] = print,
) -> list[TunePoint]:
    """Measure every setting of ``plan`` on the running server, the built one first.

    ``client`` is a tritonclient HTTP client (or :class:`tritongen.serve.admin.AdminClient`) of that server,
    which must run in explicit model-control mode. The server is left at the last setting.
    """
    points: list[TunePoint] = []
    current = plan.built
    for index, setting in enumerate(plan.settings, 1):
        progress(f"  setting {index}/{len(plan.settings)}: {setting.label}…")
        current = apply(client, plan, setting, current)
        for concurrency in sweep.concurrency:
            point = run_perf_analyzer(setting.slug, plan.name, url, input_data, concurrency, sweep, workdir)
            points.append(TunePoint(setting, replace(point, config=setting.slug)))
    return points


def apply(client: Any, plan: TunePlan, setting: Setting, current: Setting) -> Setting:
    """Load the step configs that take the running server from ``current`` to ``setting``; return ``setting``."""
    for step, config in plan.changes(setting, current).items():
        try:
            client.load_model(plan.models[step], config=to_json(config))
        except Exception as exc:  # tritonclient raises InferenceServerException with the server's reason
            raise BenchError(f"the server refused {setting.label} for the {step} step: {exc}") from None
    return setting


def ratios(points: Sequence[TunePoint], setting: Setting) -> dict[int, float]:
    """``setting``'s throughput over the built setting's (the first measured), at each concurrency."""
    built = points[0].setting if points else setting
    ours = {p.point.concurrency: p.point.throughput for p in points if p.setting == setting}
    base = {p.point.concurrency: p.point.throughput for p in points if p.setting == built}
    return {c: ours[c] / base[c] for c in sorted(ours) if base.get(c)}


def best(points: Sequence[TunePoint], concurrency: int) -> tuple[TunePoint, TunePoint] | None:
    """The fastest setting at ``concurrency`` and the built setting's point there (the first measured)."""
    at = [p for p in points if p.point.concurrency == concurrency]
    if not at:
        return None
    return max(at, key=lambda p: p.point.throughput), at[0]
