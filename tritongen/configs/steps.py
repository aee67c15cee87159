"""The four typed step configs of an ensemble, built from the build spec and what inspection found.

:func:`step_configs` returns one :class:`~tritongen.configs.model_config.ModelConfig` per step (tokenizer, model,
postprocess, ensemble). The model step's shared sections (batching, versions, warm-up) are built here and
its runtime (``tritongen.runtimes``) completes it; the Python steps and the ensemble are the same for every runtime.
:func:`tritongen.configs.render.render_all` turns them into validated ``config.pbtxt`` text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritongen import buildspec as specs
from tritongen.buildspec import BuildSpec
from tritongen.configs.model_config import (
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    Kind,
    ModelConfig,
    QueuePolicy,
    Tensor,
    TimeoutAction,
    VersionPolicy,
    Warmup,
)
from tritongen.repository.layout import step_names
from tritongen.runtimes import get_runtime
from tritongen.tasks import TaskPlan

__all__ = ["ModelStep", "bucket_lengths", "step_configs"]


def bucket_lengths(buckets: Iterable[int], max_length: int) -> list[int]:
    """The lengths rows are padded to: the spec's buckets below ``max_length``, then ``max_length`` itself."""
    return sorted({b for b in buckets if b < max_length} | {max_length})


@dataclass(frozen=True)
class ModelStep:
    """What every runtime's model step is built from: names, tensors, row lengths and the spec."""

    spec: BuildSpec
    name: str
    ensemble_name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    buckets: tuple[int, ...]
    max_length: int

    def common(self) -> dict[str, Any]:
        """The sections every runtime sets the same way."""
        spec = self.spec
        return {
            "name": self.name,
            "comment": _comment(self.name, "model", self.ensemble_name),
            "max_batch_size": spec.max_batch_size,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "version_policy": _version_policy(spec.version_policy),
            "dynamic_batching": _batching(
                dataclasses.replace(spec.dynamic_batching, max_queue_delay_microseconds=spec.queue_delay_us),
                default_queue=QUEUE_BATCHES * spec.max_batch_size,
            ),
            "warmup": self.warmup(),
        }

    def instances(self) -> InstanceGroup:
        """The model step's ``instance_group``."""
        return _instances(self.spec.model_instances)

    def warmup(self) -> tuple[Warmup, ...]:
        """One zero sample per bucket, so the first real request of each length finds a warm model.

        Inputs of fixed shape (images) get one sample.
        """
        if not self.spec.warmup:
            return ()
        if not any(-1 in t.dims for t in self.inputs):
            return (Warmup("fixed_shape", self.inputs),)

        def at(length: int) -> tuple[Tensor, ...]:
            return tuple(
                Tensor(t.name, t.data_type, tuple(length if d == -1 else d for d in t.dims)) for t in self.inputs
            )

        return tuple(Warmup(f"bucket_{length}", at(length)) for length in self.buckets)


@dataclass(frozen=True)
class _Wiring:
    """The tensors each step reads and writes, from the bound task; computed once for the four configs."""

    names: dict[str, str]
    text_in: tuple[Tensor, ...]  # what clients send
    tokenizer_in: tuple[Tensor, ...]
    tokenizer_out: tuple[Tensor, ...]
    tokens: tuple[Tensor, ...]  # the model's inputs, of the tokenizer's outputs
    model_out: tuple[Tensor, ...]
    post_in: tuple[Tensor, ...]
    post_out: tuple[Tensor, ...]
    ensemble_out: tuple[Tensor, ...]

    @classmethod
    def of(cls, name: str, plan: TaskPlan) -> _Wiring:
        tokenizer_out, text_in = _tensors(plan.tokenizer_outputs), _tensors(plan.ensemble_inputs)
        return cls(
            names=step_names(name),
            text_in=text_in,
            # Ensemble inputs only the postprocess step reads (an embedding's DIMENSIONS) bypass the tokenizer.
            tokenizer_in=_tensors(plan.tokenizer_inputs) if plan.tokenizer_inputs else text_in,
            tokenizer_out=tokenizer_out,
            tokens=tuple(t for t in tokenizer_out if t.name in plan.inputs),
            model_out=_tensors([plan.onnx_output]),
            post_in=_tensors(plan.postprocess_inputs),
            post_out=_tensors(plan.postprocess_outputs),
            ensemble_out=_tensors(plan.ensemble_outputs),
        )


