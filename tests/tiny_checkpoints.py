"""Tiny, randomly initialised Hugging Face checkpoints on local disk, for tests.

``make_checkpoint(arch, out_dir)`` writes a complete checkpoint directory (``config.json``,
``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json`` and, for embedding models, the
sentence-transformers files) without touching the network:

* the tokenizer is a ``tokenizers.Tokenizer`` built offline from a small built-in corpus, with the same
  algorithm, normalizer, pre-tokenizer, post-processor and special tokens as the architecture's real
  tokenizer (WordPiece for BERT-likes, byte-level BPE for RoBERTa, Unigram/"▁" for the SentencePiece
  families); the vocabulary is the same in every process, and it is cached per kind, so building many
  checkpoints is fast;
* the model is tiny (hidden 32, 2 layers, 2 heads) and its weights depend only on ``seed``;
* the maximum sequence length is ``max_length`` everywhere: ``max_position_embeddings`` (plus the padding
  offset of 2 for RoBERTa, XLM-R and MPNet), the tokenizer's ``model_max_length`` and, for embedding
  models, ``sentence_bert_config.json``.

The tokenizer is saved as a generic ``TokenizersBackend`` (alias ``PreTrainedTokenizerFast``): in
transformers 5 the model-specific tokenizer classes rebuild their normalizer and pre-tokenizer in
``__init__`` instead of taking them from ``tokenizer.json``, so ``tokenizer.json`` alone defines the
tokenization and ``AutoTokenizer`` agrees exactly with ``tokenizers.Tokenizer.from_file``.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTextEncoding,
    PreTrainedTokenizerFast,
)

__all__ = ["ARCHITECTURES", "EMBEDDING_ONLY", "TASKS", "corpus", "label_names", "make_checkpoint", "undeclare_limits"]

ARCHITECTURES: tuple[str, ...] = (
    "bert",
    "distilbert",
    "roberta",
    "xlm-roberta",
    "deberta-v2",
    "electra",
    "albert",
    "mpnet",
    "modernbert",
    "eurobert",
    "nomic_bert",
)
# Architectures built only as sentence embedders (their encoder is a part of an encoder-decoder).
EMBEDDING_ONLY: tuple[str, ...] = ("t5",)
TASKS: tuple[str, ...] = ("classification", "embedding")

HIDDEN_SIZE = 32
_VOCAB_SIZE = 600  # requested size; the small corpus may yield somewhat fewer pieces
_INITIALIZER_RANGE = 0.5  # far above the usual 0.02, so logits of different inputs clearly differ (few near-ties)


@dataclass(frozen=True)
class _TokenizerKind:
    """How to build one family of tokenizers; ``specials`` maps role -> token, in vocabulary order."""

    algorithm: str  # wordpiece | bpe | unigram
    specials: dict[str, str]
    mask_last: bool = False  # mask token appended after the learned vocabulary, as in RoBERTa/XLM-R/DeBERTa-v3
    processor: str = "bert"  # bert | roberta | xlmr | t5 (no leading token, "</s>" after each text)
    mask_lstrip: bool | None = None  # whether the mask swallows the space before it; None: by processor
    split: str | None = None  # a regex splitting text before byte-level BPE (Llama 3); None: ByteLevel's own


_KINDS: dict[str, _TokenizerKind] = {
    "wordpiece": _TokenizerKind(
        "wordpiece", {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    ),
    "wordpiece-mpnet": _TokenizerKind(
        "wordpiece",
        {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "[UNK]", "mask": "<mask>"},
        processor="roberta",
    ),
    "bpe-roberta": _TokenizerKind(
        "bpe",
        {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"},
        mask_last=True,
        processor="roberta",
    ),
    "unigram-xlmr": _TokenizerKind(
        "unigram",
        {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"},
        mask_last=True,
        processor="xlmr",
    ),
    "unigram-albert": _TokenizerKind(
        "unigram", {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    ),
    "unigram-deberta": _TokenizerKind(
        "unigram", {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}, mask_last=True
    ),
    # ModernBERT: OLMo-style byte-level BPE, BERT's specials and template ("[CLS] A [SEP] B [SEP]").
    "bpe-modernbert": _TokenizerKind(
        "bpe", {"unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]"}, mask_lstrip=True
    ),
    # EuroBERT: Llama 3's BPE (its split regex, then bytes), no unknown token, text framed by
    # <|begin_of_text|> ... <|end_of_text|>, which also pads.
    "bpe-llama3": _TokenizerKind(
        "bpe",
        {"cls": "<|begin_of_text|>", "sep": "<|end_of_text|>", "pad": "<|end_of_text|>", "mask": "<|mask|>"},
        split=(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+"
        ),
    ),
    # T5: SentencePiece Unigram, "</s>" closes each text, no leading token and no mask.
    "unigram-t5": _TokenizerKind("unigram", {"pad": "<pad>", "sep": "</s>", "unk": "<unk>"}, processor="t5"),
}


@dataclass(frozen=True)
class _ArchSpec:
    """Per-architecture facts: tokenizer kind, whether the real tokenizer returns token_type_ids, config."""

    tokenizer: str
    token_type_ids: bool
    position_offset: int  # RoBERTa-style models number positions from padding_idx + 1 = 2
    config: dict[str, Any]


_LAYERS = {"num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}
_ARCHS: dict[str, _ArchSpec] = {
    "bert": _ArchSpec("wordpiece", True, 0, {**_LAYERS, "type_vocab_size": 2}),
    "distilbert": _ArchSpec("wordpiece", False, 0, {"n_layers": 2, "n_heads": 2, "dim": HIDDEN_SIZE, "hidden_dim": 37}),
    "roberta": _ArchSpec("bpe-roberta", False, 2, {**_LAYERS, "type_vocab_size": 1}),
    "xlm-roberta": _ArchSpec("unigram-xlmr", False, 2, {**_LAYERS, "type_vocab_size": 1}),
    "deberta-v2": _ArchSpec(  # DeBERTa-v3 layout: relative attention only, no token-type embeddings
        "unigram-deberta",
        True,
        0,
        {
            **_LAYERS,
            "type_vocab_size": 0,
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "max_relative_positions": -1,
            "position_buckets": 64,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
        },
    ),
    "electra": _ArchSpec("wordpiece", True, 0, {**_LAYERS, "embedding_size": HIDDEN_SIZE, "type_vocab_size": 2}),
    "albert": _ArchSpec("unigram-albert", True, 0, {**_LAYERS, "embedding_size": 16, "type_vocab_size": 2}),
    "mpnet": _ArchSpec("wordpiece-mpnet", False, 2, {**_LAYERS}),
    # One global layer, then one sliding-window layer whose 16-token window (8 each side) is shorter than
    # the 64-token rows, so the window changes the outputs; rotary positions in both.
    "modernbert": _ArchSpec(
        "bpe-modernbert",
        False,
        0,
        {
            **_LAYERS,
            "layer_types": ["full_attention", "sliding_attention"],
            "local_attention": 16,
            "classifier_pooling": "mean",
        },
    ),
    # Llama-style: rotary positions, grouped-query attention (2 query heads share 1 key/value head), RMSNorm.
    "eurobert": _ArchSpec("bpe-llama3", False, 0, {**_LAYERS, "num_key_value_heads": 1, "head_dim": 16}),
    # NomicBERT: BERT's tokenizer and two segments, rotary positions and a SwiGLU MLP.
    "nomic_bert": _ArchSpec("wordpiece", True, 0, {**_LAYERS, "type_vocab_size": 2}),
    # T5's encoder: relative position buckets, no position table (its length is the config's n_positions).
    "t5": _ArchSpec(
        "unigram-t5", False, 0, {"d_model": HIDDEN_SIZE, "d_kv": 16, "d_ff": 37, "num_layers": 2, "num_heads": 2}
    ),
}

_LABEL_SETS: dict[int, tuple[str, ...]] = {
    1: ("score",),
    2: ("negative", "positive"),
    3: ("negative", "neutral", "positive"),
    5: ("very negative", "negative", "neutral", "positive", "very positive"),
}
_EMOTIONS = ("anger", "disgust", "fear", "joy", "sadness", "surprise", "love", "trust", "anticipation", "neutral")

_TOKENIZER_CACHE: dict[str, Tokenizer] = {}


def label_names(num_labels: int) -> list[str]:
    """Meaningful label names for ``num_labels`` classes (sentiment, emotions, else ``LABEL_i``)."""
    if num_labels < 1:
        raise ValueError(f"num_labels must be >= 1, got {num_labels}")
    if num_labels in _LABEL_SETS:
        return list(_LABEL_SETS[num_labels])
    if num_labels <= len(_EMOTIONS):
        return list(_EMOTIONS[:num_labels])
    return [f"LABEL_{i}" for i in range(num_labels)]


def corpus() -> list[str]:
    """A deterministic training corpus of a few hundred varied sentences, non-ASCII, CJK and emoji included."""
    rng = random.Random(1234)
    subjects = (
        "The cat|My friend|A tiny robot|The old café owner|Our naïve intern|Zoë|The señor|Das Mädchen|Le garçon|"
        "東京の学生|The team|Everyone|Nobody|This model"
    ).split("|")
    verbs = "loves|hates|reads|writes about|ignores|recommends|reviews|dislikes|talks about|remembers|enjoys|forgets"
    objects = (
        "the weather|fresh coffee|a long novel|crème brûlée|the Ünïcödé test|東京|北京の夜|ソフトウェア|한국어 문장|"
        "the new phone 📱|pizza 🍕|music 🎵|this movie|the service|numbers like 42 and 3.14|e-mail @ example.com|"
        "naïve résumé files|Straße und Köln"
    ).split("|")
    tails = (
        "| today| again| very much| 🙂| 😀!| — honestly| (really)|...| ?!| 👍🏽| at 10:30 am| in São Paulo|"
        " with jalapeño| 😢"
    ).split("|")
    words = (
        "time person year way day thing world life hand part child eye woman place work week case point number "
        "group problem fact good new first last long great little own other old right big high different small "
        "large next early young important few public bad same able quickly slowly happily sadly never always "
        "water city market river mountain garden window kitchen station airport ticket budget meeting letter "
        "doctor teacher student engineer pilot driver singer price quality delivery battery screen camera "
        "naïveté façade jalapeño piñata smörgåsbord über déjà vu café 寿司 ラーメン 大阪 上海 🙂 😀 🎉 ❤️ 🚀"
    ).split()
    lines = [
        f"{rng.choice(subjects)} {rng.choice(verbs.split('|'))} {rng.choice(objects)}{rng.choice(tails)}."
        for _ in range(240)
    ]
    lines += [
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 14))).capitalize() + rng.choice(".!?")
        for _ in range(160)
    ]
    lines += (
        "I love it!|I hate it.|It was okay, I guess.|Terrible, awful, bad service.|Great product, excellent quality!|"
        "¿Dónde está la biblioteca?|Ça va très bien, merci.|Привет, как дела?|Γειά σου κόσμε|مرحبا بالعالم|"
        "こんにちは世界|你好，世界|🙂🙂🙂 😀 🎉|HELLO WORLD|hello world|don't can't won't it's|"
        "A+B=C; x*y/z (1,2,3) [a] {b} #tag $5 %"
    ).split("|")
    return lines


def _ranked(scores: Counter[str], n: int, exclude: set[str]) -> list[str]:
    """The ``n`` best-scoring strings not in ``exclude``; ties broken by the string, so the result is stable."""
    return [t for t, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])) if t not in exclude][: max(n, 0)]


def _wordpiece_model(counts: Counter[str], leading: list[str], unk: str) -> models.WordPiece:
    """A WordPiece vocabulary: specials, every character (plain and ``##``), then frequent words and affixes."""
    chars = sorted({c for word in counts for c in word})
    base = [*leading, *chars, *(f"##{c}" for c in chars)]
    candidates: Counter[str] = Counter()
    for word, n in counts.items():
        candidates[word] += n if len(word) > 1 else 0
        for k in range(2, min(len(word), 6)):
            candidates[word[:k]] += n
            candidates["##" + word[-k:]] += n
    tokens = base + _ranked(candidates, _VOCAB_SIZE - len(base), set(base))
    return models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token=unk, max_input_chars_per_word=100)


