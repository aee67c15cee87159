"""What a build reads: the task bound to a checkpoint (:class:`TaskPlan`) and the build's plan (:class:`BuildPlan`).

Plain data, below every task, runtime and stage that reads it: :meth:`Task.bind` makes the task's plan, the
build's inspection the build's plan, and a task's input side (:class:`Modality`) and a runtime's build stages
take them as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritongen.buildspec import BuildSpec, bucket_lengths
from tritongen.buildspec.sections import TaskSettings
from tritongen.contract import carried_by_text_requests
from tritongen.gates.accuracy import Gate
from tritongen.repository.contents import step_names
from tritongen.tasks._tensors import TensorSpec

if TYPE_CHECKING:
    from tritongen.gates.parity import ParityReport
    from tritongen.model.checkpoint import Checkpoint
    from tritongen.model.facts import ModelFacts
    from tritongen.model.fold import GraphTail

__all__ = ["BuildPlan", "Modality", "TaskPlan"]


@dataclass(frozen=True)
class TaskPlan:
    """A task bound to one checkpoint, spec and tokenizer: everything the build needs, computed once."""

    task: str
    settings: TaskSettings
    row_length: int  # tokens per model row
    inputs: tuple[str, ...]  # the ONNX model's inputs
    ensemble_inputs: tuple[TensorSpec, ...]
    tokenizer_outputs: tuple[TensorSpec, ...]  # the model inputs, then what the postprocess step or client reads
    onnx_output: TensorSpec
    postprocess_inputs: tuple[TensorSpec, ...]
    postprocess_outputs: tuple[TensorSpec, ...]
    ensemble_outputs: tuple[TensorSpec, ...]
    tokenizer_parameters: Mapping[str, str]  # task parameters; the build adds the tokenizer file, length, buckets
    postprocess_parameters: Mapping[str, str]
    card_lines: tuple[str, ...]
    batched_io: bool
    truncates: bool
    pair_input: bool
    gate: Gate  # how the accuracy gate (and the parity check's argmax) compares outputs
    step_modules: Mapping[str, str]  # step ("tokenizer", "postprocess") -> module served as its model.py
    helper_modules: Mapping[str, tuple[str, ...]]  # step -> modules copied into its _tritongen_step package
    modality: Modality = field(compare=False)  # what the first step reads (text, images)
    postprocess_files: tuple[str, ...] = field(default=())  # files of the build the postprocess step reads
    # The ensemble inputs the tokenizer step reads (empty: all of them); others go straight to the postprocess.
    tokenizer_inputs: tuple[TensorSpec, ...] = field(default=())
    # What the ensemble's config says of it to its readers (the gateway's /info: ``pooling``).
    ensemble_parameters: Mapping[str, str] = field(default_factory=dict)
    # The second segments parity and the gate pair texts with (``Task.parity_pairs``); None: no pairs.
    parity_pairs: Callable[[Sequence[str]], list[str]] | None = field(default=None, compare=False)
    # The postprocess step as ONNX operators (``Task.graph_tail``); None: it cannot be folded into the graph.
    graph_tail: GraphTail | None = field(default=None, compare=False)

    @property
    def request_inputs(self) -> list[TensorSpec]:
        """The ensemble inputs every request of texts carries: the texts, without the optional options."""
        return [t for t in self.ensemble_inputs if carried_by_text_requests(t.name, t.optional)]


class Modality:
    """The input side of a task: hooks the build calls with its plan (a :class:`BuildPlan`)."""

    name = "text"
    records_canary = True  # whether the build records ``canary.json`` for roll-outs
    counts_tokens = True  # whether the first step gives each text's ``TOKEN_COUNT`` (the gateway's usage)
    # Helper modules the steps of this input kind import, copied beside them (``tokenizers`` comes with text's).
    helper_modules: tuple[str, ...] = ()

    def check_spec(self, spec: BuildSpec, *, serves_onnx: bool) -> None:
        """Refuse settings this input kind cannot serve (SpecError); ``serves_onnx``: the runtime serves the export."""

    def load(self, checkpoint: Checkpoint) -> Any:
        """The checkpoint's own preprocessor: the parity reference."""
        raise NotImplementedError

    def facts(self, module: Any, preprocessor: Any, cap: int | None = None) -> ModelFacts:
        """What the model says about its inputs; ``cap``: the most tokens a row will hold, if declared."""
        raise NotImplementedError

    def step_facts(self, preprocessor: Any) -> tuple[dict[str, str], int]:
        """Facts the task binds (``tokenizer_facts``) and the padding id."""
        return {}, 0

    def max_length(self, preprocessor: Any) -> int | None:
        """The preprocessor's own length limit (None: none)."""
        return None

    def tensors(self, checkpoint: Checkpoint, names: Sequence[str]) -> list[TensorSpec]:
        """The model inputs as tensors (dims without batch)."""
        raise NotImplementedError

    def step_parameters(
        self, plan: TaskPlan, buckets: Sequence[int], pad_id: int, padding: str, facts: Mapping[str, str]
    ) -> dict[str, str]:
        """The first step's base parameters; the task's own come after them.

        ``padding`` is the spec's, ``facts`` the preprocessor's (:meth:`step_facts`).
        """
        return {}

    def encoder(self, plan: BuildPlan, step_dir: Path) -> Any:
        """The served preprocessing code, set up as the first step will be; files it reads go into ``step_dir``."""
        raise NotImplementedError

    def samples(self) -> Sequence[Any]:
        """The parity inputs (also the container check's)."""
        raise NotImplementedError

    def export_sample(self, encoder: Any) -> dict[str, Any]:
        """Model inputs to trace the export with (a batch of 2)."""
        raise NotImplementedError

    def dynamic_axes(self, plan: BuildPlan) -> Mapping[str, Mapping[int, str]]:
        """Each model input's dynamic axes beyond the batch (``{name: {axis: name}}``)."""
        return {}

    def parity(self, plan: BuildPlan, encoder: Any, onnx_path: Path) -> ParityReport:
        """The served path against the checkpoint's preprocessor and PyTorch."""
        raise NotImplementedError

    def feeds(self, plan: BuildPlan, encoder: Any) -> list[dict[str, Any]]:
        """One model feed per parity sample (the container check)."""
        return [encoder([sample]) for sample in self.samples()]

    def card_lines(self, plan: BuildPlan) -> list[str]:
        """The model card's lines about the inputs."""
        return []