def step_configs(
    spec: BuildSpec,
    plan: TaskPlan,
    *,
    pad_id: int = 0,
    tokenizer_facts: Mapping[str, str] | None = None,
    folded: bool = False,
) -> dict[str, ModelConfig]:
    """The typed configs of the four steps, keyed by step (tokenizer, model, postprocess, ensemble).

    ``plan`` is the task bound to the checkpoint (:meth:`Task.bind`); ``tokenizer_facts`` are the tokenizer's
    (``padding_side``). ``folded``: the served graph computes the postprocess step's outputs itself
    (``tritongen.model.fold``); the model step then gives them beside its own output, and there is no
    postprocess step.
    """
    wiring = _Wiring.of(spec.name, plan)
    buckets = tuple(bucket_lengths(spec.buckets, plan.row_length))
    names = wiring.names
    model_out = wiring.model_out + wiring.post_out if folded else wiring.model_out
    model_step = ModelStep(spec, names["model"], names["ensemble"], wiring.tokens, model_out, buckets, plan.row_length)
    parameters = {
        **plan.modality.step_parameters(plan, buckets, pad_id),
        **_padding(tokenizer_facts),
        **plan.tokenizer_parameters,
    }
    batching = _python_batching(spec, plan)
    configs = {
        "tokenizer": _python_step(
            spec, names, "tokenizer", (wiring.tokenizer_in, wiring.tokenizer_out), parameters, batching
        ),
        "model": get_runtime(spec.runtime).model_config(model_step),
    }
    if not folded:
        configs["postprocess"] = _python_step(
            spec, names, "postprocess", (wiring.post_in, wiring.post_out), plan.postprocess_parameters, batching
        )
    configs["ensemble"] = _ensemble(spec, wiring, batching["max_batch_size"], folded=folded)
    if plan.ensemble_parameters:
        configs["ensemble"] = dataclasses.replace(configs["ensemble"], parameters=_strings(plan.ensemble_parameters))
    return configs


def _python_batching(spec: BuildSpec, plan: TaskPlan) -> dict[str, Any]:
    """The batching both Python steps share (and the ensemble's ``max_batch_size``).

    The Python steps are cheap: they batch whatever is queued, never wait for more and shed nothing (the queue
    limit is the model step's, where requests wait). A task whose requests become a different number of model
    rows (QA windows) runs them per request instead.
    """
    if not plan.batched_io:
        return {"max_batch_size": 0, "dynamic_batching": None}
    no_wait = dataclasses.replace(
        spec.dynamic_batching, max_queue_delay_microseconds=0, preferred_batch_size=(), queue_policy=None
    )
    return {"max_batch_size": spec.max_batch_size, "dynamic_batching": _batching(no_wait)}


def _python_step(
    spec: BuildSpec,
    names: Mapping[str, str],
    step: str,
    tensors: tuple[tuple[Tensor, ...], tuple[Tensor, ...]],
    parameters: Mapping[str, object],
    batching: Mapping[str, Any],
) -> ModelConfig:
    """The tokenizer or postprocess step: a Python-backend model with its ``tensors`` (inputs, outputs)."""
    groups = {"tokenizer": spec.tokenizer_instances, "postprocess": spec.postprocess_instances}
    return ModelConfig(
        **batching,
        name=names[step],
        comment=_comment(names[step], step, names["ensemble"]),
        backend="python",
        inputs=tensors[0],
        outputs=tensors[1],
        instance_group=_instances(groups[step]),
        parameters=_strings(parameters),
    )


