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

from tritongen import spec as specs
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
from tritongen.model.checkpoint import Checkpoint
from tritongen.repository.layout import step_names
from tritongen.runtimes import get_runtime
from tritongen.spec import BuildSpec
from tritongen.tasks import Task, TaskPlan

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


def step_configs(
    spec: BuildSpec,
    checkpoint: Checkpoint,
    task: Task,
    inputs: Sequence[str],
    max_length: int,
    pad_id: int = 0,
    tokenizer_facts: Mapping[str, str] | None = None,
    *,
    plan: TaskPlan | None = None,
    folded: bool = False,
) -> dict[str, ModelConfig]:
    """The typed configs of the four steps, keyed by step (tokenizer, model, postprocess, ensemble).

    ``plan`` is ``task`` bound to the checkpoint (:meth:`Task.bind`); without one it is bound here from
    ``inputs``, ``max_length`` and ``tokenizer_facts`` (``cls_id``, ``unk_token``, ``special_tokens``).
    ``folded``: the served graph computes the postprocess step's outputs itself (``tritongen.model.fold``); the
    model step then gives them beside its own output, and there is no postprocess step.
    """
    if plan is None:
        plan = task.bind(spec, checkpoint, inputs=inputs, row_length=max_length, tokenizer_facts=tokenizer_facts)
    names = step_names(spec.name)
    buckets = tuple(bucket_lengths(spec.buckets, max_length))
    tokenizer_out = _tensors(plan.tokenizer_outputs)
    token_tensors = tuple(t for t in tokenizer_out if t.name in plan.inputs)
    onnx_out = _tensors([plan.onnx_output])
    text_in = _tensors(plan.ensemble_inputs)
    post_in = _tensors(plan.postprocess_inputs)
    # Ensemble inputs only the postprocess step reads (an embedding's DIMENSIONS) bypass the tokenizer.
    tokenizer_in = _tensors(plan.tokenizer_inputs) if plan.tokenizer_inputs else text_in
    post_out = _tensors(plan.postprocess_outputs)
    python_steps = {
        "max_batch_size": spec.max_batch_size if plan.batched_io else 0,
        # The Python steps are cheap: they batch whatever is queued, never wait for more and shed nothing (the
        # queue limit is the model step's, where requests wait). A task whose requests become a different number
        # of model rows (QA windows) runs them per request instead.
        "dynamic_batching": _batching(
            dataclasses.replace(
                spec.dynamic_batching, max_queue_delay_microseconds=0, preferred_batch_size=(), queue_policy=None
            )
        )
        if plan.batched_io
        else None,
    }
    model_out = onnx_out + post_out if folded else onnx_out
    model_step = ModelStep(spec, names["model"], names["ensemble"], token_tensors, model_out, buckets, max_length)
    configs = {
        "tokenizer": ModelConfig(
            **python_steps,
            name=names["tokenizer"],
            comment=_comment(names["tokenizer"], "tokenizer", names["ensemble"]),
            backend="python",
            inputs=tokenizer_in,
            outputs=tokenizer_out,
            instance_group=_instances(spec.tokenizer_instances),
            parameters=_strings(
                {
                    **plan.modality.step_parameters(plan, buckets, pad_id),
                    **_padding(tokenizer_facts),
                    **plan.tokenizer_parameters,
                }
            ),
        ),
        "model": get_runtime(spec.runtime).model_config(model_step),
        "postprocess": ModelConfig(
            **python_steps,
            name=names["postprocess"],
            comment=_comment(names["postprocess"], "postprocess", names["ensemble"]),
            backend="python",
            inputs=post_in,
            outputs=post_out,
            instance_group=_instances(spec.postprocess_instances),
            parameters=_strings(plan.postprocess_parameters),
        ),
        "ensemble": ModelConfig(
            name=names["ensemble"],
            comment=f"{names['ensemble']}: the endpoint clients call (generated; edit the build spec instead).",
            platform="ensemble",
            max_batch_size=python_steps["max_batch_size"],
            inputs=text_in,
            outputs=_tensors(plan.ensemble_outputs),
            response_cache=spec.response_cache,
            steps=(
                _step(names["tokenizer"], tokenizer_in, tokenizer_out),
                _step(names["model"], token_tensors, post_out),
            )
            if folded
            else (
                _step(names["tokenizer"], tokenizer_in, tokenizer_out),
                _step(names["model"], token_tensors, onnx_out),
                _step(names["postprocess"], post_in, post_out),
            ),
        ),
    }
    if folded:
        del configs["postprocess"]
    return configs


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


def _instances(group: specs.InstanceGroup) -> InstanceGroup:
    return InstanceGroup(count=group.count, kind=Kind(group.kind), gpus=tuple(group.gpus))


# A backstop, not a throttle: by default the model step's queue holds at most this many full batches, so a
# burst beyond it is shed (UNAVAILABLE/503) instead of queueing without bound, while ordinary bursts never
# reach it. A tight limit cost throughput on a 2-core CPU (docs/benchmarks.md, "Under load"); set one per deployment.
QUEUE_BATCHES = 8


def _batching(batching: specs.DynamicBatching, *, default_queue: int = 0) -> DynamicBatching | None:
    """Triton's section; ``default_queue`` bounds the queue when the spec names no policy (0: unbounded)."""
    if not batching.enabled:
        return None
    policy = batching.queue_policy
    if policy is None and default_queue:
        policy = specs.QueuePolicy(max_queue_size=default_queue)
    return DynamicBatching(
        max_queue_delay_microseconds=batching.max_queue_delay_microseconds or 0,
        preferred_batch_size=tuple(batching.preferred_batch_size),
        preserve_ordering=batching.preserve_ordering,
        queue_policy=None
        if policy is None
        else QueuePolicy(
            max_queue_size=policy.max_queue_size,
            timeout_action=TimeoutAction(policy.timeout_action),
            default_timeout_microseconds=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
        ),
    )


def _version_policy(policy: specs.VersionPolicy) -> VersionPolicy:
    if policy.policy == "all":
        return VersionPolicy(all=True)
    if policy.policy == "specific":
        return VersionPolicy(specific=tuple(policy.versions))
    return VersionPolicy(latest=policy.latest)
