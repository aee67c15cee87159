"""The task registry: one small declarative entry per task we can deploy.

Each task names its ONNX output, the ensemble's outputs, the postprocess parameters, how
to build the exportable PyTorch module, and how to detect itself from a checkpoint.
Register a new task with :func:`register_task`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tritongen.errors import SpecError, UnsupportedModelError

if TYPE_CHECKING:
    import torch

    from tritongen.checkpoint import Checkpoint
    from tritongen.spec import BuildSpec

__all__ = ["TASKS", "TRUNCATED", "Task", "TensorSpec", "detect_task", "get_task", "ner_stride", "register_task"]


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a model's config: name, Triton data type and dims (without batch)."""

    name: str
    data_type: str
    dims: tuple[int, ...]


TRUNCATED = TensorSpec("TRUNCATED", "TYPE_BOOL", (1,))  # True where the text was cut at the model's length


class Task:
    """Base class of a task entry."""

    name: ClassVar[str]
    onnx_output: ClassVar[str]
    detect_order: ClassVar[int] = 50  # detection tries the more specific tasks (lower numbers) first
    # The architecture suffix of the checkpoints this task needs (``*ForTokenClassification``); None: any.
    head: ClassVar[str | None] = None
    # False when one request becomes a different number of model rows (QA windows): the tokenizer,
    # postprocess and ensemble then take whole requests (max_batch_size 0); the model step still batches.
    batched_io: ClassVar[bool] = True
    # Whether the model reads two segments (so parity and the accuracy gate feed text pairs).
    pair_input: ClassVar[bool] = False
    # The accuracy gate's measure: "labels" (argmax per text), "cosine", "token_labels" (argmax per
    # token), or "spans" (the argmax start and end token per text).
    gate: ClassVar[str] = "labels"
    # Whether a text longer than the model loses its tail (classification and embeddings, as the transformers
    # pipeline and sentence-transformers do): the ensemble then says so per text in ``TRUNCATED``.
    truncates: ClassVar[bool] = True
    # Modules of ``tritongen/triton_models`` the Python steps import, copied next to their ``model.py``.
    helper_modules: ClassVar[tuple[str, ...]] = ()

    def matches(self, checkpoint: Checkpoint) -> bool:
        """Whether ``checkpoint`` looks like a model for this task (detection)."""
        return self.has_head(checkpoint)

    def has_head(self, checkpoint: Checkpoint) -> bool:
        """Whether ``checkpoint`` has the head this task needs (asking for the task by name)."""
        return self.head is None or any(a.endswith(self.head) for a in checkpoint.architectures)

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        """Dims (without batch) of the ONNX model's output."""
        raise NotImplementedError

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """The ensemble's (and tokenizer step's) inputs: one text by default."""
        return [TensorSpec("TEXT", "TYPE_STRING", (1,))]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """The postprocess step's outputs (the ensemble's, but ``TRUNCATED``)."""
        raise NotImplementedError

    def ensemble_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """What clients get: the postprocess outputs, and ``TRUNCATED`` for tasks that truncate by design."""
        return self.postprocess_outputs(checkpoint) + ([TRUNCATED] if self.truncates else [])

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        """Parameters the postprocess model reads at initialise time."""
        raise NotImplementedError

    def row_length(
        self, spec: BuildSpec, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None
    ) -> int:
        """Tokens per model row: the truncation length (:meth:`max_length`), or the spec's shorter ``max_length``."""
        limit = self.max_length(checkpoint, position_limit, tokenizer_max)
        if spec.max_length is None:
            return limit
        if spec.max_length > limit:
            raise UnsupportedModelError(f"max_length {spec.max_length} is above the model's limit of {limit} tokens")
        return spec.max_length

    def step_parameters(
        self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int, facts: dict[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """The build spec's settings as (tokenizer, postprocess) parameters.

        ``facts`` holds the tokenizer's ``cls_id`` and ``unk_token`` (strings, "" for none).
        """
        return {}, {}

    def card_lines(self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int) -> list[str]:
        """Task-specific lines of the model card."""
        return []

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """Tensors the tokenizer step emits besides the model inputs (for the postprocess step or the client)."""
        return [TRUNCATED] if self.truncates else []

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        """Ensemble tensors the postprocess step reads: the model output by default."""
        return [TensorSpec(self.onnx_output, "TYPE_FP32", self.onnx_output_dims(checkpoint))]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        """The module to export: ``forward(input_ids, attention_mask, token_type_ids=None)`` -> one tensor."""
        raise NotImplementedError

    def max_length(self, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None) -> int:
        """The number of tokens inputs are truncated to.

        ``position_limit`` is the longest input the model runs (``tritongen.model_facts``); a tokenizer
        that declares a shorter ``model_max_length`` lowers it, as the transformers pipeline truncates there
        (transformers writes 1e30 when none was declared: no limit).
        """
        limits = [int(position_limit)]
        if tokenizer_max and tokenizer_max < _NO_TOKENIZER_LIMIT:
            limits.append(int(tokenizer_max))
        return min(limits)


TASKS: dict[str, Task] = {}
_NO_TOKENIZER_LIMIT = 1_000_000  # tokenizers that declare no limit report int(1e30)


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: add a task entry to :data:`TASKS`."""
    TASKS[cls.name] = cls()
    return cls


def get_task(name: str) -> Task:
    """Look a task up by name; unknown names list the supported ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise UnsupportedModelError(f"task `{name}` is not supported; supported: {', '.join(sorted(TASKS))}") from None


def detect_task(checkpoint: Checkpoint) -> Task:
    """Pick the task from the checkpoint's architectures and files."""
    for task in sorted(TASKS.values(), key=lambda t: t.detect_order):
        if task.matches(checkpoint):
            return task
    raise UnsupportedModelError(
        f"cannot tell the task of {{path}} (architectures {checkpoint.architectures}); "
        f"name one of: {', '.join(sorted(TASKS))}",
        path=checkpoint.path,
    )


def _exportable(model: Any, head: Callable[[Any, torch.Tensor], torch.Tensor]) -> torch.nn.Module:
    """Wrap ``model`` as ``forward(input_ids, attention_mask, token_type_ids=None)`` -> ``head(outputs, mask)``."""
    import torch

    class Exportable(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
        ) -> torch.Tensor:
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return head(self.model(input_ids=input_ids, attention_mask=attention_mask, **extra), attention_mask)

    return Exportable().eval()


def _load_pretrained(auto_class: Any, checkpoint: Checkpoint) -> Any:
    try:
        model = auto_class.from_pretrained(str(checkpoint.path), attn_implementation="eager")
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        from tritongen.errors import CheckpointError

        raise CheckpointError(
            f"cannot load weights of {{path}}: {str(exc).splitlines()[0]}", path=checkpoint.path
        ) from None
    return model.eval()


@register_task
class Classification(Task):
    """Sequence classification: one label per text (``*ForSequenceClassification``)."""

    name = "classification"
    onnx_output = "logits"
    head = "ForSequenceClassification"

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (len(checkpoint.id2label),)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        outputs = [
            TensorSpec("LABEL", "TYPE_STRING", (1,)),
            TensorSpec("SCORE", "TYPE_FP32", (1,)),
            TensorSpec("PROBABILITIES", "TYPE_FP32", (len(checkpoint.id2label),)),
        ]
        if _multi_label(checkpoint):
            outputs.append(TensorSpec("LABELS", "TYPE_STRING", (1,)))  # JSON list of the labels that apply
        return outputs

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        # The transformers pipeline's rule for picking the activation.
        function = "sigmoid" if _multi_label(checkpoint) or len(checkpoint.id2label) == 1 else "softmax"
        return {"task": "classification", "function": function, "labels_file": "labels.json"}

    def step_parameters(
        self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int, facts: dict[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        if not _multi_label(checkpoint):
            return {}, {}
        return {}, {"threshold": str(spec.multi_label_threshold), "top_k": str(spec.multi_label_top_k)}

    def card_lines(self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int) -> list[str]:
        return [_labels_line(checkpoint)]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForSequenceClassification

        model = _load_pretrained(AutoModelForSequenceClassification, checkpoint)

        def logits(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            return outputs.logits

        return _exportable(model, logits)


def _multi_label(checkpoint: Checkpoint) -> bool:
    return checkpoint.config.get("problem_type") == "multi_label_classification"


_PAIR_LABELS = {"entailment", "contradiction", "not_entailment"}


@register_task
class TextPairClassification(Classification):
    """Classification of a text pair (NLI, cross-encoder re-rankers): ``TEXT`` and ``TEXT_PAIR``."""

    name = "text-pair-classification"
    detect_order = 10
    pair_input = True

    def matches(self, checkpoint: Checkpoint) -> bool:
        labels = {label.lower() for label in checkpoint.id2label.values()}
        cross_encoder = "sbert_ce_default_activation_function" in checkpoint.config or (
            (checkpoint.config.get("sentence_transformers") or {}).get("model_type") == "CrossEncoder"
        )
        return super().matches(checkpoint) and (cross_encoder or bool(labels & _PAIR_LABELS))

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [TensorSpec("TEXT", "TYPE_STRING", (1,)), TensorSpec("TEXT_PAIR", "TYPE_STRING", (1,))]


@register_task
class Embedding(Task):
    """Sentence embeddings: a bare encoder, pooled as its sentence-transformers files say."""

    name = "embedding"
    onnx_output = "sentence_embedding"
    detect_order = 90  # a bare encoder is the fallback
    gate = "cosine"

    def matches(self, checkpoint: Checkpoint) -> bool:
        if checkpoint.pooling.from_sentence_transformers:
            return True
        heads = ("For", "LMHead")
        return not checkpoint.architectures or all(not any(h in a for h in heads) for a in checkpoint.architectures)

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (checkpoint.hidden_size,)

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [TensorSpec("EMBEDDING", "TYPE_FP32", (checkpoint.hidden_size,))]

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return {"task": self.name, "normalize": "true" if checkpoint.pooling.normalize else "false"}

    def card_lines(self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int) -> list[str]:
        return [f"- pooling: {checkpoint.pooling.mode}, normalised: {checkpoint.pooling.normalize}"]

    def max_length(self, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None) -> int:
        limit = super().max_length(checkpoint, position_limit, tokenizer_max)
        if checkpoint.pooling.max_seq_length:
            limit = min(limit, checkpoint.pooling.max_seq_length)
        return limit

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        import torch
        from transformers import AutoModel

        model = _load_pretrained(AutoModel, checkpoint)
        mode = checkpoint.pooling.mode

        def pool(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = outputs.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            if mode == "cls":
                return hidden[:, 0]
            if mode == "max":
                return torch.where(mask > 0, hidden, torch.full_like(hidden, -1e9)).max(dim=1).values
            return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)

        return _exportable(model, pool)


_TOKEN_METADATA = [
    TensorSpec("special_mask", "TYPE_INT64", (-1,)),
    TensorSpec("word_ids", "TYPE_INT64", (-1,)),
    TensorSpec("offsets", "TYPE_INT64", (-1, 2)),
]
_WINDOW_EXAMPLE = TensorSpec("window_example", "TYPE_INT64", (1,))  # the request row each window belongs to


def ner_stride(spec: BuildSpec, window: int) -> int:
    """Tokens neighbouring NER windows share: ``ner_stride``, else a quarter window (at most 128); 0 for ``none``.

    The pipeline refuses a stride with ``none`` (it could not merge repeated tokens), so ``none`` gets
    windows that do not overlap.
    """
    if spec.ner_stride is not None:
        return spec.ner_stride
    return 0 if spec.aggregation_strategy == "none" else min(window // 4, 128)


def _max_windows(spec: BuildSpec) -> dict[str, str]:
    """One request's windows go to the model step as one batch: at most its max_batch_size."""
    return {"max_windows": str(spec.max_batch_size or 1 << 30)}


@register_task
class TokenClassification(Task):
    """Token classification (NER): ``TEXT`` -> ``ENTITIES``, a JSON list as the transformers pipeline returns."""

    name = "token-classification"
    onnx_output = "logits"
    gate = "token_labels"
    helper_modules = ("ner",)
    head = "ForTokenClassification"
    # Long texts become the pipeline's overlapping windows (one request, several model rows): nothing is cut.
    batched_io = False
    truncates = False

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (-1, len(checkpoint.id2label))

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [*_TOKEN_METADATA, _WINDOW_EXAMPLE]

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            TensorSpec("TEXT", "TYPE_STRING", (1,)),
            *super().postprocess_inputs(checkpoint),
            TensorSpec("input_ids", "TYPE_INT64", (-1,)),
            *self.tokenizer_outputs(checkpoint),
        ]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [TensorSpec("ENTITIES", "TYPE_STRING", (1,))]  # JSON list of entities

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return {"task": self.name, "labels_file": "labels.json", "tokenizer_file": "tokenizer.json"}

    def step_parameters(
        self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int, facts: dict[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        stride = ner_stride(spec, row_length)
        room = row_length - int(facts.get("special_tokens", "0"))
        if stride >= room:
            raise SpecError(
                f"ner_stride {stride} must be below the {room} text tokens of a {row_length}-token window; lower it"
            )
        tokenizer = {"mode": "windows", "stride": str(stride), **_max_windows(spec)}
        return tokenizer, {"aggregation_strategy": spec.aggregation_strategy, "unk_token": facts.get("unk_token", "")}

    def card_lines(self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int) -> list[str]:
        return [
            _labels_line(checkpoint),
            f"- aggregation strategy: {spec.aggregation_strategy} (ignored labels: O)",
            f"- long texts: windows of {row_length} tokens sharing {ner_stride(spec, row_length)} tokens, "
            "entities merged as the transformers pipeline does with `stride` (nothing is truncated)",
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        from transformers import AutoModelForTokenClassification

        model = _load_pretrained(AutoModelForTokenClassification, checkpoint)
        return _exportable(model, lambda outputs, mask: outputs.logits)


@register_task
class QuestionAnswering(Task):
    """Extractive QA: ``QUESTION`` + ``CONTEXT`` -> ``ANSWER``, ``SCORE``, ``START``, ``END``.

    Long contexts become several windows, so one request is several model rows: the model's start
    and end logits are exported as one ``span_logits`` tensor [batch, seq, 2].
    """

    name = "question-answering"
    onnx_output = "span_logits"
    batched_io = False
    truncates = False  # long contexts become windows
    pair_input = True
    gate = "spans"
    helper_modules = ("qa",)
    head = "ForQuestionAnswering"

    def onnx_output_dims(self, checkpoint: Checkpoint) -> tuple[int, ...]:
        return (-1, 2)

    def ensemble_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [TensorSpec("QUESTION", "TYPE_STRING", (1,)), TensorSpec("CONTEXT", "TYPE_STRING", (1,))]

    def tokenizer_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            TensorSpec("attention_mask", "TYPE_INT64", (-1,)),  # even for models that do not take it
            _WINDOW_EXAMPLE,
            TensorSpec("sequence_ids", "TYPE_INT64", (-1,)),
            TensorSpec("p_mask", "TYPE_BOOL", (-1,)),
            *_TOKEN_METADATA[1:],  # word_ids, offsets
        ]

    def postprocess_inputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            TensorSpec("CONTEXT", "TYPE_STRING", (1,)),
            *super().postprocess_inputs(checkpoint),
            *self.tokenizer_outputs(checkpoint),
        ]

    def postprocess_outputs(self, checkpoint: Checkpoint) -> list[TensorSpec]:
        return [
            TensorSpec("ANSWER", "TYPE_STRING", (1,)),
            TensorSpec("SCORE", "TYPE_FP32", (1,)),
            TensorSpec("START", "TYPE_INT64", (1,)),
            TensorSpec("END", "TYPE_INT64", (1,)),
        ]

    def postprocess_parameters(self, checkpoint: Checkpoint) -> dict[str, str]:
        return {"task": self.name}

    def row_length(
        self, spec: BuildSpec, checkpoint: Checkpoint, position_limit: int, tokenizer_max: int | None
    ) -> int:
        """The window length: ``qa_max_seq_len``, else v4's min(model limit, 384)."""
        from tritongen.triton_models.qa import QAInputError, resolve_window_sizes

        limit = self.max_length(checkpoint, position_limit, tokenizer_max)
        if spec.qa_max_seq_len is not None and spec.qa_max_seq_len > limit:
            raise UnsupportedModelError(
                f"qa_max_seq_len {spec.qa_max_seq_len} is above the model's limit of {limit} tokens"
            )
        try:
            window, _ = resolve_window_sizes(spec.qa_max_seq_len, spec.qa_doc_stride, limit)
        except QAInputError as exc:
            raise UnsupportedModelError(f"QA windows: {exc}") from None
        return window

    def step_parameters(
        self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int, facts: dict[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        tokenizer = {
            "mode": "qa",
            "max_seq_len": str(row_length),
            "doc_stride": str(_doc_stride(spec, row_length)),
            "cls_id": facts.get("cls_id", ""),
            **_max_windows(spec),
        }
        postprocess = {
            "max_answer_len": str(spec.qa_max_answer_len),
            "handle_impossible_answer": "true" if spec.qa_handle_impossible_answer else "false",
        }
        return tokenizer, postprocess

    def card_lines(self, spec: BuildSpec, checkpoint: Checkpoint, row_length: int) -> list[str]:
        return [
            f"- windows: {row_length} tokens, stride {_doc_stride(spec, row_length)}; "
            f"longest answer {spec.qa_max_answer_len} tokens; no answer allowed: {spec.qa_handle_impossible_answer}"
        ]

    def load_module(self, checkpoint: Checkpoint) -> torch.nn.Module:
        import torch
        from transformers import AutoModelForQuestionAnswering

        model = _load_pretrained(AutoModelForQuestionAnswering, checkpoint)

        def spans(outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
            return torch.stack([outputs.start_logits, outputs.end_logits], dim=-1)

        return _exportable(model, spans)


def _doc_stride(spec: BuildSpec, window: int) -> int:
    from tritongen.triton_models.qa import resolve_window_sizes

    return resolve_window_sizes(window, spec.qa_doc_stride)[1]


def _labels_line(checkpoint: Checkpoint) -> str:
    return f"- labels (id order): {list(checkpoint.id2label.values())}"
