"""A bench that measured nothing valid (issue 46 item 6): every run completed, but every measured run was left out of
its point's pool by the validity rules (serving/bench/runs.py summarize_run), so no figure stands. Its summary says
`invalid` with each left-out run and why, its report says it, `refdeploy bench-report` exits 1 and the bench role's
outcome (report_bench) is not ok, which stops the play: make bench exits non-zero.

Real bench directories (tests/helpers/bench_dirs.py: `vllm bench serve` results), a run made invalid the way a real
one is (an output length mismatch), and the real report writer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from serving.bench import cli as bench_cli
from serving.bench import report as bench_report
from serving.bench.summary import INVALID, nothing_valid
from tests.helpers.bench_dirs import bench_dir, flag

MEASURED = ("c1-m1", "c1-m2", "c4-m1", "c4-m2")


def _settings() -> dict[str, object]:
    return {"host": "gpu1", "client_rc": 0, "timeout_s": 60, "change": {}}


def test_every_measured_run_left_out_is_invalid_naming_each_and_why(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    for run_id in MEASURED:
        flag(d, run_id)
    out = bench_report.report_bench(d, _settings())
    summary = json.loads((d / bench_report.SUMMARY_JSON).read_text())
    assert summary["status"] == INVALID
    assert summary["reason"].startswith("every measured run was left out (4), so no figure stands: c1-m1: ")
    for run_id in MEASURED:
        assert f"{run_id}: output length mismatch" in summary["reason"], summary["reason"]
    # The printed report and the line the play stops on say it.
    assert f"status: INVALID: {summary['reason']}" in out["lines"]
    assert out["ok"] is False
    assert out["line"].startswith("the bench on gpu1 measured NOTHING VALID: every measured run was left out (4)")
    assert out["line"].endswith(f"; partial data kept in {d}/")


def test_one_valid_run_anywhere_keeps_the_bench_ok(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    for run_id in ("c1-m1", "c1-m2", "c4-m1"):
        flag(d, run_id)
    out = bench_report.report_bench(d, _settings())
    summary = json.loads((d / bench_report.SUMMARY_JSON).read_text())
    assert (summary["status"], summary["reason"], out["ok"]) == ("ok", "", True)
    # The point with none is still named in its own left_out; the bench measured c4-m2.
    assert [p["runs_valid"] for p in summary["points"]] == [0, 1]


def test_a_flagged_warm_up_does_not_count(tmp_path: Path) -> None:
    """Warm-ups are never pooled: flagging them leaves a bench whose measured runs are valid ok."""
    d = bench_dir(tmp_path)
    warmups = [p.name for p in (d / "runs").iterdir() if "-w" in p.name]
    assert warmups, sorted(p.name for p in (d / "runs").iterdir())
    for run_id in warmups:
        flag(d, run_id)
    assert bench_report.report_bench(d, _settings())["ok"] is True


def test_a_failed_run_stays_failed_not_invalid(tmp_path: Path) -> None:
    """A run that did not complete is a failure of the bench, said as before; invalid is for runs that all ran."""
    d = bench_dir(tmp_path)
    for run_id in MEASURED:
        flag(d, run_id)
    status = d / "runs" / "c1-m1" / "status.json"
    status.write_text(json.dumps({**json.loads(status.read_text()), "status": "failed", "reason": "exit 1"}))
    out = bench_report.report_bench(d, _settings())
    summary = json.loads((d / bench_report.SUMMARY_JSON).read_text())
    assert summary["status"] == "failed"
    assert " FAILED" in out["line"] and "NOTHING VALID" not in out["line"]


def test_bench_report_exits_1_and_says_nothing_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = bench_dir(tmp_path)
    for run_id in MEASURED:
        flag(d, run_id)
    assert bench_cli.cmd_bench_report(argparse.Namespace(bench_dir=str(d))) == 1
    err = capsys.readouterr().err
    assert err.startswith("bench measured NOTHING VALID: every measured run was left out (4)"), err


def test_nothing_valid_needs_a_measured_run() -> None:
    """A bench with no measured run at any point (a knee search judged apart) is not called invalid here."""
    none = {"runs": 0, "runs_valid": 0, "left_out": []}
    assert nothing_valid([]) == ""
    assert nothing_valid([{"point": "c1", **none}]) == ""
    left = {"point": "c1", "runs": 2, "runs_valid": 0, "left_out": ["c1-m1: a", "c1-m2: b"]}
    assert nothing_valid([left, {"point": "c4", **none}]) == (
        "every measured run was left out (2), so no figure stands: c1-m1: a; c1-m2: b"
    )
    assert nothing_valid([left, {"point": "c4", "runs": 1, "runs_valid": 1, "left_out": []}]) == ""
