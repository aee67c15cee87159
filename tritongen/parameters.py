"""The ``parameters`` each step's config carries, one typed declaration per step, shared by writer and reader.

A declaration is a frozen dataclass of :class:`StepParameters`: each field is one key of the config's
``parameters`` map, with its type and its default. The build writes a step's parameters with
:meth:`StepParameters.to_parameters`; the step (and the gateway, where it reads a built config) reads them back
with :meth:`StepParameters.from_parameters`. So a key and its default are spelled once, as a field here.

Values are strings in the config. A field's type says how it is written:

* ``str`` as it is, ``int`` in decimal, ``float`` by ``repr``, ``bool`` as ``true``/``false``;
* ``tuple[int, ...]`` and ``tuple[float, ...]`` comma-separated, ``list`` and ``dict`` as JSON;
* ``X | None``: None is left out of the config (protobuf's JSON drops empty strings anyway), and an absent or
  empty value reads as None.

A field without a default must be in the config; reading a config without it raises ``ValueError``.

The declarations of the built-in steps are below. A plug-in (a task or runtime of its own) declares its steps'
in its own folder; every subclass registers itself in :data:`DECLARED`, which the suite checks rendered
configs against. Nothing here imports beyond the standard library: the build copies this module beside every
Python step (``_tritongen_step.parameters``).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

__all__ = [
    "DECLARED", "ClassifierParameters", "EmbeddingParameters", "EnsembleParameters", "LabelsParameters",
    "MultiVectorParameters", "NerParameters", "PostprocessParameters", "PromptParameters", "QaAnswerParameters",
    "QaWindowParameters", "RerankPromptParameters", "SelectionParameters", "StepParameters", "StrideParameters",
    "TokenizerFileParameters", "TokenizerParameters", "WindowsParameters", "ZeroShotParameters",
    "ZeroShotWindowParameters", "written",
]  # fmt: skip

P = TypeVar("P", bound="StepParameters")

DECLARED: list[type[StepParameters]] = []  # every declaration, built-in or a plug-in's, in the order defined


def _optional(kind: Any) -> Any:
    """``X`` for ``X | None``; None for any other type."""
    args = typing.get_args(kind)
    if type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None))
    return None


def _encode(kind: Any, value: Any) -> str:
    origin = typing.get_origin(kind)
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return repr(float(value))
    if kind in (int, str):
        return str(value)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        return ",".join(repr(float(v)) if item is float else str(v) for v in value)
    if origin in (list, dict):
        return json.dumps(list(value) if origin is list else dict(value))
    raise TypeError(f"no way to write a step parameter of type {kind}")


def _decode(kind: Any, text: str) -> Any:
    origin = typing.get_origin(kind)
    if kind is bool:
        return text.strip().lower() == "true"
    if kind in (int, float, str):
        return kind(text)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        return tuple(item(v) for v in text.split(",") if v.strip())
    if origin is list:
        return list(json.loads(text or "[]"))
    if origin is dict:
        return dict(json.loads(text or "{}"))
    raise TypeError(f"no way to read a step parameter of type {kind}")


@dataclass(frozen=True)
class StepParameters:
    """The base of every declaration: written with :meth:`to_parameters`, read with :meth:`from_parameters`."""

    _types: ClassVar[dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        DECLARED.append(cls)

    @classmethod
    def _field_types(cls) -> dict[str, Any]:
        if "_types" not in cls.__dict__:
            hints = typing.get_type_hints(cls)  # builtin types only: a served model.py is in no sys.modules
            cls._types = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
        return cls._types

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The config keys this declaration holds."""
        return tuple(cls._field_types())

    def to_parameters(self) -> dict[str, str]:
        """The fields as config parameters; a None is left out."""
        written = {}
        for name, kind in self._field_types().items():
            value = getattr(self, name)
            if value is not None:
                written[name] = _encode(_optional(kind) or kind, value)
        return written

    @classmethod
    def from_parameters(cls: type[P], params: Mapping[str, str], model: str = "the step") -> P:
        """Read the declaration's keys from a config's flattened ``parameters``; other keys are someone else's.

        An absent key takes its default. ``ValueError``, naming ``model`` and the key, where a key without a
        default is absent or a value does not read as its type.
        """
        values: dict[str, Any] = {}
        defaults = {f.name for f in dataclasses.fields(cls) if _has_default(f)}
        for name, kind in cls._field_types().items():
            text = params.get(name)
            inner = _optional(kind)
            if text is None or (inner is not None and text == ""):  # absent: its default, or None where optional
                if name in defaults:
                    continue
                if inner is None:
                    raise ValueError(f"{model}'s config has no parameter `{name}`: rebuild the repository")
                values[name] = None
                continue
            try:
                values[name] = _decode(inner or kind, text)
            except (TypeError, ValueError) as error:
                raise ValueError(f"parameter `{name}` of {model} is `{text}`, not a {inner or kind}") from error
        return cls(**values)


