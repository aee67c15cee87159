"""Run a selection of the suite several times over and report every test that ever failed.

``make test-repeat [ROUNDS=5] [REPEAT_TESTS="tests/test_x.py ..."]`` runs this: each round is a fresh pytest
session (so every build, export and server is made again), its results written as JUnit XML under ``--out``.
At the end one table lists each test that failed or errored in any round, with the rounds it failed in and the
first line of each failure; the exit status is 1 when there is one, else 0. A test that passes in every round
but one is what this is for: on a 2-core machine a race shows once in many runs.

``python scripts/repeat_tests.py --rounds 5 --out DIR -- [pytest arguments]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Outcomes:
    """Each test's outcome per round: its failures (round, first line) and the rounds it ran in."""

    rounds: int = 0
    ran: dict[str, set[int]] = field(default_factory=dict)
    failed: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def add(self, round_: int, junit: Path) -> tuple[int, int, int]:
        """Read one round's JUnit XML; its (passed, failed, skipped) counts."""
        self.rounds = max(self.rounds, round_)
        counts = [0, 0, 0]
        for case in _cases(junit):
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            problem = case.find("failure") if case.find("failure") is not None else case.find("error")
            if case.find("skipped") is not None and problem is None:
                counts[2] += 1
                continue
            self.ran.setdefault(test, set()).add(round_)
            if problem is None:
                counts[0] += 1
                continue
            counts[1] += 1
            first = (problem.get("message") or problem.text or "").strip().splitlines()
            self.failed.setdefault(test, []).append((round_, (first or ["(no message)"])[0][:200]))
        return counts[0], counts[1], counts[2]

    def report(self) -> list[str]:
        """The table's lines: one per test that ever failed, else one line saying none did."""
        if not self.failed:
            ran = f"{len(self.ran)} test{'s' if len(self.ran) != 1 else ''}"
            return [f"No test failed in {self.rounds} rounds ({ran} ran)."]
        lines = [f"{len(self.failed)} of {len(self.ran)} tests failed in at least one of {self.rounds} rounds:"]
        for test, failures in sorted(self.failed.items()):
            rounds = ", ".join(str(r) for r, _ in failures)
            lines.append(f"- {test}: failed {len(failures)} of {len(self.ran[test])} rounds ({rounds})")
            lines += [f"    round {r}: {message}" for r, message in failures]
        return lines


def _cases(junit: Path) -> Iterable[ET.Element]:
    try:
        return ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        return []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("test_rounds"))
    parser.add_argument("pytest_args", nargs="*", help="after --: the tests and pytest's options")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    outcomes = Outcomes()
    for round_ in range(1, args.rounds + 1):
        junit = args.out / f"round-{round_}.xml"
        junit.unlink(missing_ok=True)
        started = time.monotonic()
        print(f"round {round_} of {args.rounds}: pytest {' '.join(args.pytest_args)}", flush=True)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        with open(args.out / f"round-{round_}.log", "wb") as log:
            code = subprocess.call([*command, *args.pytest_args], stdout=log, stderr=subprocess.STDOUT)
        if not junit.is_file():
            print(f"round {round_}: pytest wrote no results (exit {code}); see {args.out / f'round-{round_}.log'}")
            return 2
        passed, failed, skipped = outcomes.add(round_, junit)
        print(
            f"round {round_} of {args.rounds}: {passed} passed, {failed} failed, {skipped} skipped "
            f"in {time.monotonic() - started:.0f} s",
            flush=True,
        )
    print("\n".join(outcomes.report()))
    return 1 if outcomes.failed else 0


if __name__ == "__main__":
    sys.exit(main())
