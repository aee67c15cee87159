"""The base of every task entry, its settings section, and the plan a task binds to.

A task is one folder of ``tritongen/tasks``: an entry class registered with ``@register_task``, its
settings (one nested section of the build spec), and its tokenizer and postprocess step modules. At build
time :meth:`Task.bind` turns the entry, the checkpoint, the spec and the tokenizer's facts into one frozen
:class:`TaskPlan`; the build, the gate and the model card read the plan.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tritongen import contract
from tritongen.buildspec.sections import TaskSettings
from tritongen.contract import OFFSETS, SPECIAL_MASK, TEXT, TOKEN_TYPE_IDS, WORD_IDS
from tritongen.errors import CapabilityError, CheckpointError, UnsupportedModelError
from tritongen.gates.accuracy import Gate, LabelGate
from tritongen.parameters import LabelsParameters, PostprocessParameters, PromptParameters
from tritongen.tasks._inputs import TextInputs
from tritongen.tasks._plan import Modality, TaskPlan
from tritongen.tasks._tensors import (
    PASSED_THROUGH,
    TOKEN_COUNT_OUTPUT,
    TOKEN_IDS_INPUT,
    TRUNCATE_LEFT_INPUT,
    TRUNCATED_OUTPUT,
    TensorSpec,
    public,
)

if TYPE_CHECKING:
    import torch

    from tritongen.buildspec import BuildSpec
    from tritongen.model.checkpoint import Checkpoint, Pooling
    from tritongen.model.fold import GraphTail

__all__ = [
    "NO_TOKENIZER_LIMIT", "TOKEN_COUNT_OUTPUT", "TRUNCATED_OUTPUT", "Binding", "Task", "TensorSpec",
    "reference_postprocess",
]  # fmt: skip

_TOKENIZER_STEP = "tritongen.steps.tokenizer"  # the plain text tokenizer: TEXT [, TEXT_PAIR] -> rows
_POSTPROCESS_BASE = "tritongen.steps.postprocess"  # the postprocess steps' bases, which every one imports
_COMMON = "tritongen.steps._common"


@dataclass(frozen=True)
class Binding:
    """What a task's binding hooks read: the spec, the task's settings, the checkpoint, the row and the tokenizer.

    Made once by :meth:`Task.bind`; a hook takes it whole instead of the same five arguments on every call.
    """

    spec: BuildSpec
    settings: TaskSettings
    checkpoint: Checkpoint
    row_length: int  # tokens per model row
    facts: Mapping[str, str]  # the tokenizer's facts (``cls_id``, ``unk_token``, ``padding_side``...)


class TaskDetection:
    """How detection finds the task's checkpoints (the registry's order is ``tasks._registry``'s)."""

    # The architecture suffix of the checkpoints this task needs (``*ForTokenClassification``); None: any.
    head: ClassVar[str | None] = None

    def matches(self, checkpoint: Checkpoint) -> bool:
        """Whether ``checkpoint`` looks like a model for this task (detection)."""
        return self.has_head(checkpoint)

    def has_head(self, checkpoint: Checkpoint) -> bool:
        """Whether ``checkpoint`` has the head this task needs (asking for the task by name)."""
        return self.head is None or any(a.endswith(self.head) for a in checkpoint.architectures)


class TaskSection:
    """The task's section of the build spec, and the entry that builds with it."""

    # The spec section the task reads (``question_answering``) and its settings class; None: no settings.
    section: ClassVar[str | None] = None
    Settings: ClassVar[type[TaskSettings]] = TaskSettings

    def settings(self, spec: BuildSpec) -> TaskSettings:
        """The task's section of ``spec`` (its defaults when the spec has none)."""
        if self.section is None:
            return self.Settings()
        return spec.section(self.Settings)

    def for_settings(self, settings: TaskSettings) -> Task:
        """The entry that builds with ``settings``: this one, or a variant of it (embeddings of long texts in windows).

        :meth:`bind` binds the variant, so its class attributes and hooks shape the plan.
        """
        return self


