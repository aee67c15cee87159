"""Extractive question answering, as the transformers 4.57 ``QuestionAnsweringPipeline`` does it.

transformers 5 dropped the question-answering pipeline; this module re-implements its fast-tokenizer
path with ``numpy`` and ``tokenizers`` only (no torch, no transformers), so that it can run inside a
Triton Python backend. Two steps surround the model:

``encode_windows``
    Each (question, context) pair is tokenised question first, with truncation ``only_second``, and a
    context longer than the window is split into overlapping windows (``doc_stride`` tokens shared by
    neighbours), exactly as v4 calls the fast tokenizer (``truncation="only_second"``,
    ``max_length=max_seq_len``, ``stride=doc_stride``, ``return_overflowing_tokens=True``, no padding).
    The windows of all pairs are padded into one batch; per-window metadata keeps what decoding needs.

``decode_answers``
    Turns the model's ``start_logits``/``end_logits`` of every window back into the v4 answer dicts
    ``{"score", "start", "end", "answer"}`` (v4's ``select_starts_ends``, ``decode_spans`` and
    ``postprocess``, quirks included; see the comments there).

v4 defaults: ``max_seq_len = min(model_max_length, 384)``, ``doc_stride = min(max_seq_len // 2, 128)``,
``max_answer_len=15``, ``top_k=1``, ``handle_impossible_answer=False``, ``align_to_words=True``.
Only right-padding tokenizers (question first) are supported, which covers the BERT, RoBERTa, XLM-R,
DeBERTa, ELECTRA, ALBERT, MPNet and DistilBERT families.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from _tritongen_step._common import settings_kept
from _tritongen_step.contract import ATTENTION_MASK, INPUT_IDS, OFFSETS, TOKEN_TYPE_IDS, WORD_IDS
from _tritongen_step.encoding import pack_encodings, token_metadata
from _tritongen_step.parameters import QaAnswerParameters
from _tritongen_step.vectors import softmax

if TYPE_CHECKING:  # the module itself needs only numpy; callers hand in a tokenizers.Tokenizer
    from tokenizers import Encoding, Tokenizer

__all__ = [
    "DEFAULT_DOC_STRIDE",
    "DEFAULT_MAX_ANSWER_LEN",
    "DEFAULT_MAX_QUESTION_LEN",
    "DEFAULT_MAX_SEQ_LEN",
    "AnswerSettings",
    "QAInputError",
    "QAWindows",
    "WindowSettings",
    "check_example",
    "decode_answers",
    "encode_windows",
    "pad_windows",
    "resolve_window_sizes",
]

DEFAULT_MAX_SEQ_LEN = 384
DEFAULT_DOC_STRIDE = 128
DEFAULT_MAX_QUESTION_LEN = 64
DEFAULT_MAX_ANSWER_LEN = QaAnswerParameters.max_answer_len

# v4 pushes the logits of tokens that cannot be part of an answer to this value before the softmax.
_MASKED_LOGIT = -10000.0
# v4 starts the running minimum of the "no answer" score here (large and positive).
_NO_NULL_SCORE = 1000000


class QAInputError(ValueError):
    """A bad (question, context) pair; ``example_index`` says which one (``None`` when not per example)."""

    def __init__(self, message: str, example_index: int | None = None) -> None:
        super().__init__(message)
        self.example_index = example_index


@dataclass(frozen=True)
class QAWindows:
    """The windows of a batch of (question, context) pairs, padded to the longest window.

    ``W`` is the number of windows, ``L`` the length of the longest one. Token-level metadata is kept for
    every position (padding included) so that decoding needs nothing but these arrays and the contexts:

    * ``input_ids``, ``attention_mask``, ``token_type_ids``: ``(W, L)`` int64 model inputs. Feed
      ``token_type_ids`` only to models that take them (RoBERTa-likes do not: their post-processor marks
      the second sequence with type 1, which such models cannot embed).
    * ``example_index``: ``(W,)`` int64, the pair each window comes from; the windows of one pair are
      consecutive and in context order.
    * ``lengths``: ``(W,)`` int64, real (unpadded) tokens per window.
    * ``offsets``: ``(W, L, 2)`` int64 character offsets of each token *into its own sequence* (into the
      context for context tokens, into the question for question tokens, ``(0, 0)`` for special tokens
      and padding), as ``tokenizers`` reports them.
    * ``sequence_ids``: ``(W, L)`` int64, 0 for question tokens, 1 for context tokens, -1 for special
      tokens and padding.
    * ``word_ids``: ``(W, L)`` int64, the word index of each token within its sequence (word indices of
      the whole context, not renumbered per window), -1 where there is none.
    * ``p_mask``: ``(W, L)`` bool, v4's ``p_mask``: True for tokens that cannot be part of an answer,
      i.e. everything but context tokens, except that tokens equal to the CLS id stay allowed
      ("some models use it to indicate unanswerable questions"). Padding is True.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    example_index: np.ndarray
    lengths: np.ndarray
    offsets: np.ndarray
    sequence_ids: np.ndarray
    word_ids: np.ndarray
    p_mask: np.ndarray
    num_examples: int
    max_seq_len: int
    doc_stride: int

    @property
    def num_windows(self) -> int:
        """Number of windows (rows of the model batch)."""
        return int(self.input_ids.shape[0])

    def model_inputs(self, names: Sequence[str] = (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS)) -> dict:
        """Return the named int64 model inputs, e.g. ``tokenizer_config["model_input_names"]``."""
        arrays = {
            INPUT_IDS: self.input_ids,
            ATTENTION_MASK: self.attention_mask,
            TOKEN_TYPE_IDS: self.token_type_ids,
        }
        return {name: arrays[name] for name in names}

    def windows_of(self, example: int) -> np.ndarray:
        """Return the indices of the windows of pair ``example``, in order."""
        return np.flatnonzero(self.example_index == example)


