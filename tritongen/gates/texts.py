"""The accuracy gate's texts at every length requests come in, from one word to past the model's row.

Validation samples are sentences and paragraphs, but requests also come as one word (a query, a tag) and as
documents longer than the model takes, and quantised models err most at the short end: a dynamic INT8
all-MiniLM-L6-v2 that cleared the gate on the built-in sample gave cosine 0.976 on a one-word text, under
the gate's own floor. So beside the given texts the gate measures texts derived from them: single words,
texts of two and three words, and texts that fill the model's row exactly or run past it (truncated, as the
tokenizer step does). They are derived deterministically and never downloaded, so the same validation texts
always give the same gate texts.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["LONG_TEXTS", "SHORT_TEXTS", "SINGLE_WORDS", "LengthTexts", "length_texts"]

SINGLE_WORDS = 8
SHORT_TEXTS = 8  # alternately two and three words
LONG_TEXTS = 4  # half fill the row exactly, half are twice that long

# A plain word: letters (any script), at most one trailing punctuation mark. Not a mention, tag, URL or number.
_PLAIN = re.compile(r"[^\W\d_]+[.,!?]?")
_MAX_WORDS = 1 << 16  # a tokenizer that never truncates: stop growing a text here


@dataclass(frozen=True)
class LengthTexts:
    """Texts derived from the validation texts, by length."""

    words: tuple[str, ...]
    short: tuple[str, ...]
    full: tuple[str, ...]  # exactly as many words as fit the model's row
    over: tuple[str, ...]  # twice as many: truncated, as served

    @property
    def texts(self) -> list[str]:
        """All of them, shortest first."""
        return [*self.words, *self.short, *self.full, *self.over]

    def describe(self, max_length: int) -> str:
        """What was added, for the model card."""
        return (
            f"{len(self.words)} single words, {len(self.short)} texts of 2-3 words, {len(self.full)} that fill the "
            f"{max_length}-token row and {len(self.over)} twice as long (truncated, as served), derived from them"
        )


def length_texts(texts: Sequence[str], fits: Callable[[str], bool]) -> LengthTexts:
    """Single words, short texts and row-length texts derived from ``texts``, spread over them.

    ``fits(text)`` says whether a text fits the model's row without truncation (the served tokenizer's word).
    """
    texts = [text for text in texts if text.split()]
    if not texts:
        return LengthTexts((), (), (), ())
    full, over = [], []
    for index in range(LONG_TEXTS // 2):
        words = _words_from(texts, index * len(texts) // (LONG_TEXTS // 2))
        count = _fitting(words, fits)
        if count:
            full.append(" ".join(itertools.islice(words(), count)))
        if 0 < count < _MAX_WORDS:
            over.append(" ".join(itertools.islice(words(), 2 * count)))
    return LengthTexts(_single_words(texts), _short_texts(texts), tuple(full), tuple(over))


def _starts(texts: Sequence[str], count: int, shift: float = 0.0) -> list[list[str]]:
    """``count`` views of ``texts``, each from another evenly spaced start and wrapping round: where to look."""
    step = len(texts) / count
    return [[*texts[int((i + shift) * step) :], *texts[: int((i + shift) * step)]] for i in range(count)]


def _single_words(texts: Sequence[str]) -> tuple[str, ...]:
    """Distinct plain words of three letters or more, each the first new one from its start."""
    picked: dict[str, str] = {}
    for view in _starts(texts, SINGLE_WORDS):
        plain = (w.rstrip(".,!?") for t in view for w in t.split() if _PLAIN.fullmatch(w))
        word = next((w for w in plain if len(w) >= 3 and w.casefold() not in picked), None)
        if word is not None:
            picked[word.casefold()] = word
    return tuple(picked.values())


def _short_texts(texts: Sequence[str]) -> tuple[str, ...]:
    """The first run of two (or three) plain words in a text, from starts between the single words' ones."""
    picked = []
    for index, view in enumerate(_starts(texts, SHORT_TEXTS, shift=0.5)):
        size = 2 + index % 2
        for text in view:
            runs = [run for run in _plain_runs(text.split()) if len(run) >= size]
            if runs and " ".join(runs[0][:size]) not in picked:
                picked.append(" ".join(runs[0][:size]))
                break
    return tuple(picked)


def _plain_runs(words: Sequence[str]) -> list[list[str]]:
    """The runs of consecutive plain words."""
    runs: list[list[str]] = [[]]
    for word in words:
        if _PLAIN.fullmatch(word):
            runs[-1].append(word)
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def _words_from(texts: Sequence[str], start: int) -> Callable[[], Iterator[str]]:
    """The words of ``texts`` from text ``start`` on, wrapping round as long as asked (fresh on each call)."""
    words = [word for text in [*texts[start:], *texts[:start]] for word in text.split()]
    return lambda: itertools.cycle(words)


def _fitting(words: Callable[[], Iterator[str]], fits: Callable[[str], bool]) -> int:
    """The most words (from the start of ``words()``) that fit the row: doubling until one does not, then bisection."""
    fitted, size = 0, 16
    while size <= _MAX_WORDS and fits(" ".join(itertools.islice(words(), size))):
        fitted, size = size, size * 2
    if size > _MAX_WORDS:
        return fitted
    while size - fitted > 1:
        middle = (fitted + size) // 2
        if fits(" ".join(itertools.islice(words(), middle))):
            fitted = middle
        else:
            size = middle
    return fitted