class TaskSteps:
    """The Python steps the task serves, what they copy beside them, and how requests batch."""

    # The step modules served as each step's ``model.py``.
    tokenizer_step: ClassVar[str] = _TOKENIZER_STEP
    postprocess_step: ClassVar[str]
    # Modules the task's steps import (``tritongen.tasks.question_answering.qa``), copied into the helper package
    # beside their ``model.py`` under their last name (``from _tritongen_step import qa``; ``steps/helpers.py``);
    # ``_common``, ``contract`` and the steps' bases always are.
    helper_modules: ClassVar[tuple[str, ...]] = ()
    # Files the postprocess step reads besides ``labels.json`` (which every build writes).
    postprocess_files: ClassVar[tuple[str, ...]] = ()
    # False when one request becomes a different number of model rows (QA windows): the tokenizer,
    # postprocess and ensemble then take whole requests (max_batch_size 0); the model step still batches.
    batched_io: ClassVar[bool] = True


class TaskInputs:
    """What the ensemble and its first step take."""

    # What the model reads and the first step serves (``tritongen.tasks._inputs``): text by default.
    modality: ClassVar[Modality] = TextInputs()
    # Whether the model reads two segments (so parity and the accuracy gate feed text pairs).
    pair_input: ClassVar[bool] = False
    # Whether the ensemble takes the model's token ids (``TOKEN_IDS``) in place of ``TEXT``, where the plain
    # tokenizer step serves the task (the embedders, as Text Embeddings Inference's embedding routes take ids).
    takes_token_ids: ClassVar[bool] = False

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """The ensemble's (and tokenizer step's) inputs: one text by default, and the plain tokenizer's options."""
        return self.text_inputs(public(TEXT))

    def text_inputs(self, *texts: TensorSpec) -> list[TensorSpec]:
        """``texts``, and where the plain tokenizer step serves the task its optional per-row inputs.

        ``TRUNCATE_LEFT``; and where the task takes token ids, ``TOKEN_IDS``, the first text then optional (a row is
        one or the other). A task whose first step is its own (windows, prompts, images) takes ``texts`` alone.
        """
        if self.tokenizer_step != _TOKENIZER_STEP:
            return list(texts)
        if self.takes_token_ids:
            first = dataclasses.replace(texts[0], optional=True)
            return [first, *texts[1:], TOKEN_IDS_INPUT, TRUNCATE_LEFT_INPUT]
        return [*texts, TRUNCATE_LEFT_INPUT]

    def tokenizer_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """The ensemble inputs the tokenizer step reads: all of them by default."""
        return self.ensemble_inputs(checkpoint)


class TaskOutputs:
    """What the model, the steps and the ensemble give."""

    onnx_output: ClassVar[str]
    # Whether a text longer than the model loses its tail (classification and embeddings, as the transformers
    # pipeline and sentence-transformers do): the ensemble then says so per text in ``TRUNCATED``. The ensemble
    # has ``TRUNCATED`` and ``TOKEN_COUNT`` wherever the tokenizer step emits them (chunked embeddings: TRUNCATED
    # always false).
    truncates: ClassVar[bool] = True

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        """Dims (without batch) of the ONNX model's output."""
        raise NotImplementedError

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """Tensors the tokenizer step emits besides the model inputs (for the postprocess step or the client).

        By default ``TRUNCATED`` where the task truncates, and ``TOKEN_COUNT`` where its input is text.
        """
        counted = [TOKEN_COUNT_OUTPUT] if self.modality.counts_tokens else []
        return ([TRUNCATED_OUTPUT] if self.truncates else []) + counted

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """Ensemble tensors the postprocess step reads: the model output by default."""
        return [TensorSpec(self.onnx_output, "TYPE_FP32", self.onnx_output_dims(checkpoint))]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """The postprocess step's outputs (the ensemble's, but ``TRUNCATED`` and ``TOKEN_COUNT``)."""
        raise NotImplementedError


