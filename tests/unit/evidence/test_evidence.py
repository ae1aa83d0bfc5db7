"""A window whose vLLM died or was replaced: the serving container before and after (serving.evidence.continuity), what
a capture cut short leaves (probes.capture.cutshort), the bounds on the probe containers and py-spy without pauses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from probes.capture import cutshort
from probes.readers import stacks
from serving.evidence.continuity import serving_change
from serving.evidence.probe_plan import capture_timeout_s, probe_io_timeout_s


def _container(cid: str = "a" * 64, restarts: int = 0, pid: int = 4242, status: str = "running") -> dict[str, Any]:
    return {
        "Id": cid,
        "RestartCount": restarts,
        "State": {"Status": status, "Pid": pid, "StartedAt": f"2026-12-01T13:{pid % 60:02d}:00Z", "ExitCode": 0},
    }


def test_a_container_that_ran_throughout_is_unchanged() -> None:
    c = serving_change(_container(), _container(), "refdeploy-vllm")
    assert c["changed"] is False
    assert c["line"].startswith("refdeploy-vllm ran throughout: aaaaaaaaaaaa running, restarts 0, pid 4242")


def test_a_restart_by_the_policy_is_stated_with_the_count_and_the_pid() -> None:
    c = serving_change(_container(), _container(restarts=1, pid=5151), "refdeploy-vllm")
    assert c["changed"] is True
    assert c["before"]["restart_count"] == 0 and c["after"]["restart_count"] == 1
    assert "refdeploy-vllm died or was replaced in the window: restarts 0 -> 1; started" in c["line"]
    assert "(pid 4242) -> " in c["line"] and "(pid 5151)" in c["line"]


def test_an_oom_kill_is_the_windows_only_where_the_container_exited_in_it() -> None:
    """Docker keeps State.OOMKilled true after the restart policy restarted an OOM-killed container: a capture
    after that once said "died or was replaced in the window: OOM-killed" of a container that ran throughout
    (same pid, same restart count; 2026-12-06)."""
    killed_before = {**_container(restarts=1), "State": {**_container(restarts=1)["State"], "OOMKilled": True}}
    c = serving_change(killed_before, killed_before, "refdeploy-vllm")
    assert c["changed"] is False and c["line"].startswith("refdeploy-vllm ran throughout")
    killed_now = {**_container(restarts=2, pid=5151), "State": {**_container(pid=5151)["State"], "OOMKilled": True}}
    c = serving_change(_container(restarts=1), killed_now, "refdeploy-vllm")
    assert c["changed"] is True and c["line"].split(" (before")[0].endswith("; OOM-killed")


def test_a_manual_restart_keeps_the_count_but_not_the_pid() -> None:
    c = serving_change(_container(), _container(pid=77))
    assert c["changed"] is True and "restarts" not in c["line"].split("(before")[0]


def test_a_replaced_or_vanished_or_dead_container_is_a_change() -> None:
    replaced = serving_change(_container(), _container(cid="b" * 64, pid=9))
    assert "replaced: container aaaaaaaaaaaa -> bbbbbbbbbbbb" in replaced["line"]
    assert serving_change(_container(), None)["line"].startswith(
        "the serving container died or was replaced in the window: present -> absent"
    )
    exited = _container()
    exited["State"].update(Status="exited", Pid=0, ExitCode=137)
    dead = serving_change(_container(), exited)
    assert dead["line"].startswith(
        "the serving container died or was replaced in the window: state running -> exited ("
    )
    still_restarting = serving_change(_container(status="restarting"), _container(status="restarting"))
    assert still_restarting["changed"] is True


def test_no_container_before_or_after_is_no_change_and_one_that_came_up_is() -> None:
    """make probe-io runs where nothing serves: nothing died in its window, and the line says nothing ran."""
    none = serving_change(None, None, "refdeploy-vllm")
    assert none["changed"] is False and none["line"] == "refdeploy-vllm did not run before or after"
    assert serving_change(None, _container())["line"].startswith(
        "the serving container died or was replaced in the window: absent -> present"
    )


def test_a_capture_cut_short_is_indexed_from_the_files_it_left(tmp_path: Path) -> None:
    b = tmp_path / "capture"
    (b / "samplers").mkdir(parents=True)
    (b / "samplers" / "vmstat.log").write_text("1.0 x 1\n")
    (b / "metrics" / "scrapes").mkdir(parents=True)
    (b / "metrics" / "before.prom").write_text("")
    (b / "metrics" / "scrapes" / "0000.prom").write_text("")
    (b / "stacks").mkdir()
    (b / "stacks" / "dump-01-api_server-1.json").write_text("[]")
    window = {"start_wall": "2026-12-01T13:00:00+00:00", "start_mono_s": 12.5}
    started = {"requested_parts": ["samplers", "metrics", "stacks", "perf"], "window": window, "processes": []}
    (b / cutshort.STARTED).write_text(json.dumps(started))
    change = serving_change(_container(), _container(restarts=1, pid=5151), "refdeploy-vllm")
    idx = cutshort.write(b, 137, change["line"], change)
    assert idx["complete"] is False
    assert idx["cut_short"]["meaning"].startswith("the probe container was killed (SIGKILL): vLLM's PID namespace")
    assert idx["parts"]["samplers"] == {
        "status": "failed",
        "reason": f"cut short: {change['line']}; kept 1 file(s) it had written",
        "files": ["samplers/vmstat.log"],
    }
    assert idx["parts"]["metrics"]["files"] == ["metrics/before.prom", "metrics/scrapes/0000.prom"]
    assert idx["parts"]["perf"]["files"] == [] and idx["parts"]["perf"]["status"] == "failed"
    assert idx["parts"]["hoststate"]["status"] == "skipped"
    text = (b / "summary.txt").read_text()
    assert text.splitlines()[0] == f"CAPTURE CUT SHORT (probe container exit 137): {change['line']}"
    assert "window opened 2026-12-01T13:00:00+00:00" in text
    assert json.loads((b / "bundle.json").read_text()) == idx


def test_a_cut_short_capture_without_its_start_file_names_parts_from_its_directories(tmp_path: Path) -> None:
    (tmp_path / "host-state" / "before").mkdir(parents=True)
    (tmp_path / "host-state" / "before" / "host-state.json").write_text("{}")
    idx = cutshort.index(tmp_path, 124, "ran past its bound", None)
    assert idx["requested_parts"] == ["hoststate"]
    assert idx["cut_short"]["meaning"] == "the capture ran past its bound and was stopped (timeout)"


def test_a_capture_its_container_refused_is_indexed_as_refused(tmp_path: Path) -> None:
    """The capture container refuses its input before it writes anything (exit 2), after the run directory was
    made: the fetched, empty bundle gets bundle.json and summary.txt saying what was refused (issue 46), where it
    held nothing before, serving-container.json beside it."""
    bundle = tmp_path / "capture"
    why = "the capture refused its input: --data-file /d/x: not a regular file (mount the served files read-only)"
    idx = cutshort.write(bundle, 2, why, None)
    assert idx["complete"] is False and idx["requested_parts"] == []
    assert idx["cut_short"] == {"exit_code": 2, "why": why,
                                "meaning": "the probe container exited 2 before writing its bundle"}  # fmt: skip
    assert json.loads((bundle / "bundle.json").read_text()) == idx
    assert (bundle / "summary.txt").read_text().splitlines()[0] == f"CAPTURE CUT SHORT (probe container exit 2): {why}"


def test_probe_containers_are_bounded_by_their_own_work_and_a_margin() -> None:
    assert capture_timeout_s(20) == 320 and capture_timeout_s(20, 30) == 350
    # probes.io.probe bounds each fio run at runtime + 60 s: the container outlasts every depth's own bound.
    assert probe_io_timeout_s(10, 2) == 2 * 70 + 60


def test_py_spy_dumps_do_not_pause_the_engine() -> None:
    assert stacks.dump_argv(42) == ["py-spy", "dump", "--pid", "42", "--json", "--nonblocking"]
