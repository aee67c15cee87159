"""The four typed step configs of an ensemble, built from the build spec and what inspection found.

:func:`step_configs` returns one :class:`~tritongen.configs.model_config.ModelConfig` per step (tokenizer, model,
postprocess, ensemble). The model step has one builder per runtime (ONNX Runtime, TensorRT plan), chosen
from :data:`MODEL_STEPS`; the Python steps and the ensemble are the same for every runtime.
:func:`tritongen.configs.render.render_all` turns them into validated ``config.pbtxt`` text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritongen import spec as specs
from tritongen.configs.model_config import (
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    Kind,
    ModelConfig,
    OnnxRuntimeOptimization,
    QueuePolicy,
    Tensor,
    TensorRTAccelerator,
    TimeoutAction,
    VersionPolicy,
    Warmup,
)
from tritongen.model.checkpoint import Checkpoint
from tritongen.repository.layout import step_names
from tritongen.runtimes.openvino import IR_FILE
from tritongen.runtimes.tensorrt import cc_model_filenames
from tritongen.spec import BuildSpec
from tritongen.tasks import Task, TaskPlan

__all__ = ["MODEL_STEPS", "ModelStep", "bucket_lengths", "step_configs"]


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


def _onnxruntime_step(step: ModelStep) -> ModelConfig:
    """The ONNX Runtime backend: session threads in ``parameters``, graph level and optional TensorRT EP."""
    ort = step.spec.onnxruntime
    threads = (("intra_op_thread_count", ort.intra_op_threads), ("inter_op_thread_count", ort.inter_op_threads))
    parameters = {key: str(value) for key, value in threads if value}
    parameters["session.intra_op.allow_spinning"] = "1" if ort.allow_spinning else "0"
    return ModelConfig(
        **step.common(),
        backend="onnxruntime",
        default_model_filename="model.onnx",
        instance_group=_instances(step.spec.model_instances),
        optimization=OnnxRuntimeOptimization(ort.graph_optimization_level, _ort_tensorrt(step)),
        parameters=parameters,
    )


def _ort_tensorrt(step: ModelStep) -> TensorRTAccelerator | None:
    trt = step.spec.tensorrt
    if not trt.enabled:
        return None
    parameters = {
        "precision_mode": trt.precision_mode,
        "max_workspace_size_bytes": str(trt.max_workspace_size_bytes),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": trt.engine_cache_path,
    }
    if trt.profile_shapes:
        batch = step.spec.max_batch_size
        shapes = {
            "min": (1, 1),
            "opt": (max(1, batch // 2), step.buckets[len(step.buckets) // 2]),
            "max": (max(1, batch), step.max_length),
        }
        for key, (rows, length) in shapes.items():
            parameters[f"trt_profile_{key}_shapes"] = ",".join(f"{t.name}:{rows}x{length}" for t in step.inputs)
    return TensorRTAccelerator(parameters)


def _tensorrt_plan_step(step: ModelStep) -> ModelConfig:
    """A TensorRT plan: one engine per GPU architecture, one optimisation profile per bucket."""
    profiles = tuple(str(i) for i in range(len(step.buckets)))
    return ModelConfig(
        **step.common(),
        platform="tensorrt_plan",
        default_model_filename="model.plan",
        cc_model_filenames=cc_model_filenames(),
        instance_group=dataclasses.replace(_instances(step.spec.model_instances), profiles=profiles),
    )


def _openvino_step(step: ModelStep) -> ModelConfig:
    """Triton's native openvino backend on the IR (``model.xml``); the local backend reads the same parameters."""
    settings = step.spec.openvino
    parameters = {
        "PERFORMANCE_HINT": settings.performance_hint,
        "NUM_STREAMS": str(settings.num_streams) if settings.num_streams else "AUTO",
    }
    if settings.inference_threads:
        parameters["INFERENCE_NUM_THREADS"] = str(settings.inference_threads)
    return ModelConfig(
        **step.common(),
        backend="openvino",
        default_model_filename=IR_FILE,
        instance_group=_instances(step.spec.model_instances),
        parameters=parameters,
    )


ModelStepBuilder = Callable[[ModelStep], ModelConfig]
MODEL_STEPS: Mapping[str, ModelStepBuilder] = {
    "onnx": _onnxruntime_step,
    "tensorrt": _tensorrt_plan_step,
    "openvino": _openvino_step,
}
"""The model step's config builder per ``BuildSpec.runtime``."""


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
        "model": MODEL_STEPS[spec.runtime](model_step),
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
# reach it. A tight limit cost throughput on a 2-core CPU (README "Under load"); set one per deployment.
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
