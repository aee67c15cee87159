"""The ensemble composed: the four typed step configs, from the build spec and what inspection found.

:func:`step_configs` returns one :class:`~tritongen.configs.model_config.ModelConfig` per step (tokenizer, model,
postprocess, ensemble). The model step's shared sections (:class:`~tritongen.runtimes.base.ModelStep`) are
completed by its runtime; the Python steps and the ensemble are the same for every runtime.
:func:`tritongen.configs.render.render_all` turns them into validated ``config.pbtxt`` text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritongen.buildspec import BuildSpec, bucket_lengths, instance_group
from tritongen.configs.model_config import EnsembleStep, ModelConfig, Tensor, generated_comment
from tritongen.repository.contents import step_names
from tritongen.runtimes import ModelStep, get_runtime
from tritongen.tasks import TaskPlan

__all__ = ["step_configs"]


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
        **plan.modality.step_parameters(plan, buckets, pad_id, spec.padding, tokenizer_facts or {}),
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
    return {"max_batch_size": spec.max_batch_size, "dynamic_batching": no_wait.to_config()}


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
        comment=generated_comment(names[step], step, names["ensemble"]),
        backend="python",
        inputs=tensors[0],
        outputs=tensors[1],
        instance_group=instance_group(groups[step]),
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


def _tensors(tensors: Iterable) -> tuple[Tensor, ...]:
    """Task tensors (``tasks.TensorSpec``) as config tensors."""
    return tuple(Tensor(t.name, t.data_type, tuple(t.dims), getattr(t, "optional", False)) for t in tensors)


def _strings(values: Mapping[str, object]) -> dict[str, str]:
    return {key: str(value) for key, value in values.items()}


def _step(model: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> EnsembleStep:
    """A step whose tensors keep their names in the ensemble."""
    return EnsembleStep(model, {t.name: t.name for t in inputs}, {t.name: t.name for t in outputs})