def _ensemble(spec: BuildSpec, wiring: _Wiring, max_batch_size: int, *, folded: bool) -> ModelConfig:
    """The endpoint clients call: the steps in order, each mapped to its neighbours' tensors."""
    names = wiring.names
    steps = (
        (_step(names["tokenizer"], wiring.tokenizer_in, wiring.tokenizer_out),
         _step(names["model"], wiring.tokens, wiring.post_out))
        if folded
        else (_step(names["tokenizer"], wiring.tokenizer_in, wiring.tokenizer_out),
              _step(names["model"], wiring.tokens, wiring.model_out),
              _step(names["postprocess"], wiring.post_in, wiring.post_out))
    )  # fmt: skip
    return ModelConfig(
        name=names["ensemble"],
        comment=f"{names['ensemble']}: the endpoint clients call (generated; edit the build spec instead).",
        platform="ensemble",
        max_batch_size=max_batch_size,
        inputs=wiring.text_in,
        outputs=wiring.ensemble_out,
        response_cache=spec.response_cache,
        steps=steps,
    )


def _padding(tokenizer_facts: Mapping[str, str] | None) -> dict[str, str]:
    """``padding_side`` for tokenizers that pad on the left (right, the default, is left unsaid)."""
    side = (tokenizer_facts or {}).get("padding_side", "right")
    return {"padding_side": side} if side != "right" else {}


def _comment(name: str, step: str, ensemble: str) -> str:
    return f"{name}: {step} step of the `{ensemble}` ensemble (generated; edit the build spec instead)."


def _tensors(tensors: Iterable) -> tuple[Tensor, ...]:
    """Task tensors (``tasks.TensorSpec``) as config tensors."""
    return tuple(Tensor(t.name, t.data_type, tuple(t.dims), getattr(t, "optional", False)) for t in tensors)


def _strings(values: Mapping[str, object]) -> dict[str, str]:
    return {key: str(value) for key, value in values.items()}


def _step(model: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> EnsembleStep:
    """A step whose tensors keep their names in the ensemble."""
    return EnsembleStep(model, {t.name: t.name for t in inputs}, {t.name: t.name for t in outputs})


def _instances(group: InstanceGroup) -> InstanceGroup:
    """The spec's group as the config writes it (a kind read from YAML is a string)."""
    return dataclasses.replace(group, kind=Kind(group.kind), gpus=tuple(group.gpus))


# A backstop, not a throttle: by default the model step's queue holds at most this many full batches, so a
# burst beyond it is shed (UNAVAILABLE/503) instead of queueing without bound, while ordinary bursts never
# reach it. A tight limit cost throughput on a 2-core CPU (docs/benchmarks.md, "Under load"); set one per deployment.
QUEUE_BATCHES = 8


def _batching(batching: specs.DynamicBatchingSettings, *, default_queue: int = 0) -> DynamicBatching | None:
    """Triton's section; ``default_queue`` bounds the queue when the spec names no policy (0: unbounded)."""
    if not batching.enabled:
        return None
    policy = batching.queue_policy
    if policy is None and default_queue:
        policy = QueuePolicy(max_queue_size=default_queue)
    if policy is not None:  # a timeout action read from YAML is a string
        policy = dataclasses.replace(policy, timeout_action=TimeoutAction(policy.timeout_action))
    return DynamicBatching(
        max_queue_delay_microseconds=batching.max_queue_delay_microseconds or 0,
        preferred_batch_size=tuple(batching.preferred_batch_size),
        preserve_ordering=batching.preserve_ordering,
        queue_policy=None
        if policy is None
        else dataclasses.replace(policy, timeout_action=TimeoutAction(policy.timeout_action)),
    )


def _version_policy(policy: specs.VersionPolicySettings) -> VersionPolicy:
    if policy.policy == "all":
        return VersionPolicy(all=True)
    if policy.policy == "specific":
        return VersionPolicy(specific=tuple(policy.versions))
    return VersionPolicy(latest=policy.latest)
