"""make test's schedule (tests/schedule.py): every integration module has exactly one place, the phases are the
ones the README describes, and the runner ends lanes past their limit and never closes a failed run on 0 failed.
The runner is exercised with real processes (sleep, true, false), not stand-ins."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import schedule

REPO = Path(__file__).resolve().parents[3]


def _integration_modules() -> set[str]:
    it = REPO / "tests" / "integration"
    found = {f"tests/integration/{p.name}" for p in it.glob("test_*.py")}
    found |= {f"tests/integration/{p.name}" for p in it.iterdir() if p.is_dir() and p.name.startswith("test_")}
    return found


def test_every_integration_module_is_in_exactly_one_place() -> None:
    placed = [*schedule.TEST_HOSTS, *schedule.LOCAL, *schedule.STATISTICAL, *schedule.OPT_IN]
    assert len(placed) == len(set(placed)), "a module is scheduled twice"
    assert set(placed) == _integration_modules(), "a module is in no phase, or a scheduled one does not exist"


def test_make_test_is_checks_beside_images_then_two_lanes_then_the_statistical_alone(tmp_path: Path) -> None:
    phases = schedule.plan("test", [], tmp_path)
    assert [[lane.name for lane in p.lanes] for p in phases] == [
        ["checks", "images"],
        ["test hosts", "local"],
        ["statistical"],
    ]
    lint, unit = phases[0].lanes[0].steps
    assert lint[-1] == "lint" and unit[unit.index("-m") + 1] == "not integration"
    assert all(m not in step for m in schedule.OPT_IN for p in phases for lane in p.lanes for step in lane.steps)
    # An experiment inside a scheduled package is left out of its lane by name, and exists.
    hosts_step = phases[1].lanes[0].steps[0]
    assert all(f"--ignore={m}" in hosts_step and (REPO / m).is_file() for m in schedule.EXPERIMENTS)
    integration = schedule.plan("integration", ["-x"], tmp_path)
    assert [p.lanes[0].name for p in integration] == ["images", "test hosts", "statistical"]
    assert all("-x" in lane.steps[0] for p in integration[1:] for lane in p.lanes)


def _phase(*lanes: tuple[str, tuple[tuple[str, ...], ...]]) -> schedule.Phase:
    return schedule.Phase("t", tuple(schedule.Lane(name, steps) for name, steps in lanes))


def test_a_lane_past_its_limit_is_stopped_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(schedule.LANE_LIMIT_S, "local", 1)
    monkeypatch.setitem(schedule.LANE_LIMIT_S, "test hosts", 30)
    phase = _phase(("local", (("sleep", "60"),)), ("test hosts", (("true",), ("true",))))
    runs = schedule.run_phase(phase, [], tmp_path, [])
    slow, quick = runs
    assert slow.ended - slow.started < 20 and not schedule._passed(slow, [])
    assert "limit of 1 s" in slow.why and "FAILED" in capsys.readouterr().out
    assert schedule._passed(quick, []) and quick.step == 1  # both steps ran


def test_a_failed_step_ends_its_lane(tmp_path: Path) -> None:
    (run,) = schedule.run_phase(_phase(("local", (("false",), ("true",)))), [], tmp_path, [])
    assert run.rc == 1 and run.step == 0


def test_exit_5_passes_only_where_pytest_args_narrowed_the_selection(tmp_path: Path) -> None:
    five = (sys.executable, "-c", "raise SystemExit(5)")
    lane = schedule.Lane("local", ((str(schedule.BIN / "pytest"), *five[1:]),))
    run = schedule.Running(lane, tmp_path / "l.log", 0.0, rc=5)
    assert schedule._passed(run, ["-k", "manifest"]) and not schedule._passed(run, [])


def test_the_closing_line_counts_a_failure_outside_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KEEP_GOING", raising=False)  # a make test run with KEEP_GOING=1 around this one
    monkeypatch.setattr(schedule, "REPO", tmp_path)
    monkeypatch.setattr(
        schedule,
        "plan",
        lambda kind, args, logs: [_phase(("checks", (("false",),))), _phase(("local", (("true",),)))],
    )
    assert schedule.main(["test"]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "test: 0 passed, 1 failed, 0 skipped"
    assert "the phases after it are not run" in out and "phase t" in out


def test_junit_counts_and_module_times(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_deploy" name="a" time="10.5"/>'
        '<testcase classname="tests.integration.test_deploy" name="b" time="1.5"><failure message="x"/></testcase>'
        '<testcase classname="tests.unit.plan.test_plan" name="c" time="0.1"><skipped message="y"/></testcase>'
        '<testcase classname="tests.unit.plan.test_plan" name="d" time="0.2"><error message="z"/></testcase>'
        "</testsuite></testsuites>"
    )
    counts, modules = schedule.junit_counts([tmp_path / "a.xml", tmp_path / "missing.xml"])
    assert counts == {"passed": 1, "failed": 2, "skipped": 1}
    assert modules == pytest.approx({"tests.integration.test_deploy": 12.0, "tests.unit.plan.test_plan": 0.3})
