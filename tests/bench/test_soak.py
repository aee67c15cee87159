"""The soak: outcome sorting, stub attribution and the leak rule alone; then a 20-second soak of a real server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.builds import native_backend
from tritongen.bench.soak import KINDS, LeakRule, SoakInterval, SoakReport, SoakSettings, _classify, run_soak
from tritongen.serve.server import running_server


class _Refused(Exception):
    def status(self) -> str:
        return "StatusCode.INVALID_ARGUMENT"


class _Unavailable(Exception):
    def status(self) -> str:
        return "StatusCode.UNAVAILABLE"


def test_classify_counts_refusals_only_where_a_refusal_is_right():
    assert _classify("short", None) == ("ok", None)
    assert _classify("invalid_utf8", _Refused()) == ("refused", None)
    assert _classify("empty", _Refused()) == ("refused", None)
    assert _classify("empty", None) == ("ok", None)
    assert _classify("short", _Refused()) == ("error", "short: INVALID_ARGUMENT")
    assert _classify("malformed", None) == ("error", "malformed: bad request answered")
    assert _classify("long", _Unavailable()) == ("error", "long: UNAVAILABLE")
    assert _classify("batched", TimeoutError()) == ("error", "batched: TimeoutError")


def _interval(index: int, **memory: float) -> SoakInterval:
    return SoakInterval(index, 1.0, 1, {"ok": 1}, {}, 1.0, 1.0, memory)


def test_leaks_flag_growth_over_the_second_half_beyond_both_bounds():
    memory = [(100, 100), (300, 100), (500, 100), (510, 150), (512, 300)]
    intervals = [_interval(i + 1, a=a, b=b) for i, (a, b) in enumerate(memory)]
    # `a` grows 412 MiB in the first half (an arena meeting bigger batches) and is flat after; `b` keeps growing
    assert LeakRule(1, 64, 0.2).leaks(intervals) == {"b": "100 -> 300 MiB"}
    assert LeakRule(1, 256, 0.2).leaks(intervals) == {}
    assert LeakRule(1, 64, 0.2).leaks(intervals[:1]) == {}


def test_report_adds_the_intervals_outcomes_and_errors_key_by_key():
    first = SoakInterval(1, 1.0, 5, {"ok": 4, "refused": 1}, {}, 1.0, 1.0, {})
    unavailable = {"short: UNAVAILABLE": 2, "long: UNAVAILABLE": 1}
    second = SoakInterval(2, 1.0, 5, {"ok": 2, "error": 3}, unavailable, 1.0, 1.0, {})
    third = SoakInterval(3, 1.0, 1, {"error": 1}, {"short: UNAVAILABLE": 1}, None, None, {})
    report = SoakReport("cls", 2, [first, second, third])
    assert dict(report.totals) == {"ok": 6, "refused": 1, "error": 4}
    assert dict(report.errors) == {"short: UNAVAILABLE": 3, "long: UNAVAILABLE": 1}
    assert "11 requests: 6 ok, 1 refused as expected, 4 errors" in report.to_markdown()


@pytest.fixture(scope="module")
def served(tiny_factory, builds, tmp_path_factory):
    # Its own server: the leak rule reads the memory of this server's processes alone.
    repo = builds.repository(builds(tiny_factory("bert"), "cls"), into=tmp_path_factory.mktemp("soak") / "repo")
    with running_server(repo) as server:
        yield server


@pytest.mark.e2e
def test_twenty_seconds_of_mixed_traffic_have_no_errors_and_no_leak(served):
    """Every request kind at concurrency 32, sorted and attributed, memory read per process every 5 s.

    Twenty seconds is four intervals: the warm-up one, and a second half of two that the leak rule compares.
    That proves the harness end to end and that mixed traffic (bad requests included) makes no error; a slow
    leak needs the operator's `make soak` of minutes, and the leak rule itself is proven on figures above.
    """
    settings = SoakSettings(minutes=20 / 60, concurrency=32, interval_s=5)
    report = run_soak("cls", grpc_port=served.endpoints.grpc_port, settings=settings)
    totals = report.totals
    assert report.errors == {}, report.to_markdown()
    assert totals["ok"] > len(KINDS) and totals["refused"] > 0, report.to_markdown()
    memory = report.intervals[-1].memory_mib
    stubs = {"cls_tokenizer", "cls_postprocess"} | (set() if native_backend() else {"cls_model"})
    assert {"tritonserver", *stubs} <= set(memory), memory
    assert report.leaks == {}, report.to_markdown()


@pytest.mark.e2e
def test_soak_command_writes_its_report(served, tmp_path):
    command = [
        sys.executable, "-m", "tritongen", "soak", "--name", "cls", "--minutes", "0.1", "--interval", "3",
        "--concurrency", "4", "--grpc-port", str(served.endpoints.grpc_port), "--output", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "errors" in result.stdout and (tmp_path / "cls" / "soak.md").is_file()
    assert "| interval |" in (tmp_path / "cls" / "soak.md").read_text()