def resolve_window_sizes(
    max_seq_len: int | None = None, doc_stride: int | None = None, model_max_length: int | None = None
) -> tuple[int, int]:
    """Return the window length and stride v4 uses when given ``max_seq_len``/``doc_stride`` (None = default).

    v4: ``max_seq_len`` defaults to ``min(tokenizer.model_max_length, 384)`` and ``doc_stride`` to
    ``min(max_seq_len // 2, 128)``; explicit values are used as given (no clamping), and a stride larger
    than the window is an error.
    """
    if max_seq_len is None:
        max_seq_len = DEFAULT_MAX_SEQ_LEN if model_max_length is None else min(model_max_length, DEFAULT_MAX_SEQ_LEN)
    if doc_stride is None:
        doc_stride = min(max_seq_len // 2, DEFAULT_DOC_STRIDE)
    max_seq_len, doc_stride = int(max_seq_len), int(doc_stride)
    if max_seq_len < 1:
        raise QAInputError(f"`max_seq_len` must be >= 1 (got {max_seq_len})")
    if doc_stride < 0:
        raise QAInputError(f"`doc_stride` must be >= 0 (got {doc_stride})")
    if doc_stride > max_seq_len:
        raise QAInputError(f"`doc_stride` ({doc_stride}) is larger than `max_seq_len` ({max_seq_len})")
    return max_seq_len, doc_stride


def check_example(question: Any, context: Any, index: int | None = None) -> None:
    """Raise ``QAInputError`` unless ``question`` and ``context`` are non-empty strings (v4's checks)."""
    where = "" if index is None else f" (pair {index})"
    for name, value in (("question", question), ("context", context)):
        if value is None:
            raise QAInputError(f"`{name}` cannot be None{where}", index)
        if not isinstance(value, str):
            raise QAInputError(f"`{name}` must be a string, got {type(value).__name__}{where}", index)
        if len(value) == 0:
            raise QAInputError(f"`{name}` cannot be empty{where}", index)


def _first_special_id(tokenizer: Tokenizer) -> int | None:
    """Return the id of the special token the post-processor puts first in a pair ([CLS], <s>), if any."""
    enc = tokenizer.encode("a", "b")
    if len(enc.ids) and enc.sequence_ids[0] is None:
        return int(enc.ids[0])
    return None


@dataclass(frozen=True)
class WindowSettings:
    """How (question, context) pairs become windows: v4's window length and overlap, the model's pad and CLS ids.

    ``max_seq_len``/``doc_stride`` left as None take v4's defaults (``resolve_window_sizes``): 384/128
    for a model that takes at least 384 tokens, else ``model_max_length`` and half of it.
    ``max_question_len`` is accepted for API parity only: v4 uses it solely with slow (Python)
    tokenizers; the fast path never truncates the question, and a question too long to leave room for
    ``doc_stride + 1`` context tokens is an error (``QAInputError``), as it is in v4.
    ``pad_id`` should be the model's pad token id (RoBERTa-likes derive position ids from it).
    ``cls_id`` is v4's ``tokenizer.cls_token_id``: tokens with this id stay answerable in ``p_mask``;
    "auto" takes the special token the post-processor puts first in a pair, None disables it.
    """

    max_seq_len: int | None = None
    doc_stride: int | None = None
    max_question_len: int = DEFAULT_MAX_QUESTION_LEN
    pad_id: int = 0
    pad_type_id: int = 0
    model_max_length: int | None = None
    cls_id: int | str | None = "auto"


def _checked_pairs(questions: Sequence[str], contexts: Sequence[str]) -> tuple[list[str], list[str]]:
    """The pairs as lists; ``QAInputError`` for a bad pair or unequal lengths, as v4 checks them."""
    questions, contexts = list(questions), list(contexts)
    if len(questions) != len(contexts):
        raise QAInputError(f"Questions and contexts don't have the same lengths ({len(questions)} != {len(contexts)})")
    if not questions:
        raise QAInputError("no (question, context) pairs given")
    for index, (question, context) in enumerate(zip(questions, contexts, strict=True)):
        check_example(question, context, index)
    return questions, contexts


def encode_windows(
    tokenizer: Tokenizer, questions: Sequence[str], contexts: Sequence[str], settings: WindowSettings = WindowSettings()
) -> QAWindows:
    """Split each (question, context) pair into v4's overlapping windows (see ``QAWindows``) as ``settings`` say.

    The tokenizer's own truncation and padding settings are restored before returning.
    """
    questions, contexts = _checked_pairs(questions, contexts)
    max_seq_len, doc_stride = resolve_window_sizes(settings.max_seq_len, settings.doc_stride, settings.model_max_length)
    with settings_kept(tokenizer):
        tokenizer.no_truncation()
        cls_id = _first_special_id(tokenizer) if settings.cls_id == "auto" else settings.cls_id
        # tokenizers panics (an uncatchable-by-`except Exception` PanicException) if the stride is not
        # below the room left for the context, and raises if there is no room at all; v4 simply fails
        # there. Find those pairs first and report them as input errors.
        _check_room(tokenizer, questions, contexts, max_seq_len, doc_stride)
        tokenizer.enable_truncation(max_seq_len, stride=doc_stride, strategy="only_second", direction="right")
        encodings = tokenizer.encode_batch(list(zip(questions, contexts, strict=True)))

    # v4 (`return_overflowing_tokens=True`): the first window is the encoding itself, the next ones its
    # `overflowing` list, in context order.
    windows: list[Encoding] = []
    owners: list[int] = []
    for index, enc in enumerate(encodings):
        for window in (enc, *enc.overflowing):
            windows.append(window)
            owners.append(index)
    arrays = _pack(windows, settings, cls_id)
    return QAWindows(
        **arrays, example_index=np.asarray(owners, dtype=np.int64), num_examples=len(questions),
        max_seq_len=max_seq_len, doc_stride=doc_stride,
    )  # fmt: skip


def _check_room(
    tokenizer: Tokenizer, questions: list[str], contexts: list[str], max_seq_len: int, doc_stride: int
) -> None:
    """Raise ``QAInputError`` for pairs that need truncating but leave <= ``doc_stride`` context tokens."""
    added = tokenizer.num_special_tokens_to_add(True)
    question_lengths = [len(e.ids) for e in tokenizer.encode_batch(questions, add_special_tokens=False)]
    tight = [i for i, n in enumerate(question_lengths) if max_seq_len - added - n <= doc_stride]
    if not tight:
        return
    for i, enc in zip(tight, tokenizer.encode_batch([(questions[i], contexts[i]) for i in tight]), strict=True):
        room = max_seq_len - added - question_lengths[i]
        if len(enc.ids) > max_seq_len:  # the context must be cut: tokenizers needs room > stride
            raise QAInputError(
                f"the question is too long: {question_lengths[i]} tokens leave {max(room, 0)} of the "
                f"{max_seq_len}-token window for the context, which must be more than doc_stride={doc_stride} "
                f"(pair {i})",
                i,
            )


def _pack(windows: list[Encoding], settings: WindowSettings, cls_id: int | None) -> dict[str, np.ndarray]:
    """The windows' arrays of ``QAWindows``, padded into one batch (``cls_id`` resolved from ``settings``'s)."""
    width = max(len(w.ids) for w in windows)
    packed = pack_encodings(windows, width, settings.pad_id, settings.pad_type_id)
    metadata = token_metadata(windows, width)
    input_ids, attention = packed[INPUT_IDS], packed[ATTENTION_MASK]
    sequence_ids = np.full((len(windows), width), -1, dtype=np.int64)
    for row, w in enumerate(windows):
        sequence_ids[row, : len(w.ids)] = [-1 if s is None else s for s in w.sequence_ids]
    # v4: p_mask is 1 wherever the sequence id is not 1 (question, special tokens), then 0 again for every
    # token whose id equals cls_token_id. There is no padding in v4 (one window per forward pass).
    p_mask = sequence_ids != 1
    if cls_id is not None:
        p_mask &= input_ids != cls_id
    p_mask |= attention == 0
    return {
        INPUT_IDS: input_ids,
        ATTENTION_MASK: attention,
        TOKEN_TYPE_IDS: packed[TOKEN_TYPE_IDS],
        "lengths": np.array([len(w.ids) for w in windows], dtype=np.int64),
        OFFSETS: metadata[OFFSETS],
        "sequence_ids": sequence_ids,
        WORD_IDS: metadata[WORD_IDS],
        "p_mask": p_mask,
    }


def pad_windows(windows: QAWindows, width: int, *, pad_id: int = 0, pad_type_id: int = 0) -> QAWindows:
    """Right-pad every per-token array of ``windows`` to ``width`` columns (a length bucket).

    Padding matches ``encode_windows``: ``pad_id``/``pad_type_id``, attention 0, offsets (0, 0),
    sequence and word ids -1, ``p_mask`` True; decoding ignores it.
    """
    extra = width - windows.input_ids.shape[1]
    if extra <= 0:
        return windows

    def pad(array: np.ndarray, value: Any) -> np.ndarray:
        return np.pad(array, [(0, 0), (0, extra)] + [(0, 0)] * (array.ndim - 2), constant_values=value)

    return replace(
        windows,
        input_ids=pad(windows.input_ids, pad_id),
        attention_mask=pad(windows.attention_mask, 0),
        token_type_ids=pad(windows.token_type_ids, pad_type_id),
        offsets=pad(windows.offsets, 0),
        sequence_ids=pad(windows.sequence_ids, -1),
        word_ids=pad(windows.word_ids, -1),
        p_mask=pad(windows.p_mask, True),
    )


def _window_probabilities(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """v4's normalisation: disallowed logits -> -10000, then a softmax over the window (float32)."""
    return softmax(np.where(allowed, logits, np.float32(_MASKED_LOGIT)).astype(np.float32))


def _top_spans(
    p_start: np.ndarray, p_end: np.ndarray, top_k: int, max_answer_len: int, allowed: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """v4's ``decode_spans`` for one unpadded window: the best (start, end) token pairs and their scores.

    The score of a span is p_start[s] * p_end[e], kept only for s <= e < s + max_answer_len. The
    ``top_k`` best flat indices are picked with the same numpy calls as v4 (argmax / argpartition +
    argsort on the n*n matrix), so ties (the many exact zeros) are broken the same way.
    """
    n = p_start.shape[0]
    candidates = np.tril(np.triu(np.outer(p_start, p_end)), max_answer_len - 1)
    flat = candidates.ravel()
    if top_k == 1:
        order = np.array([np.argmax(flat)])
    elif flat.size <= top_k:  # v4: `len < topk` sorts everything (`==` would crash argpartition there)
        order = np.argsort(-flat)
    else:
        picked = np.argpartition(-flat, top_k)[:top_k]
        order = picked[np.argsort(-flat[picked])]
    starts, ends = np.unravel_index(order, (n, n))
    # v4 keeps spans whose start and end are in `np.nonzero(undesired_tokens)` where undesired_tokens has
    # shape (1, n): np.isin then sees the row indices (all 0) as well as the column indices, so token 0
    # (CLS) always counts as allowed here, whatever the mask says.
    keep_tokens = allowed.copy()
    if keep_tokens.any():
        keep_tokens[0] = True
    keep = keep_tokens[starts] & keep_tokens[ends]
    starts, ends = starts[keep], ends[keep]
    return starts, ends, candidates[starts, ends]


def _word_chars(words: np.ndarray, offsets: np.ndarray, context_tokens: np.ndarray, word: int) -> tuple[int, int]:
    """``Encoding.word_to_chars(word, sequence_index=1)`` within one window, or raise ``LookupError``.

    tokenizers scans the context tokens of the window in order while their word index is <= ``word`` and
    spans the first to the last token of ``word`` seen: a word cut by a window edge only covers the part
    inside the window.
    """
    ctx_words = words[context_tokens]
    beyond = np.flatnonzero(ctx_words > word)
    scanned = ctx_words[: beyond[0]] if beyond.size else ctx_words
    hits = np.flatnonzero(scanned == word)
    if not hits.size:
        raise LookupError(word)
    first, last = context_tokens[hits[0]], context_tokens[hits[-1]]
    return int(offsets[first, 0]), int(offsets[last, 1])


def _char_span(windows: QAWindows, row: int, s: int, e: int, align_to_words: bool) -> tuple[int, int]:
    """v4's ``get_indices``: character start/end of the token span [s, e] in the context.

    With ``align_to_words`` the span grows to whole words (as far as they lie inside the window). If either
    token has no word (special tokens; ``token_to_word`` is None then) or its word has no context tokens in
    the window, v4's ``except Exception`` falls back to the raw token offsets, for both ends.
    """
    offsets = windows.offsets[row]
    if align_to_words:
        words, seqs = windows.word_ids[row], windows.sequence_ids[row]
        if seqs[s] >= 0 and words[s] >= 0 and seqs[e] >= 0 and words[e] >= 0:
            context_tokens = np.flatnonzero(seqs == 1)
            try:
                start = _word_chars(words, offsets, context_tokens, int(words[s]))[0]
                end = _word_chars(words, offsets, context_tokens, int(words[e]))[1]
                return start, end
            except LookupError:
                pass
    return int(offsets[s, 0]), int(offsets[e, 1])


@dataclass(frozen=True)
class AnswerSettings:
    """How answers are chosen, as v4's pipeline takes them: how many, how long, whether "no answer" may win.

    ``align_to_words`` grows a span to whole words (as far as they lie inside the window).
    """

    top_k: int = 1
    max_answer_len: int = DEFAULT_MAX_ANSWER_LEN
    handle_impossible_answer: bool = False
    align_to_words: bool = True


@dataclass(frozen=True)
class _Probabilities:
    """v4's per-window start and end probabilities, the tokens allowed in an answer, and the "no answer" scores."""

    start: np.ndarray
    end: np.ndarray
    allowed: np.ndarray
    null: np.ndarray  # p_start[0] * p_end[0] per window (token 0 = CLS)

    @classmethod
    def of(cls, start_logits: np.ndarray, end_logits: np.ndarray, windows: QAWindows) -> _Probabilities:
        """Start and end softmaxed over each window, tokens outside the context (``p_mask``) pushed to -10000."""
        allowed = ~windows.p_mask & (windows.attention_mask != 0)
        start = _window_probabilities(start_logits, allowed)
        end = _window_probabilities(end_logits, allowed)
        return cls(start, end, allowed, start[:, 0] * end[:, 0])


def _checked_logits(
    start_logits: np.ndarray, end_logits: np.ndarray, windows: QAWindows, contexts: list[str], settings: AnswerSettings
) -> tuple[np.ndarray, np.ndarray]:
    """Both logits as float32 at the windows' width; ``QAInputError`` for bad settings, contexts or shapes."""
    if settings.top_k < 1:
        raise QAInputError(f"top_k parameter should be >= 1 (got {settings.top_k})")
    if settings.max_answer_len < 1:
        raise QAInputError(f"max_answer_len parameter should be >= 1 (got {settings.max_answer_len})")
    if len(contexts) != windows.num_examples:
        raise QAInputError(f"{len(contexts)} contexts given for {windows.num_examples} pairs")
    width = windows.input_ids.shape[1]
    start_logits = np.asarray(start_logits, dtype=np.float32)
    end_logits = np.asarray(end_logits, dtype=np.float32)
    for name, logits in (("start_logits", start_logits), ("end_logits", end_logits)):
        if logits.ndim != 2 or logits.shape[0] != windows.num_windows or logits.shape[1] < width:
            raise QAInputError(
                f"{name} has shape {logits.shape}, expected ({windows.num_windows}, >={width}) for these windows"
            )
    return start_logits[:, :width], end_logits[:, :width]


def _pair_answers(
    windows: QAWindows, example: int, context: str, probabilities: _Probabilities, settings: AnswerSettings
) -> dict | list[dict]:
    """The answer of pair ``example`` over all its windows (see ``decode_answers``)."""
    pre_top_k = settings.top_k * 2 + 10 if settings.align_to_words else settings.top_k  # v4: spares for merging
    answers: list[dict] = []
    by_text: dict[str, dict] = {}  # v4 `get_answer`: first answer whose text matches, ignoring case
    min_null_score: float = _NO_NULL_SCORE
    for row in windows.windows_of(example):
        n = int(windows.lengths[row])
        if settings.handle_impossible_answer:
            min_null_score = min(min_null_score, float(probabilities.null[row]))
        ps, pe = probabilities.start[row, :n].copy(), probabilities.end[row, :n].copy()
        ps[0] = pe[0] = 0.0  # v4 "Mask CLS": position 0, after the null score was taken
        allowed = probabilities.allowed[row, :n]
        starts, ends, scores = _top_spans(ps, pe, pre_top_k, settings.max_answer_len, allowed)
        for s, e, score in zip(starts, ends, scores, strict=True):
            char_start, char_end = _char_span(windows, row, int(s), int(e), settings.align_to_words)
            text = context[char_start:char_end]
            key = text.lower()
            if key in by_text:
                by_text[key]["score"] += float(score)
            else:
                answer = {"score": float(score), "start": char_start, "end": char_end, "answer": text}
                by_text[key] = answer
                answers.append(answer)
    if settings.handle_impossible_answer:
        answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
    best = sorted(answers, key=lambda a: a["score"], reverse=True)[: settings.top_k]
    return best[0] if len(best) == 1 else best


def decode_answers(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    windows: QAWindows,
    contexts: Sequence[str],
    settings: AnswerSettings = AnswerSettings(),
) -> list[dict | list[dict]]:
    """Return the v4 pipeline's answer for every pair: ``{"score", "start", "end", "answer"}``.

    ``start_logits``/``end_logits`` are the model outputs for ``windows`` (shape ``(W, L')`` with
    ``L' >= windows`` width; extra columns are ignored). Like v4, each pair gets a dict when exactly one
    answer remains and a list (best first, at most ``top_k``) otherwise, so ``top_k > 1`` may still give a
    dict, and an empty list is possible. ``answer`` is ``context[start:end]``, nothing stripped.

    Per window (v4 ``select_starts_ends``): logits of tokens that cannot be in the answer (``p_mask``) are
    set to -10000 and start/end are softmaxed over the window; the "no answer" score is
    p_start[0] * p_end[0] (token 0 = CLS), tracked as a minimum over the pair's windows; token 0 then gets
    probability 0 and the ``top_k * 2 + 10`` (``top_k`` without ``align_to_words``) best spans are taken.
    Across windows (v4 ``postprocess``): spans whose text is equal ignoring case (wherever they are) are
    merged into the first one seen, their scores added; with ``handle_impossible_answer`` the empty answer
    with the minimum "no answer" score is appended; the stable sort by score keeps the best ``top_k``.
    """
    contexts = list(contexts)
    start_logits, end_logits = _checked_logits(start_logits, end_logits, windows, contexts, settings)
    probabilities = _Probabilities.of(start_logits, end_logits, windows)
    return [
        _pair_answers(windows, example, context, probabilities, settings) for example, context in enumerate(contexts)
    ]