def written(*declarations: StepParameters) -> dict[str, str]:
    """One config's parameters: those of each of ``declarations``, merged (no two declare one key)."""
    merged: dict[str, str] = {}
    for declaration in declarations:
        merged.update(declaration.to_parameters())
    return merged


def _has_default(spec: dataclasses.Field) -> bool:
    return spec.default is not dataclasses.MISSING or spec.default_factory is not dataclasses.MISSING


# --- The plain tokenizer step (tritongen.steps.tokenizer) and the task tokenizers built on it ---------------------


@dataclass(frozen=True)
class TokenizerFileParameters(StepParameters):
    """A step that loads the checkpoint's tokenizer: its ``tokenizer.json`` beside the step's version."""

    tokenizer_file: str = "tokenizer.json"


@dataclass(frozen=True)
class TokenizerParameters(StepParameters):
    """What the text tokenizer step reads besides its tokenizer file: the row length and how rows are padded."""

    max_length: int  # tokens per row, the truncation length
    buckets: tuple[int, ...] = ()  # the padded lengths
    padding: str | None = None  # "longest": pad each call to its longest row, not to a bucket
    pad_id: int = 0
    pad_type_id: int = 0
    padding_side: str | None = None  # "left" for tokenizers that pad on the left; None: right

    @property
    def pads_to_longest(self) -> bool:
        """Whether calls are padded to their longest row (else to a bucket)."""
        return self.padding == "longest"


@dataclass(frozen=True)
class PromptParameters(StepParameters):
    """An embedder's prompts: the text put before a row, by name, and the name used when a request names none."""

    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str = ""


@dataclass(frozen=True)
class WindowsParameters(StepParameters):
    """A tokenizer that may make several rows of one text (windows, or a row per candidate label)."""

    max_windows: int  # the most rows one request may make
    mode: str | None = None  # what the windows are for ("windows", "qa"), said for a reader of the config


@dataclass(frozen=True)
class StrideParameters(StepParameters):
    """A tokenizer that cuts long texts into overlapping windows (embedding chunks, token classification)."""

    stride: int  # the tokens two neighbouring windows share


@dataclass(frozen=True)
class QaWindowParameters(StepParameters):
    """The question-answering tokenizer: question and context cut into windows as transformers' pipeline does."""

    max_seq_len: int
    doc_stride: int
    cls_id: int | None = None  # the tokenizer's CLS id, where it has one


@dataclass(frozen=True)
class ZeroShotWindowParameters(StepParameters):
    """The zero-shot tokenizer: each text paired with a hypothesis per candidate label."""

    hypothesis_template: str


@dataclass(frozen=True)
class RerankPromptParameters(StepParameters):
    """A prompted reranker's tokenizer: the instruction and the token ids around each (query, document) pair."""

    instruction: str
    prefix_ids: tuple[int, ...] = ()
    suffix_ids: tuple[int, ...] = ()


# --- Postprocess steps ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostprocessParameters(StepParameters):
    """Every postprocess step's: the task it serves, for a reader of the config."""

    task: str


@dataclass(frozen=True)
class LabelsParameters(StepParameters):
    """A postprocess that names classes: the file of label names beside its version, in id order."""

    labels_file: str = "labels.json"


@dataclass(frozen=True)
class ClassifierParameters(StepParameters):
    """A classifier's activation: softmax, sigmoid or none."""

    function: str = "softmax"


@dataclass(frozen=True)
class SelectionParameters(StepParameters):
    """Which labels (multi-label) or terms (sparse) a row keeps: at least ``threshold``, at most ``top_k`` (0: all)."""

    threshold: float = 0.5
    top_k: int = 0


@dataclass(frozen=True)
class EmbeddingParameters(StepParameters):
    """An embedder's postprocess: whether rows are scaled to unit length."""

    normalize: bool = False


@dataclass(frozen=True)
class NerParameters(StepParameters):
    """Token classification's postprocess: how tokens are grouped into entities, and the unknown token."""

    aggregation_strategy: str = "simple"
    unk_token: str | None = None


@dataclass(frozen=True)
class QaAnswerParameters(StepParameters):
    """Question answering's postprocess: the longest answer in tokens, and whether "no answer" may win."""

    max_answer_len: int = 15
    handle_impossible_answer: bool = False


@dataclass(frozen=True)
class ZeroShotParameters(StepParameters):
    """Zero-shot's postprocess: the NLI head's entailment and contradiction classes, and multi-label scoring."""

    entailment_id: int
    contradiction_id: int
    multi_label: bool = False


@dataclass(frozen=True)
class MultiVectorParameters(StepParameters):
    """BGE-M3's postprocess: the heads' widths and the token ids its sparse head never weighs."""

    hidden_size: int
    colbert_dim: int
    unused_token_ids: list[int] = field(default_factory=list)


# --- The ensemble ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnsembleParameters(StepParameters):
    """What the ensemble's config tells a reader of the model (the gateway's ``/info``): an embedder's pooling."""

    pooling: str | None = None