class TaskBinding:
    """The hooks :meth:`Task.bind` asks once: the row length, the steps' parameters, the card's lines."""

    def row_length(
        self,
        spec: BuildSpec,
        settings: TaskSettings,
        checkpoint: Checkpoint,
        position_limit: int,
        tokenizer_max: int | None,
    ) -> int:
        """Tokens per model row: the truncation length (:meth:`max_length`), or the spec's shorter ``max_length``."""
        limit = self.max_length(checkpoint, position_limit, tokenizer_max)
        if spec.max_length is None:
            return limit
        if spec.max_length > limit:
            raise UnsupportedModelError(f"max_length {spec.max_length} is above the model's limit of {limit} tokens")
        return spec.max_length

    def max_length(self, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None) -> int:
        """The number of tokens inputs are truncated to.

        ``position_limit`` is the longest input the model runs (``tritongen.model.facts``); a tokenizer
        that declares a shorter ``model_max_length`` lowers it, as the transformers pipeline truncates there
        (transformers writes 1e30 when none was declared: no limit).
        """
        limits = [int(position_limit)]
        if tokenizer_max and tokenizer_max < NO_TOKENIZER_LIMIT:
            limits.append(int(tokenizer_max))
        return min(limits)

    def step_parameters(self, bound: Binding) -> tuple[dict[str, str], dict[str, str]]:
        """The task's settings as (tokenizer, postprocess) parameters."""
        return {}, {}

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        """Parameters the postprocess model reads at initialise time (from the checkpoint)."""
        return {}

    def ensemble_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        """What the ensemble's config tells its readers of the model (the gateway's ``/info``); none by default."""
        return {}

    def card_lines(self, bound: Binding) -> list[str]:
        """Task-specific lines of the model card."""
        return []


class TaskModel:
    """The model the build exports and how the gates compare it."""

    # The accuracy gate's measure (``tritongen.gates.accuracy``): LabelGate (argmax per text), CosineGate,
    # TokenLabelGate (argmax per token) or SpanGate (the argmax start and end token per text).
    gate: ClassVar[type[Gate]] = LabelGate
    # Whether ``tritongen bench`` can compare it with its baselines (one TEXT in, a pipeline to compare with).
    bench_baselines: ClassVar[bool] = False

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        """The module to export: ``forward(<the model inputs>)`` -> one tensor; ``module.model`` is the model.

        Text tasks take ``(input_ids, attention_mask, token_type_ids=None)`` (:func:`exportable`), image tasks
        ``(pixel_values)`` (``tritongen.tasks._images.pixel_module``); the build feeds what ``forward`` takes.
        """
        raise NotImplementedError

    def gate_function(self, checkpoint: Checkpoint) -> str:
        """The activation the ``labels`` gate compares outputs under."""
        return "softmax"

    def graph_tail(self, checkpoint: Checkpoint) -> GraphTail | None:
        """The postprocess step as ONNX operators appended to the model (``tritongen.model.fold``); None: not foldable.

        Its outputs must be exactly the postprocess step's outputs, so the ensemble can drop that step.
        """
        return None

    def parity_pairs(self, settings: Any, texts: Sequence[str]) -> list[str]:
        """The second segments that parity and the accuracy gate pair ``texts`` with (for ``pair_input`` tasks).

        By default each text with the next one: varied lengths and scripts on both sides.
        """
        return [texts[(i + 1) % len(texts)] for i in range(len(texts))]


