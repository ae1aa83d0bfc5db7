"""make test's schedule (tests/schedule.py): every integration module has exactly one place, the phases are the
ones the README describes, and the runner ends lanes past their limit and never closes a failed run on 0 failed.
The runner is exercised with real processes (sleep, true, false), not stand-ins."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests import schedule, times

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
    monkeypatch.delenv("PYTEST_ARGS", raising=False)
    monkeypatch.setenv(times.ENV, str(tmp_path / "kept"))  # never .ci/run's kept directory
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


def test_each_run_keeps_its_times_and_prints_them_beside_the_last_complete_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two real runs of the scheduler (sleep as the lanes' work): the second prints its phases, lanes and the
    first's beside them, and each run's times.json is its own, copied to the kept directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KEEP_GOING", raising=False)
    monkeypatch.delenv("PYTEST_ARGS", raising=False)
    monkeypatch.setattr(schedule, "REPO", tmp_path)
    kept = tmp_path / "kept"
    monkeypatch.setenv(times.ENV, str(kept))

    def two(seconds: str) -> object:
        return lambda kind, args, logs: [_phase(("checks", (("sleep", seconds),))), _phase(("local", (("true",),)))]

    monkeypatch.setattr(schedule, "plan", two("0"))
    assert schedule.main(["test"]) == 0
    first = capsys.readouterr().out
    assert "==== times: no complete earlier run of make test kept" in first
    # The second run starts a second later at least: its log directory and start are its own.
    schedule.time.sleep(1.1)
    monkeypatch.setattr(schedule, "plan", two("1"))
    assert schedule.main(["test"]) == 0
    second = capsys.readouterr().out
    own = sorted((tmp_path / ".test-logs").glob("*/times.json"))
    assert len(own) == 2 and f"==== times in {own[1]}, kept as " in second
    earlier, later = (times.load(p) for p in own)
    assert earlier is not None and later is not None and later.complete and later.started > earlier.started
    assert [lane["name"] for lane in later.lanes] == ["checks", "local"] and later.lanes[0]["seconds"] >= 1
    assert f"==== times beside the run of {earlier.started}" in second
    # The row says what the two files hold (the lanes' seconds vary with the machine's load: the figures are
    # read from the files, not assumed).
    (row,) = [line.split() for line in second.splitlines() if line.startswith("  lane checks ")]
    now, was = later.lanes[0]["seconds"], earlier.lanes[0]["seconds"]
    assert row == ["lane", "checks", f"{now:.0f}", "s", "was", f"{was:.0f}", "s", f"{now - was:+.0f}"], row
    assert sorted(p.name for p in kept.iterdir()) == sorted(
        f"{t.started.replace(':', '')}.json" for t in (earlier, later)
    )


def _times(started: str, **kw: object) -> times.Times:
    base: dict[str, object] = {
        "kind": "test", "started": started, "git": "abc", "cpus": 2, "complete": True,
        "phases": [{"name": "2 test hosts | local", "seconds": 1300.0, "ok": True}],
        "lanes": [{"name": "local", "phase": "2 test hosts | local", "seconds": 1300.0, "ok": True}],
        "modules": {"tests.integration.test_bench": 400.0, "tests.integration.test_knee": 100.0},
    }  # fmt: skip
    return times.Times(**{**base, **kw})  # type: ignore[arg-type]


def test_the_comparison_is_with_the_last_complete_run_of_the_same_kind_and_marks_growth(tmp_path: Path) -> None:
    for name, t in {
        "a.json": _times("2026-12-01T10:00:00+00:00"),
        "b.json": _times("2026-12-02T10:00:00+00:00", modules={"tests.integration.test_bench": 300.0}),
        "c.json": _times("2026-12-03T10:00:00+00:00", complete=False),  # stopped early: says nothing
        "d.json": _times("2026-12-03T11:00:00+00:00", kind="integration"),
        "e.json": _times("2026-12-09T10:00:00+00:00"),  # after this run: not "before" it
    }.items():
        times.write(t, tmp_path / name)
    (tmp_path / "broken.json").write_text("{")
    this = _times(
        "2026-12-05T10:00:00+00:00",
        phases=[{"name": "2 test hosts | local", "seconds": 1290.0, "ok": True}],
        modules={"tests.integration.test_bench": 400.0, "tests.integration.test_diagnose_faults": 280.0},
    )
    found = times.previous(tmp_path, this)
    assert found is not None and found[0].name == "b.json"
    lines = times.compare(this, found[1])
    row = {line.split()[0] if "phase" not in line else "phase": line for line in lines[1:]}
    assert row["tests.integration.test_bench"].endswith("+100  GREW")  # +100 s and +33%
    assert row["phase"].rstrip().endswith("-10")
    assert row["tests.integration.test_diagnose_faults"].endswith("(new)")
    assert times.compare(this, None)[0].startswith("==== times: no complete earlier run")


def _ci_value(name: str) -> int:
    m = re.search(rf"^{name}=(\d+)$", (REPO / ".ci" / "run").read_text(), re.MULTILINE)
    assert m, f".ci/run sets no {name}"
    return int(m.group(1))


def _ci_limits() -> dict[str, int]:
    text = (REPO / ".ci" / "run").read_text()
    return {m[0]: int(m[1]) for m in re.findall(r"^([A-Z]+_LIMIT_S)=(\d+)$", text, re.MULTILINE)}


def test_the_phases_budgets_and_cis_set_up_sum_to_under_its_whole_limit_and_that_to_under_cis_90_minutes(
    tmp_path: Path,
) -> None:
    """The claim that a run cannot pass CI's limit of 90 min (issue 48): .ci/run bounds each step and the whole
    run (CI_LIMIT_S, then KILL_AFTER_S for a stopped step to end), and make test's phase budgets with the set-up
    steps' limits fit inside it."""
    limits = _ci_limits()
    whole, kill_after = limits.pop("CI_LIMIT_S"), _ci_value("KILL_AFTER_S")
    assert whole + kill_after + 60 <= 90 * 60, (whole, kill_after)  # a minute for the closing lines
    assert set(limits) == {"PREREQS_LIMIT_S", "VENV_LIMIT_S", "DOCKERD_LIMIT_S", "CLEAN_LIMIT_S"}
    budgets = sum(schedule.budget(p) for p in schedule.plan("test", [], tmp_path))
    assert budgets + sum(limits.values()) < whole, (budgets, limits, whole)
    # Every step of .ci/run that can take time runs under `step` (timeout(1)), make test last, with the rest.
    steps = re.findall(r"^(?:  if ! )?step (\S+) ", (REPO / ".ci" / "run").read_text(), re.MULTILINE)
    assert steps == ["prereqs", "venv", "dockerd", "clean", "make-test"]


def test_a_lane_gets_what_the_phases_before_left_of_their_budgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(schedule.LANE_LIMIT_S, "local", 1)
    (run,) = schedule.run_phase(_phase(("local", (("sleep", "3"),))), [], tmp_path, [], carried=10)
    assert schedule._passed(run, []), run.why  # 3 s: past its own 1 s, within the 10 s carried
    (run,) = schedule.run_phase(_phase(("local", (("sleep", "30"),))), [], tmp_path, [], carried=2)
    assert not schedule._passed(run, []) and "limit of 3 s (1 s its own, 2 s left by the phases before)" in run.why