def _unigram_model(counts: Counter[str], leading: list[str], unk: str) -> models.Unigram:
    """A Unigram vocabulary: every character plus the substrings covering most text, scored by log frequency."""
    subs: Counter[str] = Counter()
    for word, n in counts.items():
        for i in range(len(word)):
            for j in range(i + 1, min(len(word), i + 8) + 1):
                subs[word[i:j]] += n
    chars = sorted(p for p in subs if len(p) == 1)
    coverage = Counter({p: n * len(p) for p, n in subs.items() if len(p) > 1})
    pieces = chars + _ranked(coverage, _VOCAB_SIZE - len(leading) - len(chars), set(leading))
    total = sum(subs[p] for p in pieces)
    scored = sorted(((p, math.log(subs[p] / total)) for p in pieces), key=lambda ps: (-ps[1], ps[0]))
    return models.Unigram([(t, 0.0) for t in leading] + scored, unk_id=leading.index(unk), byte_fallback=False)


def _train_tokenizer(kind_name: str) -> Tokenizer:
    """Train (once per process) and return the ``tokenizers.Tokenizer`` of kind ``kind_name``.

    Byte-level BPE uses the library's trainer, which is deterministic. Its WordPiece and Unigram trainers
    are not (ids and scores change from process to process), so those vocabularies are counted here from
    the corpus, run through the tokenizer's own normalizer and pre-tokenizer, with stable tie-breaking.
    """
    if kind_name in _TOKENIZER_CACHE:
        return _TOKENIZER_CACHE[kind_name]
    kind = _KINDS[kind_name]
    sp = kind.specials
    leading = list(dict.fromkeys(tok for role, tok in sp.items() if not (kind.mask_last and role == "mask")))
    if kind.algorithm == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        if kind.split is not None:
            tok.pre_tokenizer = pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(Regex(kind.split), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                ]
            )
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=_VOCAB_SIZE,
            special_tokens=leading,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(corpus(), trainer=trainer)
    else:
        tok = Tokenizer(models.WordPiece({sp["unk"]: 0}, unk_token=sp["unk"]))  # placeholder until counted
        if kind.algorithm == "wordpiece":
            tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
            tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            tok.decoder = decoders.WordPiece(prefix="##")
        else:
            steps = [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
            if kind_name == "unigram-albert":  # albert-base-v2: quotes, accents stripped, lower-cased
                steps = [
                    normalizers.Replace("``", '"'),
                    normalizers.Replace("''", '"'),
                    normalizers.NFKD(),
                    normalizers.StripAccents(),
                    normalizers.Lowercase(),
                    *steps[1:],
                ]
            tok.normalizer = normalizers.Sequence(steps)
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
            tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
        counts: Counter[str] = Counter()
        for line in corpus():
            counts.update(w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(line)))
        build = _wordpiece_model if kind.algorithm == "wordpiece" else _unigram_model
        tok.model = build(counts, leading, sp["unk"])
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in leading])
    # The mask swallows the space before it, as in the real RoBERTa/XLM-R/MPNet tokenizers.
    lstrip = kind.processor != "bert" if kind.mask_lstrip is None else kind.mask_lstrip
    if "mask" in sp:
        tok.add_special_tokens([AddedToken(sp["mask"], special=True, lstrip=lstrip, normalized=False)])
    sep = (sp["sep"], tok.token_to_id(sp["sep"]))
    cls = (sp["cls"], tok.token_to_id(sp["cls"])) if "cls" in sp else sep
    if kind.processor == "t5":
        tok.post_processor = processors.TemplateProcessing(
            single=f"$A:0 {sep[0]}:0", pair=f"$A:0 {sep[0]}:0 $B:1 {sep[0]}:1", special_tokens=[sep]
        )
    elif kind.processor == "roberta":
        tok.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets=True, add_prefix_space=False)
    elif kind.processor == "xlmr":
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls[0]} $A {sep[0]}", pair=f"{cls[0]} $A {sep[0]} {sep[0]} $B {sep[0]}", special_tokens=[cls, sep]
        )
    else:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls[0]}:0 $A:0 {sep[0]}:0",
            pair=f"{cls[0]}:0 $A:0 {sep[0]}:0 $B:1 {sep[0]}:1",
            special_tokens=[cls, sep],
        )
    _TOKENIZER_CACHE[kind_name] = tok
    return tok