class Task(TaskDetection, TaskSection, TaskSteps, TaskInputs, TaskOutputs, TaskBinding, TaskModel):
    """A task entry: its name, and :meth:`bind`, which binds it to a checkpoint and a spec once.

    The rest is its parts, each a small base that a task overrides where it differs: :class:`TaskDetection`,
    :class:`TaskSection`, :class:`TaskSteps`, :class:`TaskInputs`, :class:`TaskOutputs`, :class:`TaskBinding`
    and :class:`TaskModel`.
    """

    name: ClassVar[str]

    def bind(
        self,
        spec: BuildSpec,
        checkpoint: Checkpoint,
        *,
        inputs: tuple[str, ...] | list[str],
        row_length: int | None = None,
        position_limit: int | None = None,
        tokenizer_max: int | None = None,
        tokenizer_facts: Mapping[str, str] | None = None,
    ) -> TaskPlan:
        """Bind this task to ``checkpoint`` and ``spec``: the plan the build, the gate and the card read.

        ``row_length`` is the tokens per model row; when None it comes from ``position_limit`` (the longest
        input the model runs) and ``tokenizer_max`` (the tokenizer's ``model_max_length``) and the spec.
        ``tokenizer_facts`` holds the tokenizer's ``cls_id``, ``unk_token`` (strings, "" for none) and
        ``special_tokens`` (the count added to one text). Bad task settings raise here, before any export.
        """
        settings = self.settings(spec)
        entry = self.for_settings(settings)
        if entry is not self:
            return entry.bind(
                spec, checkpoint, inputs=inputs, row_length=row_length, position_limit=position_limit,
                tokenizer_max=tokenizer_max, tokenizer_facts=tokenizer_facts,
            )  # fmt: skip
        facts = dict(tokenizer_facts or {})
        if row_length is None:
            if position_limit is None:
                raise ValueError("bind needs row_length or position_limit")
            row_length = self.row_length(spec, settings, checkpoint, position_limit, tokenizer_max)
        names = tuple(inputs)
        binding = Binding(spec, settings, checkpoint, row_length, facts)
        tokenizer_settings, post_settings = self.step_parameters(binding)
        token_tensors = self.modality.tensors(checkpoint, names)
        extra = [t for t in self.tokenizer_outputs(checkpoint) if t.name not in names]
        post_out = self.postprocess_outputs(checkpoint)
        helpers = (
            _COMMON, "tritongen.contract", "tritongen.parameters", "tritongen.vectors",
            *self.modality.helper_modules, *self.helper_modules,
        )  # fmt: skip
        return TaskPlan(
            task=self.name,
            settings=settings,
            row_length=row_length,
            inputs=names,
            ensemble_inputs=tuple(self.ensemble_inputs(checkpoint)),
            tokenizer_outputs=tuple(token_tensors + extra),
            onnx_output=TensorSpec(self.onnx_output, "TYPE_FP32", self.onnx_output_dims(checkpoint)),
            postprocess_inputs=tuple(self.postprocess_inputs(checkpoint)),
            postprocess_outputs=tuple(post_out),
            ensemble_outputs=tuple(post_out + [t for t in PASSED_THROUGH if t in token_tensors + extra]),
            tokenizer_parameters=tokenizer_settings,
            postprocess_parameters={
                **PostprocessParameters(self.name).to_parameters(),
                **self.postprocess_parameters(checkpoint),
                **post_settings,
            },
            card_lines=tuple(self.card_lines(binding)),
            batched_io=self.batched_io,
            truncates=self.truncates,
            pair_input=self.pair_input,
            gate=self.gate(self.gate_function(checkpoint)),
            step_modules={"tokenizer": self.tokenizer_step, "postprocess": self.postprocess_step},
            helper_modules={
                "tokenizer": (*helpers, _TOKENIZER_STEP) if self.tokenizer_step != _TOKENIZER_STEP else helpers,
                "postprocess": (*helpers, _POSTPROCESS_BASE),
            },
            postprocess_files=self.postprocess_files,
            tokenizer_inputs=tuple(self.tokenizer_inputs(checkpoint)),
            modality=self.modality,
            ensemble_parameters=self.ensemble_parameters(checkpoint),
            parity_pairs=functools.partial(self.parity_pairs, settings) if self.pair_input else None,
            graph_tail=self.graph_tail(checkpoint),
        )


NO_TOKENIZER_LIMIT = 1_000_000  # tokenizers that declare no limit report int(1e30)


