"""How a test run's groups filled its workers: ``python scripts/test_timeline.py TIMELINE``.

TIMELINE is the file a run wrote with ``TRITONGEN_TEST_TIMELINE=TIMELINE make test``. Prints each worker's busy
time and when it finished, then the groups by their seconds, each with its worker and when it ran (seconds from
the first test's start).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--groups", type=int, default=15, help="how many of the longest groups to list")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.timeline.read_text().splitlines() if line.strip()]
    zero = min(r["start"] for r in rows)
    workers: dict[str, list[dict]] = defaultdict(list)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        workers[row["worker"]].append(row)
        groups[(row["group"], row["worker"])].append(row)
    end = max(r["end"] for r in rows) - zero
    print(f"{len(rows)} tests in {end:.0f} s on {len(workers)} workers")
    for worker, ran in sorted(workers.items()):
        busy = sum(r["end"] - r["start"] for r in ran)
        last = max(r["end"] for r in ran) - zero
        print(f"  {worker}: busy {busy:.0f} s, finished at {last:.0f} s ({end - last:.0f} s before the end)")
    print("groups, longest first: seconds, worker, from-to")
    seconds = {key: sum(r["end"] - r["start"] for r in ran) for key, ran in groups.items()}
    for group, worker in sorted(groups, key=lambda key: -seconds[key])[: args.groups]:
        ran = groups[group, worker]
        first, last = min(r["start"] for r in ran) - zero, max(r["end"] for r in ran) - zero
        print(f"  {seconds[group, worker]:6.0f}  {worker}  {first:5.0f}-{last:5.0f}  {group} ({len(ran)} tests)")


if __name__ == "__main__":
    main()