@dataclass(frozen=True)
class BuildPlan:
    """What a build will make, decided once by ``tritongen.builder.pipeline.inspect`` and read by every later stage.

    The checkpoint, the task bound to it, the loaded tokenizer and PyTorch module, what the model itself
    says (inputs, length limit), the row length and the length buckets derived from them. Nothing here
    changes after inspection; what later stages produce is passed along beside the plan.
    """

    spec: BuildSpec
    checkpoint: Checkpoint
    bound: TaskPlan  # the task bound to this checkpoint and spec (:meth:`Task.bind`)
    facts: ModelFacts
    pad_id: int
    tokenizer_facts: Mapping[str, str]
    hf_tokenizer: Any = field(repr=False, compare=False)
    module: Any = field(repr=False, compare=False)

    @property
    def max_length(self) -> int:
        """Tokens per model row."""
        return self.bound.row_length

    @property
    def names(self) -> dict[str, str]:
        """The ensemble's model names (and folders), by step."""
        return step_names(self.spec.name)

    @property
    def inputs(self) -> list[str]:
        """The model's token inputs, in its forward signature's order."""
        return list(self.facts.inputs)

    @property
    def buckets(self) -> list[int]:
        """The padded row lengths: the spec's buckets below :attr:`max_length`, then :attr:`max_length`."""
        return bucket_lengths(self.spec.buckets, self.max_length)

    def pairs(self, texts: Sequence[str]) -> list[str] | None:
        """Second segments for pair tasks (``Task.parity_pairs``): by default each text with the next one."""
        if self.bound.parity_pairs is None:
            return None
        return self.bound.parity_pairs(texts)