def exportable(model: Any, head: Callable[[Any, torch.Tensor], torch.Tensor]) -> torch.nn.Module:
    """Wrap ``model`` as ``forward(input_ids, attention_mask, token_type_ids=None)`` -> ``head(outputs, mask)``."""
    import torch

    class Exportable(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
        ) -> torch.Tensor:
            extra = {} if token_type_ids is None else {TOKEN_TYPE_IDS: token_type_ids}
            return head(self.model(input_ids=input_ids, attention_mask=attention_mask, **extra), attention_mask)

    return Exportable().eval()


def load_pretrained(auto_class: Any, checkpoint: Checkpoint, *, unused: tuple[str, ...] = ()) -> Any:
    """``auto_class.from_pretrained`` on the checkpoint, eager attention, in eval mode.

    Steps of the capability check: the task's head must be one of ``auto_class``'s (transformers' own
    classes, or the checkpoint's ``auto_map`` when its code is trusted), and the checkpoint must fill every
    weight of it; a weight left at random would still pass parity, so it is refused here. ``unused`` lists
    prefixes of weights the task never reads (a bare encoder's pooler), which may be missing.
    """
    _require_head(auto_class, checkpoint)
    trust = {"trust_remote_code": True} if checkpoint.trust_remote_code else {}
    try:
        model, info = auto_class.from_pretrained(
            str(checkpoint.path), attn_implementation="eager", output_loading_info=True, **trust
        )
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise CheckpointError(
            f"cannot load weights of {{path}}: {str(exc).splitlines()[0]}", path=checkpoint.path
        ) from None
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(unused))
    if missing:
        total = len(model.state_dict())
        raise CapabilityError(
            "weights",
            f"{{path}} lacks {len(missing)} of the {total} weights of {type(model).__name__} "
            f"(e.g. `{missing[0]}`); they would be random",
            path=checkpoint.path,
        )
    return model.eval()


def _require_head(auto_class: Any, checkpoint: Checkpoint) -> None:
    """Refuse a checkpoint whose model type has no ``auto_class`` head in transformers (or in its trusted code)."""
    from transformers import CONFIG_MAPPING

    if checkpoint.trust_remote_code and auto_class.__name__ in checkpoint.auto_map:
        return
    config_class = CONFIG_MAPPING[checkpoint.model_type] if checkpoint.model_type in CONFIG_MAPPING else None
    if config_class is not None and config_class in auto_class._model_mapping:
        return
    where = "neither transformers nor the checkpoint's auto_map has a" if checkpoint.auto_map else "transformers has no"
    raise CapabilityError("task head", f"{where} {auto_class.__name__} for model type `{checkpoint.model_type}`")


def labels_line(checkpoint: Checkpoint) -> str:
    """The model card's line listing the labels."""
    return f"- labels (id order): {list(checkpoint.id2label.values())}"


TOKEN_METADATA = [
    TensorSpec(SPECIAL_MASK, "TYPE_INT64", (-1,)),
    TensorSpec(WORD_IDS, "TYPE_INT64", (-1,)),
    TensorSpec(OFFSETS, "TYPE_INT64", (-1, 2)),
]
WINDOW_EXAMPLE = TensorSpec(contract.WINDOW_EXAMPLE, "TYPE_INT64", (1,))  # the request row each window belongs to


def max_windows(spec: BuildSpec) -> int:
    """One request's windows go to the model step as one batch: at most its max_batch_size."""
    return spec.max_batch_size or 1 << 30


def prompt_parameters(pooling: Pooling) -> dict[str, str]:
    """The tokenizer step's prompts: sentence-transformers' ``prompts`` and ``default_prompt_name``."""
    return PromptParameters(dict(pooling.prompts), pooling.default_prompt_name or "").to_parameters()


def reference_postprocess(bound: TaskPlan, labels: Sequence[str]) -> Any:
    """The task's own postprocess step (its ``model.py`` class), set up as the build configures it."""
    module = importlib.import_module(bound.step_modules["postprocess"])
    step = module.TritonPythonModel()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "1").mkdir()
        (Path(tmp) / "1" / LabelsParameters().labels_file).write_text(json.dumps(list(labels)), encoding="utf-8")
        step.setup(dict(bound.postprocess_parameters), {"model_repository": tmp, "model_version": "1"})
    return step
