"""Token classification (NER) pre- and postprocessing in pure numpy, for the Triton Python backend.

It reproduces transformers 5's ``TokenClassificationPipeline`` for plain-string inputs (no
``is_split_into_words``, no user ``offset_mapping``) with every aggregation strategy (``none``,
``simple``, ``first``, ``average``, ``max``), without importing torch or transformers:

* ``encode_windows`` tokenises like the pipeline's ``preprocess`` with ``stride``: a text longer than
  ``max_length`` becomes overlapping windows (``return_overflowing_tokens``), so nothing is lost;
  ``aggregate_windows`` aggregates each window and merges overlapping entities as the pipeline does
  (``merge_overlapping``). The served ensemble uses these two.
* ``encode_tokens`` tokenises like ``preprocess`` without ``stride``: truncation to ``max_length``,
  tokens past it dropped and never classified. Rows are padded to the longest row of the batch.
* ``aggregate`` mirrors ``postprocess`` for one text: softmax (always softmax, as the pipeline does,
  even for ``multi_label_classification`` configs), ``gather_pre_entities``, ``aggregate``,
  ``aggregate_words``, ``group_entities`` and the ``ignore_labels`` filter.

How the pipeline decides ``is_subword`` (and so ``aggregate`` here) for a non-special token with
character offsets ``(start, end)`` and token string ``token`` (``Tokenizer.id_to_token``):

* if the tokenizer model has a truthy ``continuing_subword_prefix`` (WordPiece ``"##"``):
  ``len(token) != len(text[start:end])`` -- ``"##ing"`` is 5 characters for 3 of text;
* otherwise (byte-level BPE, whose ``continuing_subword_prefix`` is None, and Unigram, which has
  none): the fallback heuristic ``start > 0 and " " not in text[start - 1:start + 1]``. Byte-level
  BPE offsets are trimmed (``Ġworld`` covers ``world``, not the space), so a word start is a token
  preceded by a space; punctuation glued to a word (``"world!"``) counts as a subword and a word
  after a non-space separator (tab, newline) does not start a new word -- the pipeline's own
  limitation, reproduced as is. Several byte-level pieces of one character (an emoji) share its
  offsets; a Unigram ``▁`` piece's offsets start at the word (the space is not covered);
* the unknown token (``unk_id``) takes the text slice as its word and is never a subword.

Special-token *text* inside the input (``"<mask>"``, ``"[UNK]"`` typed by a user) is matched as an added
token but is not flagged in ``special_tokens_mask``, so the pipeline classifies it like any token; so
does ``aggregate``. Only the tokens the post-processor adds (and padding) are skipped.

``word`` is, as in the pipeline, the raw token string for ``none`` (``"##ing"``, ``"Ġworld"``,
``"▁world"``) and ``tokenizer.decoder.decode(tokens)`` (``convert_tokens_to_string``; ``" ".join``
without a decoder) of the group's token strings otherwise. ``word_ids`` are returned by
``encode_tokens`` for the caller's convenience; the pipeline does not use them for plain strings, so
neither does ``aggregate``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from _tritongen_step._common import encode_truncated, encode_windows
from _tritongen_step.contract import INPUT_IDS, OFFSETS, SPECIAL_MASK
from _tritongen_step.encoding import pack_encodings as _pack_inputs
from _tritongen_step.encoding import token_metadata
from _tritongen_step.vectors import softmax

__all__ = [
    "STRATEGIES",
    "WORD_STRATEGIES",
    "Aggregation",
    "TokenVocab",
    "aggregate",
    "aggregate_batch",
    "aggregate_windows",
    "encode_tokens",
    "encode_windows",
    "encoded_row",
    "merge_overlapping",
    "pack_encodings",
    "softmax",
]

STRATEGIES: tuple[str, ...] = ("none", "simple", "first", "average", "max")
WORD_STRATEGIES: frozenset[str] = frozenset({"first", "average", "max"})


# --------------------------------------------------------------------------------------------------
# Tokenizer facts the pipeline uses
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenVocab:
    """What postprocessing needs from a tokenizer; build once per model with ``from_tokenizer``.

    ``id_to_token``: id -> token string (``convert_ids_to_tokens``); ``tokens_to_string``: token strings ->
    text (``convert_tokens_to_string``); ``unk_id``: the unknown token's id (None if there is none);
    ``word_aware``: the model has a ``continuing_subword_prefix`` (WordPiece), so subwords are exact.
    """

    id_to_token: Callable[[int], str | None]
    tokens_to_string: Callable[[list[str]], str]
    unk_id: int | None
    word_aware: bool

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, *, unk_token: str | None = None) -> TokenVocab:
        """Facts of a ``tokenizers.Tokenizer``.

        ``unk_token`` sets the unknown token; transformers takes it from ``tokenizer_config.json`` (see
        ``from_files``). Without it: the model's own (WordPiece/BPE ``unk_token``, Unigram ``unk_id``), else
        the id of ``<unk>`` or ``[UNK]`` (byte-level BPE models such as RoBERTa's have no unknown token of
        their own, but transformers' ``unk_token_id`` is that of ``<unk>``), else None.
        """
        model = tokenizer.model
        decoder = tokenizer.decoder
        if unk_token is not None:
            unk_id = tokenizer.token_to_id(unk_token)
        elif getattr(model, "unk_token", None):
            unk_id = tokenizer.token_to_id(model.unk_token)
        else:
            unk_id = json.loads(tokenizer.to_str()).get("model", {}).get("unk_id")
            for token in ("<unk>", "[UNK]"):
                if unk_id is None:
                    unk_id = tokenizer.token_to_id(token)
        return cls(
            id_to_token=tokenizer.id_to_token,
            tokens_to_string=decoder.decode if decoder is not None else " ".join,
            unk_id=None if unk_id is None else int(unk_id),
            word_aware=bool(getattr(model, "continuing_subword_prefix", None)),
        )

    @classmethod
    def from_files(cls, tokenizer_file: str, tokenizer_config_file: str | None = None) -> TokenVocab:
        """Facts of ``tokenizer.json``, with the unknown token of ``tokenizer_config.json`` if given."""
        from tokenizers import Tokenizer

        unk_token = None
        if tokenizer_config_file is not None:
            with open(tokenizer_config_file, encoding="utf-8") as handle:
                unk = json.load(handle).get("unk_token")
            unk_token = unk.get("content") if isinstance(unk, dict) else unk
        return cls.from_tokenizer(Tokenizer.from_file(str(tokenizer_file)), unk_token=unk_token)


def _vocab(tokenizer: Any) -> TokenVocab:
    if isinstance(tokenizer, TokenVocab):
        return tokenizer
    if tokenizer is None:
        raise ValueError(
            "aggregate() needs `tokenizer` (a tokenizers.Tokenizer or a TokenVocab) to name the tokens (`word`)"
        )
    return TokenVocab.from_tokenizer(tokenizer)


# --------------------------------------------------------------------------------------------------
# Preprocessing
# --------------------------------------------------------------------------------------------------


def _default_pad_id(tokenizer: Any) -> int:
    padding = tokenizer.padding
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    for token in ("[PAD]", "<pad>"):
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return int(token_id)
    return 0


def encode_tokens(
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_length: int,
    pad_id: int | None = None,
    pad_type_id: int = 0,
) -> dict[str, np.ndarray]:
    """Tokenise ``texts`` like the pipeline and pad them into int64 arrays of shape [batch, seq].

    Returns ``input_ids``, ``attention_mask``, ``token_type_ids``, ``special_mask`` (1 for special
    tokens and padding), ``word_ids`` (-1 for special tokens and padding) and ``offsets``
    [batch, seq, 2] (character offsets into each text; 0, 0 for special tokens and padding).
    ``seq`` is the longest row, at most ``max_length``: longer texts are truncated (right side), as the
    pipeline does with its default ``truncation=True``.

    ``pad_id`` defaults to the tokenizer's padding id, else the id of ``[PAD]`` or ``<pad>``, else 0. Use
    the model's real pad id: RoBERTa-style models derive position ids from ``input_ids != pad_id``.
    The tokenizer's own truncation and padding settings are restored afterwards.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    texts = list(texts)
    if not all(isinstance(text, str) for text in texts):
        raise ValueError("encode_tokens() takes a list of strings")
    pad = _default_pad_id(tokenizer) if pad_id is None else int(pad_id)
    encodings = encode_truncated(tokenizer, texts, max_length, stride=0)
    return pack_encodings(encodings, max((len(enc.ids) for enc in encodings), default=0), pad, pad_type_id)


def pack_encodings(encodings: Sequence[Any], width: int, pad_id: int, pad_type_id: int = 0) -> dict[str, np.ndarray]:
    """Model inputs and token metadata of ``encodings``, right-padded to ``width`` (see ``encode_tokens``)."""
    return {**_pack_inputs(encodings, width, pad_id, pad_type_id), **token_metadata(encodings, width)}


def encoded_row(encoded: Mapping[str, np.ndarray], row: int) -> dict[str, np.ndarray]:
    """Row ``row`` of every array of ``encoded`` (``encode_tokens``' output): one text's tokens, for ``aggregate``."""
    return {key: array[row] for key, array in encoded.items()}


# --------------------------------------------------------------------------------------------------
# Postprocessing
# --------------------------------------------------------------------------------------------------


def _strategy(strategy: Any) -> str:
    name = str(getattr(strategy, "value", strategy)).lower()
    if name not in STRATEGIES:
        raise ValueError(f"unknown aggregation strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}")
    return name


def _gather_pre_entities(
    text: str,
    input_ids: np.ndarray,
    scores: np.ndarray,
    offsets: np.ndarray | None,
    special_mask: np.ndarray,
    vocab: TokenVocab,
) -> list[dict[str, Any]]:
    """``TokenClassificationPipeline.gather_pre_entities`` for a plain string."""
    pre_entities = []
    for idx in range(len(scores)):
        if special_mask[idx]:
            continue
        token_id = int(input_ids[idx])
        word = vocab.id_to_token(token_id)
        if offsets is not None:
            start, end = int(offsets[idx][0]), int(offsets[idx][1])
            word_ref = text[start:end]
            if vocab.word_aware:
                is_subword = len(word) != len(word_ref)
            else:
                is_subword = start > 0 and " " not in text[start - 1 : start + 1]
            if token_id == vocab.unk_id:
                word = word_ref
                is_subword = False
        else:
            start = end = None
            is_subword = False
        pre_entities.append(
            {"word": word, "scores": scores[idx], "start": start, "end": end, "index": idx, "is_subword": is_subword}
        )
    return pre_entities


def _aggregate_word(group: list[dict[str, Any]], strategy: str, labels: Mapping[int, str], vocab: TokenVocab) -> dict:
    word = vocab.tokens_to_string([entity["word"] for entity in group])
    if strategy == "first":
        scores = group[0]["scores"]
    elif strategy == "max":
        scores = max(group, key=lambda entity: entity["scores"].max())["scores"]
    else:  # average
        scores = np.nanmean(np.stack([entity["scores"] for entity in group]), axis=0)
    idx = int(scores.argmax())
    return {
        "entity": labels[idx],
        "score": scores[idx],
        "word": word,
        "start": group[0]["start"],
        "end": group[-1]["end"],
    }


def _aggregate_words(pre_entities: list[dict[str, Any]], strategy: str, labels: Mapping[int, str], vocab: TokenVocab):
    words, group = [], None
    for entity in pre_entities:
        if group is None:
            group = [entity]
        elif entity["is_subword"]:
            group.append(entity)
        else:
            words.append(_aggregate_word(group, strategy, labels, vocab))
            group = [entity]
    if group is not None:
        words.append(_aggregate_word(group, strategy, labels, vocab))
    return words


def _tag(entity_name: str) -> tuple[str, str]:
    if entity_name.startswith("B-"):
        return "B", entity_name[2:]
    if entity_name.startswith("I-"):
        return "I", entity_name[2:]
    return "I", entity_name  # not in B-/I- format: a continuation


def _group_sub_entities(group: list[dict[str, Any]], vocab: TokenVocab) -> dict[str, Any]:
    return {
        "entity_group": group[0]["entity"].split("-", 1)[-1],
        "score": np.mean(np.nanmean([entity["score"] for entity in group])),
        "word": vocab.tokens_to_string([entity["word"] for entity in group]),
        "start": group[0]["start"],
        "end": group[-1]["end"],
    }


def _group_entities(entities: list[dict[str, Any]], vocab: TokenVocab) -> list[dict[str, Any]]:
    groups, current = [], []
    for entity in entities:
        if not current:
            current.append(entity)
            continue
        bi, tag = _tag(entity["entity"])
        _, last_tag = _tag(current[-1]["entity"])
        if tag == last_tag and bi != "B":
            current.append(entity)
        else:
            groups.append(_group_sub_entities(current, vocab))
            current = [entity]
    if current:
        groups.append(_group_sub_entities(current, vocab))
    return groups


def _plain(entity: dict[str, Any]) -> dict[str, Any]:
    """Python scalars instead of numpy ones (JSON-serialisable); values unchanged."""
    return {key: (value.item() if isinstance(value, np.generic) else value) for key, value in entity.items()}


@dataclass(frozen=True)
class Aggregation:
    """How one model's token scores become entities: its labels, the strategy, the labels left out, its vocabulary.

    Bound once per model (:meth:`of`), then handed to every ``aggregate`` call.
    """

    labels: Mapping[int, str]
    vocab: TokenVocab
    strategy: str = "simple"
    ignore: tuple[str, ...] = ("O",)

    @classmethod
    def of(
        cls,
        id2label: Mapping[int, str] | Mapping[str, str] | Sequence[str],
        *,
        strategy: str = "simple",
        ignore_labels: Iterable[str] | None = ("O",),
        tokenizer: Any = None,
    ) -> Aggregation:
        """Bind ``id2label`` (keys as ints or JSON strings, or a list in id order) and the rest.

        ``tokenizer`` is a ``tokenizers.Tokenizer`` or, better in a server, a ``TokenVocab`` built once.
        ``ignore_labels`` None means ``("O",)``; an empty tuple keeps everything.
        """
        if isinstance(id2label, Mapping):
            labels = {int(key): value for key, value in id2label.items()}
        else:
            labels = dict(enumerate(id2label))
        ignore = ("O",) if ignore_labels is None else tuple(ignore_labels)
        return cls(labels, _vocab(tokenizer), strategy, ignore)


def _checked_tokens(
    logits: np.ndarray, tokens: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """``logits``, ``input_ids``, ``special_mask`` and ``offsets`` (or None) of one text, shapes checked."""
    logits = np.asarray(logits)
    if logits.ndim != 2:
        raise ValueError(f"logits must be [seq, num_labels], got shape {logits.shape}")
    seq = logits.shape[0]
    input_ids = np.asarray(tokens[INPUT_IDS]).reshape(-1)
    special_mask = np.asarray(tokens[SPECIAL_MASK]).reshape(-1)
    offsets = tokens.get(OFFSETS)
    if offsets is not None:
        offsets = np.asarray(offsets).reshape(-1, 2)
    for array_name, array in ((INPUT_IDS, input_ids), (SPECIAL_MASK, special_mask), (OFFSETS, offsets)):
        if array is not None and len(array) != seq:
            raise ValueError(f"{array_name} has {len(array)} tokens but logits have {seq}")
    return logits, input_ids, special_mask, offsets


def _token_entities(pre_entities: list[dict[str, Any]], labels: Mapping[int, str]) -> list[dict[str, Any]]:
    """One entity per token, its best label (the ``none`` and ``simple`` strategies)."""
    entities = []
    for pre in pre_entities:
        idx = int(pre["scores"].argmax())
        entities.append(
            {
                "entity": labels[idx],
                "score": pre["scores"][idx],
                "index": pre["index"],
                "word": pre["word"],
                "start": pre["start"],
                "end": pre["end"],
            }
        )
    return entities


def aggregate(
    logits: np.ndarray, tokens: Mapping[str, Any], text: str, aggregation: Aggregation
) -> list[dict[str, Any]]:
    """Return the pipeline's entities for one text: its row of ``encode_tokens``' arrays (``tokens``) and its logits.

    ``logits`` [seq, num_labels]; ``tokens`` holds ``input_ids`` and ``special_mask`` [seq] and ``offsets``
    [seq, 2] (absent or None: no offsets, like a slow tokenizer: ``start`` and ``end`` are None and only
    ``none``/``simple`` are allowed); ``word_ids`` may be there but is unused (see the module docstring).
    Padding must be marked special (``encode_tokens`` does). ``encoded_row`` takes one row of a batch.

    ``none`` returns ``{entity, score, index, word, start, end}`` per token, the others
    ``{entity_group, score, word, start, end}`` per entity, as Python scalars.
    """
    name = _strategy(aggregation.strategy)
    if name in WORD_STRATEGIES and tokens.get(OFFSETS) is None:
        raise ValueError(
            f"aggregation strategy {name!r} needs word information (character offsets), which this tokenizer "
            'does not give; use "simple" or "none", or a fast tokenizer'
        )
    vocab, labels, ignore = aggregation.vocab, aggregation.labels, aggregation.ignore
    logits, input_ids, special_mask, offsets = _checked_tokens(logits, tokens)
    pre_entities = _gather_pre_entities(text, input_ids, softmax(logits), offsets, special_mask, vocab)
    if name in ("none", "simple"):
        entities = _token_entities(pre_entities, labels)
    else:
        entities = _aggregate_words(pre_entities, name, labels, vocab)
    if name != "none":
        entities = _group_entities(entities, vocab)
    return [
        _plain(entity)
        for entity in entities
        if entity.get("entity") not in ignore and entity.get("entity_group") not in ignore
    ]


def merge_overlapping(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pipeline's ``aggregate_overlapping_entities``: of entities that overlap, keep the longest (then best)."""
    if not entities:
        return entities
    entities = sorted(entities, key=lambda entity: entity["start"])
    merged = []
    previous = entities[0]
    for entity in entities:
        if previous["start"] <= entity["start"] < previous["end"]:
            length, previous_length = entity["end"] - entity["start"], previous["end"] - previous["start"]
            if length > previous_length or (length == previous_length and entity["score"] > previous["score"]):
                previous = entity
        else:
            merged.append(previous)
            previous = entity
    merged.append(previous)
    return merged


def aggregate_windows(
    logits: np.ndarray,
    encoded: Mapping[str, np.ndarray],
    owners: np.ndarray,
    texts: Sequence[str],
    aggregation: Aggregation,
) -> list[list[dict[str, Any]]]:
    """Entities of every text from its windows (``encode_windows``), merged as the strided pipeline merges them.

    Each window is aggregated on its own against the whole text; a text of several windows then keeps,
    of overlapping entities, the longest (``merge_overlapping``). With ``none`` (which the pipeline does not
    allow with a stride) windows must not overlap, and the tokens of every window are listed in order.
    """
    name = _strategy(aggregation.strategy)
    owners = np.asarray(owners).reshape(-1)
    results = []
    for example, text in enumerate(texts):
        rows = np.flatnonzero(owners == example)
        entities = []
        for row in rows:
            entities += aggregate(logits[row], encoded_row(encoded, row), text, aggregation)
        results.append(merge_overlapping(entities) if len(rows) > 1 and name != "none" else entities)
    return results


def aggregate_batch(
    logits: np.ndarray, encoded: Mapping[str, np.ndarray], texts: Sequence[str], aggregation: Aggregation
) -> list[list[dict[str, Any]]]:
    """``aggregate`` for every row of a batch: ``logits`` [batch, seq, labels], ``encoded`` from ``encode_tokens``."""
    _strategy(aggregation.strategy)
    return [aggregate(logits[row], encoded_row(encoded, row), text, aggregation) for row, text in enumerate(texts)]