def _make_tokenizer(arch: str, max_length: int) -> PreTrainedTokenizerFast:
    """Wrap the cached tokenizer for ``arch`` with its special tokens, max length and model input names."""
    spec = _ARCHS[arch]
    sp = _KINDS[spec.tokenizer].specials
    inputs = (
        ["input_ids", "token_type_ids", "attention_mask"] if spec.token_type_ids else ["input_ids", "attention_mask"]
    )
    extra = {"bos_token": sp["cls"], "eos_token": sp["sep"]} if sp.get("cls") == "<s>" else {}
    if sp.get("cls") == "<|begin_of_text|>":  # Llama 3 names them bos and eos only, and has no unknown token
        roles = {"bos_token": sp["cls"], "eos_token": sp["sep"]}
    elif "cls" not in sp:  # T5: an end-of-sequence token only
        roles = {"unk_token": sp["unk"], "eos_token": sp["sep"]}
    else:
        roles = {"unk_token": sp["unk"], "cls_token": sp["cls"], "sep_token": sp["sep"], **extra}
    return PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(spec.tokenizer),  # deep-copied, so the cache stays untouched
        pad_token=sp["pad"],
        **({"mask_token": sp["mask"]} if "mask" in sp else {}),
        **roles,
        model_max_length=max_length,
        model_input_names=inputs,
    )


