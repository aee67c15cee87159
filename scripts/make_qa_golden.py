"""Write ``tests/assets/qa/golden.json``: the transformers 4.57 question-answering pipeline's answers.

transformers 5 has no ``QuestionAnsweringPipeline``; ``tritongen/tasks/question_answering/qa.py`` re-implements it and
``tests/tasks/test_qa_decode.py`` checks it against the answers recorded here. Run this with a Python that has
transformers 4.57 (not the project venv), e.g.::

    python3 -m venv /tmp/qa_v4_venv
    /tmp/qa_v4_venv/bin/pip install torch==2.13.0 'transformers==4.57.*' 'numpy<2'
    /tmp/qa_v4_venv/bin/python scripts/make_qa_golden.py

For every checkpoint in ``tests/assets/qa/<arch>/`` (built by ``scripts/make_qa_checkpoints.py``) it runs
``pipeline("question-answering")`` on a fixed list of (question, context) pairs under several settings and
records inputs, settings and outputs. The output depends only on the committed checkpoints.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
import transformers
from transformers import AutoTokenizer, pipeline

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / "assets" / "qa"
ARCHS = ("bert", "roberta", "xlm-roberta", "albert")

# name -> keyword arguments of the pipeline call (v4 names)
SETTINGS: dict[str, dict] = {
    "defaults": {},
    "short_windows": {"max_seq_len": 64, "doc_stride": 16},
    "top_k_3": {"top_k": 3},
    "impossible": {"handle_impossible_answer": True},
    "short_windows_top_k_5_impossible": {
        "max_seq_len": 64,
        "doc_stride": 16,
        "top_k": 5,
        "handle_impossible_answer": True,
    },
    "no_align_top_k_2": {"align_to_words": False, "top_k": 2},
    "max_answer_len_3_top_k_2": {"max_answer_len": 3, "top_k": 2},
}

_WORDS = (
    "the river city market station airport ticket budget meeting letter doctor teacher student engineer "
    "pilot driver singer price quality delivery battery screen camera window kitchen garden mountain "
    "unbelievably internationalisation hyperparameter photosynthesis extraordinary misunderstanding "
    "café naïveté façade jalapeño piñata smörgåsbord über déjà São Paulo Zoë Köln Straße "
    "東京 北京の夜 ラーメン 寿司 Привет Москва Γειά 🙂 😀 🎉 🚀 👍🏽 42 3.14 10:30 e-mail"
).split()


def _long_context(seed: int, words: int) -> str:
    rng = random.Random(seed)
    sentences, count = [], 0
    while count < words:
        n = rng.randint(6, 16)
        sentence = " ".join(rng.choice(_WORDS) for _ in range(n))
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".!?,;"))
        count += n
    return " ".join(sentences)


LONG = (
    "Zoë was born in São Paulo in 1987 and moved to Köln when she was twelve. "
    + _long_context(7, 420)
    + " In the end, the budget meeting was moved to the airport station at 10:30 am, and Zoë paid 42 euros."
)

COMMON_CASES: list[dict[str, str]] = [
    {"question": "Where do I live?", "context": "My name is Wolfgang and I live in Berlin."},
    {"question": "What does the cat love?", "context": "The cat loves fresh coffee today."},
    {"question": "Who?", "context": "Zoë"},
    {
        "question": "Where did Zoë eat crème brûlée?",
        "context": "Zoë ate crème brûlée at the old café in São Paulo with jalapeño and a piñata, naïvely.",
    },
    {
        "question": "Where is the station?",
        "context": "東京の学生 loves 北京の夜. The station is near 大阪 and 上海 ラーメン 寿司.",
    },
    {"question": "Как дела?", "context": "Привет, как дела? Всё хорошо, спасибо. Москва — столица России."},
    {
        "question": "What did the team send? 🚀",
        "context": "The team 👍🏽 sent the new phone 📱 and pizza 🍕 🎉 to the family 👨‍👩‍👧 — honestly 😀!",
    },
    {"question": "Which word?", "context": "  Leading   and   trailing   spaces, tabs\tand\nnewlines  "},
    {"question": "What is [CLS] <s> here?", "context": "The [CLS] token and the <s> token appear [SEP] here </s> too."},
    {"question": "Nothing?", "context": "   "},
    {"question": "When did Zoë pay, and how much?", "context": LONG},
    {"question": "Where was Zoë born?", "context": LONG[: len(LONG) // 3]},
    # One sentence with accented words and an emoji (the case that exposed dropped token type ids).
    {"question": "What is this?", "context": "This is a crème brûlée from the café in Zürich 🍮, très délicieuse."},
]
# Several questions about each context: accents (precomposed and combining), emoji sequences, mixed case.
_MULTI = {
    "Ame\u0301lie Poulain and Zoe\u0308 Saldaña opened a CAFÉ in Malmö 🇸🇪 in 2019; "
    "the café serves crème brûlée, jalapeño piñatas and smörgåsbord to 👩🏽\u200d🍳 chefs.": (
        "Who opened the café?",
        "Where is the CAFÉ?",
        "When did they open it?",
        "What does the café serve?",
        "WHO ARE THE CHEFS? 👩🏽\u200d🍳",
    ),
    "The naïve résumé of Søren Kierkegaard lists Ørsted, Åland and São Tomé; "
    "its façade 🏛️ is dated 1843 — déjà vu for the coöperative.": (
        "Whose résumé is it?",
        "What year is the façade dated?",
        "Which places does it list?",
        "resume?",
    ),
}
COMMON_CASES += [{"question": q, "context": c} for c, questions in _MULTI.items() for q in questions]


def _boundary_cases(tokenizer, question: str, text: str, sizes: tuple[int, ...]) -> list[dict[str, str]]:
    """Contexts (word prefixes of ``text``) whose pair with ``question`` is just under/at/over each size."""
    words = text.split(" ")
    lengths = [len(tokenizer(question, " ".join(words[:n])).input_ids) for n in range(1, len(words) + 1)]
    cases = []
    for size in sizes:
        fits = max(n for n, length in enumerate(lengths, 1) if length <= size)
        for n in (fits, fits + 1, fits + 2):  # at (or just under) the window, and one/two words over it
            cases.append({"question": question, "context": " ".join(words[:n])})
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ASSETS / "golden.json")
    args = parser.parse_args()
    if not transformers.__version__.startswith("4.57."):
        sys.exit(f"needs transformers 4.57.x (it has the QA pipeline), found {transformers.__version__}")
    torch.manual_seed(0)
    torch.set_num_threads(1)

    golden: dict = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "settings": SETTINGS,
        "checkpoints": {},
    }
    for arch in ARCHS:
        path = ASSETS / arch
        tokenizer = AutoTokenizer.from_pretrained(path)
        qa = pipeline("question-answering", model=str(path), tokenizer=tokenizer, device="cpu")
        cases = COMMON_CASES + _boundary_cases(
            tokenizer, "Where did the meeting move?", LONG, (64, tokenizer.model_max_length)
        )
        outputs: dict[str, list] = {}
        for name, kwargs in SETTINGS.items():
            outputs[name] = [qa(question=case["question"], context=case["context"], **kwargs) for case in cases]
        golden["checkpoints"][arch] = {
            "model_max_length": tokenizer.model_max_length,
            "cases": cases,
            "outputs": outputs,
        }
        print(f"{arch}: {len(cases)} cases x {len(SETTINGS)} settings", file=sys.stderr)

    args.out.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
