"""The ensemble's public tensors: the names and Triton types of what clients send and read, one vocabulary.

Every task declares its ensemble's inputs and outputs with these names (``tritongen.tasks._tensors.public``);
the Python steps, which have this module copied beside them, read and write them by these names; the gateway's
routes declare which of them they need (``tritongen.gateway.models.ROUTE_NEEDS``); the client, the bench and
docs/tasks.md's table of tensors use them. Nothing here imports anything, so that it runs in any container.

The step-internal tensors (``input_ids``, ``window_example``...) are each task's own and are not named here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ANSWER", "CANDIDATE_LABELS", "COLBERT", "COLBERT_LENGTH", "CONTEXT", "DIMENSIONS", "EMBEDDING", "END",
    "ENTITIES", "IMAGE", "LABEL", "LABELS", "PROBABILITIES", "PROMPT_NAME", "PUBLIC", "QUESTION", "SCORE", "SCORES",
    "SPARSE_INDICES", "SPARSE_VALUES", "START", "TEXT", "TEXT_PAIR", "TOKEN_COUNT", "TRUNCATED", "Public",
]  # fmt: skip

# Inputs.
TEXT = "TEXT"
TEXT_PAIR = "TEXT_PAIR"
QUESTION = "QUESTION"
CONTEXT = "CONTEXT"
CANDIDATE_LABELS = "CANDIDATE_LABELS"
IMAGE = "IMAGE"
PROMPT_NAME = "PROMPT_NAME"
DIMENSIONS = "DIMENSIONS"
# Outputs.
LABEL = "LABEL"
SCORE = "SCORE"
PROBABILITIES = "PROBABILITIES"
LABELS = "LABELS"
SCORES = "SCORES"
EMBEDDING = "EMBEDDING"
TRUNCATED = "TRUNCATED"
TOKEN_COUNT = "TOKEN_COUNT"
ENTITIES = "ENTITIES"
ANSWER = "ANSWER"
START = "START"
END = "END"
SPARSE_INDICES = "SPARSE_INDICES"
SPARSE_VALUES = "SPARSE_VALUES"
COLBERT = "COLBERT"
COLBERT_LENGTH = "COLBERT_LENGTH"


@dataclass(frozen=True)
class Public:
    """What a public tensor is: its Triton type, and its dims per row where every model shares them.

    ``optional``: a request may leave it out; ``output``: the ensemble gives it (else clients send it).
    """

    data_type: str
    dims: tuple[int, ...] | None = (1,)  # None: the model's (a width, a label count)
    optional: bool = False
    output: bool = True


PUBLIC: dict[str, Public] = {
    TEXT: Public("TYPE_STRING", output=False),
    TEXT_PAIR: Public("TYPE_STRING", output=False),
    QUESTION: Public("TYPE_STRING", output=False),
    CONTEXT: Public("TYPE_STRING", output=False),
    CANDIDATE_LABELS: Public("TYPE_STRING", output=False),
    IMAGE: Public("TYPE_STRING", output=False),
    PROMPT_NAME: Public("TYPE_STRING", optional=True, output=False),
    DIMENSIONS: Public("TYPE_INT32", optional=True, output=False),
    LABEL: Public("TYPE_STRING"),
    SCORE: Public("TYPE_FP32"),
    PROBABILITIES: Public("TYPE_FP32", None),
    LABELS: Public("TYPE_STRING"),
    SCORES: Public("TYPE_STRING"),
    EMBEDDING: Public("TYPE_FP32", None),
    TRUNCATED: Public("TYPE_BOOL"),
    TOKEN_COUNT: Public("TYPE_INT32"),
    ENTITIES: Public("TYPE_STRING"),
    ANSWER: Public("TYPE_STRING"),
    START: Public("TYPE_INT64"),
    END: Public("TYPE_INT64"),
    SPARSE_INDICES: Public("TYPE_INT64", (-1,)),
    SPARSE_VALUES: Public("TYPE_FP32", (-1,)),
    COLBERT: Public("TYPE_FP32", None),
    COLBERT_LENGTH: Public("TYPE_INT32"),
}