def make_checkpoint(
    arch: str,
    out_dir: Path,
    *,
    task: str = "classification",
    num_labels: int = 3,
    seed: int = 0,
    max_length: int = 64,
    declare_limits: bool = True,
) -> Path:
    """Write a tiny random ``arch`` checkpoint for ``task`` into ``out_dir`` and return ``out_dir``.

    ``task="classification"`` saves ``AutoModelForSequenceClassification`` with ``num_labels`` named labels
    (``label_names``); ``task="embedding"`` saves the bare ``AutoModel`` plus the sentence-transformers files of
    all-MiniLM-L6-v2 (mean pooling, then L2 normalisation). Same arguments give identical weights.
    ``declare_limits=False`` saves the tokenizer as transformers 5 does when nobody declared anything
    (``undeclare_limits``).
    """
    if arch not in _ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHITECTURES + EMBEDDING_ONLY)}")
    if arch in EMBEDDING_ONLY and task != "embedding":
        raise ValueError(f"{arch} checkpoints are built as embedders only")
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if max_length < 8:
        raise ValueError(f"max_length must be >= 8, got {max_length}")
    extra: dict[str, Any] = {}
    if task == "classification":
        names = label_names(num_labels)
        extra = {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
    out_dir = Path(out_dir)
    config = write_tokenizer_and_config(arch, out_dir, max_length, _INITIALIZER_RANGE, **extra)
    if not declare_limits:
        undeclare_limits(out_dir)

    torch.manual_seed(seed)
    auto_cls = AutoModelForSequenceClassification if task == "classification" else _encoder_class(config)
    model = auto_cls.from_config(config).eval()
    model.save_pretrained(out_dir)

    if task == "embedding":
        _write_sentence_transformers_files(out_dir, max_length)
    return out_dir


def _encoder_class(config: Any) -> Any:
    """The bare text encoder of ``config``'s type: T5's encoder alone (as sentence-transformers saves it)."""
    return AutoModelForTextEncoding if type(config) in AutoModelForTextEncoding._model_mapping else AutoModel


def undeclare_limits(out_dir: Path) -> Path:
    """Make ``out_dir``'s tokenizer_config.json declare neither a length nor the model inputs.

    That is what transformers 5 writes for a tokenizer nobody configured: ``model_max_length`` 1e30 and no
    ``model_input_names`` (it then reports ``input_ids`` and ``attention_mask`` only, type ids or not).
    """
    path = Path(out_dir) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["model_max_length"] = int(1e30)
    config.pop("model_input_names", None)
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return Path(out_dir)


def write_tokenizer_and_config(
    arch: str, out_dir: Path, max_length: int, initializer_range: float, **extra: Any
) -> Any:
    """Save the tiny tokenizer for ``arch`` into ``out_dir`` and return a matching model config."""
    spec = _ARCHS[arch]
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _make_tokenizer(arch, max_length)
    tokenizer.save_pretrained(out_dir)
    ids = {role: tokenizer.convert_tokens_to_ids(token) for role, token in _KINDS[spec.tokenizer].specials.items()}
    kwargs: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": HIDDEN_SIZE,
        "max_position_embeddings": max_length + spec.position_offset,
        "initializer_range": initializer_range,
        "pad_token_id": ids["pad"],
        **extra,
        **spec.config,
    }
    if arch == "distilbert":  # DistilBERT names its width `dim` and has no bos/eos ids
        kwargs.pop("hidden_size")
    elif arch == "t5":  # T5 names its width `d_model`, has no position table and no bos id
        kwargs.pop("hidden_size")
        kwargs.pop("max_position_embeddings")
        kwargs.update(n_positions=max_length, eos_token_id=ids["sep"], decoder_start_token_id=ids["pad"])
    else:
        kwargs.update(bos_token_id=ids["cls"], eos_token_id=ids["sep"])
    if arch == "modernbert":
        kwargs.update(cls_token_id=ids["cls"], sep_token_id=ids["sep"])
    if arch == "eurobert":
        kwargs.update(mask_token_id=ids["mask"])
    return AutoConfig.for_model(arch, **kwargs)


def _write_sentence_transformers_files(out_dir: Path, max_length: int) -> None:
    """Write modules.json, 1_Pooling/config.json and sentence_bert_config.json like all-MiniLM-L6-v2."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    pooling = {
        "word_embedding_dimension": HIDDEN_SIZE,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    versions = {
        "__version__": {
            "sentence_transformers": "2.0.0",
            "transformers": transformers.__version__,
            "pytorch": torch.__version__,
        }
    }
    (out_dir / "1_Pooling").mkdir(exist_ok=True)
    for name, payload in [
        ("modules.json", modules),
        ("1_Pooling/config.json", pooling),
        ("sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False}),
        ("config_sentence_transformers.json", versions),
    ]:
        (out_dir / name).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
