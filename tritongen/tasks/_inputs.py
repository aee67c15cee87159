"""What a task's model reads, and how the build serves, checks and describes it: text or images.

A task entry names its modality (``Task.modality``); the build asks it, never the task's name, for the
reference preprocessor (the checkpoint's transformers tokenizer or image processor), the model's input facts,
the served preprocessing code (the first step's encoder), the export sample, the parity check and the
model card's input lines. :class:`TextInputs` is every text task's; ``tritongen.tasks._images`` has the
image one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritongen.contract import ATTENTION_MASK, INPUT_IDS
from tritongen.errors import CheckpointError, UnsupportedModelError
from tritongen.parameters import TokenizerFileParameters, TokenizerParameters, written
from tritongen.tasks._plan import BuildPlan, Modality, TaskPlan
from tritongen.tasks._tensors import TensorSpec

if TYPE_CHECKING:
    from tritongen.gates.parity import ParityReport
    from tritongen.model.checkpoint import Checkpoint
    from tritongen.model.facts import ModelFacts

__all__ = ["TextInputs"]


class TextInputs(Modality):
    """Text: the transformers tokenizer, ``tokenizer.json`` served by the tokenizer step, bucket padding."""

    helper_modules = ("tritongen.encoding",)  # TextEncoder: the tokenizer steps' encoding and packing

    def load(self, checkpoint: Checkpoint) -> Any:
        from transformers import AutoTokenizer

        try:
            trust = {"trust_remote_code": True} if checkpoint.trust_remote_code else {}
            tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path), **trust)
        except Exception as exc:  # tokenizer loading raises many types for bad files
            raise CheckpointError(
                f"cannot load the tokenizer of {{path}}: {str(exc).splitlines()[0]}", path=checkpoint.path
            ) from None
        if getattr(tokenizer, "backend_tokenizer", None) is None:
            raise UnsupportedModelError("checkpoint {path} has no fast (Rust) tokenizer", path=checkpoint.path)
        return tokenizer

    def facts(self, module: Any, preprocessor: Any, cap: int | None = None) -> ModelFacts:
        from tritongen.model.facts import read_model_facts

        return read_model_facts(module, _probe_token(preprocessor), cap=cap)

    def step_facts(self, preprocessor: Any) -> tuple[dict[str, str], int]:
        facts = {
            "cls_id": "" if preprocessor.cls_token_id is None else str(preprocessor.cls_token_id),
            "unk_token": preprocessor.unk_token or "",
            "special_tokens": str(preprocessor.backend_tokenizer.num_special_tokens_to_add(False)),
            "padding_side": _padding_side(preprocessor),
        }
        return facts, preprocessor.pad_token_id if preprocessor.pad_token_id is not None else 0

    def max_length(self, preprocessor: Any) -> int | None:
        return getattr(preprocessor, "model_max_length", 0)

    def tensors(self, checkpoint: Checkpoint, names: Sequence[str]) -> list[TensorSpec]:
        return [TensorSpec(n, "TYPE_INT64", (-1,)) for n in names]

    def step_parameters(
        self, plan: TaskPlan, buckets: Sequence[int], pad_id: int, padding: str, facts: Mapping[str, str]
    ) -> dict[str, str]:
        """The tokenizer step's: a model that reads no mask pads every row to its length, whatever ``padding``."""
        side = facts.get("padding_side", "right")
        longest = padding == "longest" and ATTENTION_MASK in plan.inputs
        tokenizer = TokenizerParameters(
            max_length=plan.row_length,
            buckets=tuple(_buckets(plan.inputs, buckets, plan.row_length)),
            padding="longest" if longest else None,
            pad_id=pad_id,
            padding_side=None if side == "right" else side,
        )
        return written(TokenizerFileParameters(), tokenizer)

    def encoder(self, plan: BuildPlan, step_dir: Path) -> Any:
        from tritongen.encoding import TextEncoder

        tokenizer_file = step_dir / "tokenizer.json"
        plan.hf_tokenizer.backend_tokenizer.save(str(tokenizer_file))
        longest = plan.spec.padding == "longest" and ATTENTION_MASK in plan.inputs
        buckets = None if longest else _buckets(plan.inputs, plan.buckets, plan.max_length)
        return TextEncoder(
            str(tokenizer_file), plan.max_length, buckets, pad_id=plan.pad_id, input_names=plan.inputs,
            padding_side=plan.tokenizer_facts["padding_side"],
        )  # fmt: skip

    def samples(self) -> Sequence[Any]:
        from tritongen.gates.parity import PARITY_TEXTS

        return PARITY_TEXTS

    def export_sample(self, encoder: Any) -> dict[str, Any]:
        return encoder(["a short sample", "a longer sample text, used to trace the model"])

    def dynamic_axes(self, plan: BuildPlan) -> Mapping[str, Mapping[int, str]]:
        return {name: {1: "sequence"} for name in plan.inputs}

    def parity(self, plan: BuildPlan, encoder: Any, onnx_path: Path) -> ParityReport:
        from tritongen.gates.parity import PARITY_TEXTS, ReferenceModel, check_parity

        return check_parity(
            ReferenceModel(plan.module, plan.hf_tokenizer, encoder, plan.max_length), onnx_path,
            tolerance=plan.spec.parity_tolerance, pairs=plan.pairs(PARITY_TEXTS),
            argmax_axis=plan.bound.gate.parity_argmax_axis, pad_to_max=ATTENTION_MASK not in plan.inputs,
        )  # fmt: skip

    def feeds(self, plan: BuildPlan, encoder: Any) -> list[dict[str, Any]]:
        texts = list(self.samples())
        pairs = plan.pairs(texts)
        return [encoder([t], None if pairs is None else [pairs[i]]) for i, t in enumerate(texts)]

    def card_lines(self, plan: BuildPlan) -> list[str]:
        facts, bound = plan.facts, plan.bound
        return [
            f"- model limit: {facts.position_limit} tokens ({facts.limit_source})",
            (
                f"- truncation: texts longer than {plan.max_length} tokens are cut there, as the transformers "
                "pipeline and sentence-transformers do; the `TRUNCATED` output says which"
                if bound.truncates
                else f"- windows of {plan.max_length} tokens: nothing is truncated"
            ),
            f"- length buckets: {plan.spec.buckets}",
        ]


def _buckets(inputs: Sequence[str], buckets: Sequence[int], max_length: int) -> list[int]:
    """The padded lengths; one, the maximum, for a model that reads no attention mask.

    Without a mask padding is part of the input: SigLIP's text tower pads every text to its maximum length, as
    its processor does.
    """
    return list(buckets) if ATTENTION_MASK in inputs else [max_length]


def _padding_side(hf_tokenizer: Any) -> str:
    """The side the checkpoint's tokenizer pads on (``tokenizer_config.json``'s ``padding_side``)."""
    side = getattr(hf_tokenizer, "padding_side", "right")
    if side not in ("left", "right"):
        raise CheckpointError(f"the tokenizer declares padding_side `{side}`; expected left or right")
    return str(side)


def _probe_token(hf_tokenizer: Any) -> int:
    """An ordinary (non-special, non-padding) token id to probe the model's length with."""
    ids = hf_tokenizer("a", add_special_tokens=False)[INPUT_IDS]
    return int(ids[0]) if ids else int(hf_tokenizer.unk_token_id or 0)
