"""The names the ensemble's parts agree on: its public tensors, then the tensors and parameters between its steps.

The public tensors are the names and Triton types of what clients send and read, one vocabulary. Every task
declares its ensemble's inputs and outputs with these names (``tritongen.tasks._tensors.public``); the Python
steps, which have this module copied beside them, read and write them by these names; the gateway's routes declare
which of them they need (``tritongen.gateway.models.ROUTE_NEEDS``); the client, the bench and docs/tasks.md's
table of tensors use them.

Between the steps, not public: the tensors one step hands the next inside an ensemble (the tokenizer step's token
arrays, the model step's inputs and outputs, a windowing step's owners). A task that declares a step's tensors, the
step that reads or writes them, the builder, the gateway and the bench each spell them from here, so a name is
changed in one place. The ``parameters`` a step's config carries are declared in :mod:`tritongen.parameters`.

Nothing here imports anything, so that it runs in any container.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ANSWER", "ATTENTION_MASK", "CANDIDATE_LABELS", "COLBERT", "COLBERT_LENGTH", "CONTEXT", "DIMENSIONS",
    "EMBEDDING", "END", "ENTITIES", "IMAGE", "INPUT_IDS", "LABEL", "LABELS", "LOGITS",
    "OFFSETS", "PIXEL_VALUES", "PROBABILITIES", "PROMPT_NAME", "PUBLIC",
    "QUESTION", "SCORE", "SCORES", "SENTENCE_EMBEDDING", "SPARSE_INDICES", "SPARSE_VALUES", "SPECIAL_MASK", "START",
    "TEXT", "TEXT_PAIR", "TOKEN_COUNT", "TOKEN_IDS", "TOKEN_METADATA", "TOKEN_TYPE_IDS",
    "TRUNCATED", "TRUNCATE_LEFT", "WINDOW_EXAMPLE", "WINDOW_TOKENS", "WORD_IDS", "Public", "carried_by_text_requests",
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
TOKEN_IDS = "TOKEN_IDS"  # a row of the model's token ids in place of its text, padded with -1
TRUNCATE_LEFT = "TRUNCATE_LEFT"  # a long row keeps its last tokens, not its first
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
    TOKEN_IDS: Public("TYPE_INT64", (-1,), optional=True, output=False),
    TRUNCATE_LEFT: Public("TYPE_BOOL", optional=True, output=False),
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


def carried_by_text_requests(name: str, optional: bool) -> bool:
    """Whether a request of texts carries the ensemble input ``name``.

    Every required one does, and ``TEXT``, which is optional only where ``TOKEN_IDS`` may stand in for it.
    """
    return not optional or name == TEXT


# --- Between the steps: not public --------------------------------------------------------------------------------
# Clients never send or read these; the server checks each ensemble's wiring of them against the steps' configs.

# The tokenizer step's token arrays, which are the model step's inputs (the names transformers gives them).
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
TOKEN_TYPE_IDS = "token_type_ids"
# Per token, where it came from, for a postprocess that maps tokens back to the text (NER, QA).
SPECIAL_MASK = "special_mask"
WORD_IDS = "word_ids"
OFFSETS = "offsets"
TOKEN_METADATA = (SPECIAL_MASK, WORD_IDS, OFFSETS)
# A windowing tokenizer's rows: the request row each window belongs to, and how many of its tokens are text.
WINDOW_EXAMPLE = "window_example"
WINDOW_TOKENS = "window_tokens"
# The image step's output, the vision model's input.
PIXEL_VALUES = "pixel_values"
# The model step's outputs that a postprocess reads.
LOGITS = "logits"
SENTENCE_EMBEDDING = "sentence_embedding"
