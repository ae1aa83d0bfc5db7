"""Progress in a real ansible-playbook run. The callback (ansible/callback_plugins/refdeploy_progress.py): a task
that runs past the interval gets a line per interval, with what is left of its bound; a quick one none. The
refdeploy_watch action (ansible/action_plugins/refdeploy_watch.py): a long command's own progress lines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from serving.bridge.progress import MARK
from tests.helpers.ansible_run import run_playbook, run_tasks

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.timing(
    margin=(
        "a 3.5 s task and a line a second: 3 numbered lines, 2 needed (its count bounded at 4 had 1.3 in the "
        "CI-like run of 2026-12-04)"
    )
)
def test_a_long_task_says_it_is_still_running_and_a_quick_one_says_nothing(tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: Quick\n      ansible.builtin.command: {argv: ['true']}\n"
        "    - name: Wait a while\n      ansible.builtin.command: {argv: [sleep, '3.5']}\n      timeout: 30\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "ansible" / "callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "refdeploy_progress",
        "ANSIBLE_NOCOLOR": "1",
        "REFDEPLOY_PROGRESS_S": "1",
    }
    cp = run_playbook(play, env)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    lines = re.findall(r"^\s+\.\.\. (.*)$", cp.stdout, re.M)
    assert lines and all(ln.startswith("Wait a while: ") for ln in lines), cp.stdout
    # One line a second, numbered by the seconds: how many depends on how long the task took on a loaded machine
    # (a count bounded at 4 had a margin of 1.3 in CI), their numbering does not.
    assert len(lines) >= 2, lines
    assert lines[0] == "Wait a while: 1 s so far (at most 29 s more)", lines
    assert [ln.split(" s so far")[0] for ln in lines] == [f"Wait a while: {i}" for i in range(1, len(lines) + 1)]


def _play(tmp_path: Path, tasks: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "scratch").mkdir()
    # TMPDIR: where the plugin's scratch directory goes (mktemp)
    return run_tasks(tmp_path, tasks, "refdeploy_progress", REFDEPLOY_PROGRESS_S="1", TMPDIR=str(tmp_path / "scratch"))


@pytest.mark.timing(margin="a tick a second in a 2.5 s phase: 2.5, by design (line counts not recorded)")
def test_a_watched_command_says_what_it_is_doing_and_returns_what_the_command_module_would(tmp_path: Path) -> None:
    script = (
        f"echo '{MARK}run 1 of 2' >&2; sleep 2.5; echo '{MARK}run 2 of 2' >&2; sleep 2.5; "
        "echo out; echo err >&2; exit 3"
    )
    cp = _play(
        tmp_path,
        "    - name: Watch | Run two runs\n"
        f"      refdeploy_watch: {{argv: [sh, -c, {json.dumps(script)}], timeout_s: 30, progress: marked}}\n"
        "      register: r\n      failed_when: false\n"
        f"    - ansible.builtin.copy: {{content: '{{{{ r | to_json }}}}', dest: {tmp_path}/r.json, mode: '0644'}}\n",
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    lines = re.findall(r"^\s+\.\.\. (Watch .*)$", cp.stdout, re.M)
    # Only the plugin's own lines: the callback leaves a watched task to it.
    assert lines and all(ln.startswith("Watch | Run two runs: run ") for ln in lines), cp.stdout
    assert any(ln.startswith("Watch | Run two runs: run 1 of 2 (") for ln in lines), lines
    assert re.fullmatch(r"Watch \| Run two runs: run 2 of 2 \(\d+ s so far, at most \d+ s more\)", lines[-1]), lines
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["rc"], r["stdout"], r["stderr"], r["stderr_lines"]) == (3, "out", "err", ["err"])
    assert r["msg"] == "sh exited 3" and r["changed"] is True
    assert not list((tmp_path / "scratch").glob("refdeploy-watch.*")), "the scratch directory was left on the host"


@pytest.mark.timing(margin="a tick at 1 s before the 2 s bound: 2, by design")
def test_a_watched_command_past_its_bound_exits_124_and_an_interrupted_one_is_stopped(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    cp = _play(
        tmp_path,
        "    - name: Watch | Run past the bound\n"
        "      refdeploy_watch: {argv: [sleep, '30'], timeout_s: 2}\n"
        "      register: t\n      failed_when: false\n"
        "    - ansible.builtin.assert: {that: ['t.rc == 124', \"'past its bound of 2 s' in t.msg\"]}\n"
        # The task's own timeout interrupts the plugin while the command runs: the command must not outlive it.
        "    - name: Watch | Run until the task's timeout\n"
        f"      refdeploy_watch: {{argv: [sh, -c, 'echo $$ > {pidfile}; exec sleep 60'], timeout_s: 120}}\n"
        "      timeout: 3\n      ignore_errors: true\n",
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert re.search(
        r"^      \.\.\. Watch \| Run past the bound: \d+ s so far \(at most \d+ s more\)$", cp.stdout, re.M
    )
    pid = int(pidfile.read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), f"the interrupted command (pid {pid}) still runs"


def test_the_tasks_environment_reaches_a_watched_command_and_its_output_comes_back_exactly(tmp_path: Path) -> None:
    # Bytes a shell would mangle, and output far past one tail of the file.
    script = "printf '%s\\n' \"$REFDEPLOY_TEST_VALUE\"; head -c 200000 /dev/zero | tr '\\0' x; echo; printf 'é\\n' >&2"
    cp = _play(
        tmp_path,
        "    - name: Watch | Echo the environment\n"
        f"      refdeploy_watch: {{argv: [sh, -c, {json.dumps(script)}], timeout_s: 30, progress: last_line}}\n"
        '      environment: {REFDEPLOY_TEST_VALUE: "it\'s $HOME; `x`"}\n'
        "      register: r\n"
        f"    - ansible.builtin.copy: {{content: '{{{{ r | to_json }}}}', dest: {tmp_path}/r.json, mode: '0644'}}\n",
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["stdout_lines"][0] == "it's $HOME; `x`"
    assert r["stdout_lines"][1] == "x" * 200000 and r["stderr"] == "é"
    assert not list((tmp_path / "scratch").glob("refdeploy-watch.*"))


@pytest.mark.timing(margin="a 10 s grace, bound 640 s: under 120 s needed, 17 s here (the play included)")
def test_a_watched_command_whose_waiting_shell_dies_fails_soon_saying_what_it_waited_for(tmp_path: Path) -> None:
    # The command kills the shell that waits on timeout(1) (its grandparent) and ends: no exit code will ever be
    # written. The task fails within the plugin's grace, not at the bound (600 s + 40 s), naming the rc file.
    script = "kill -KILL $(ps -o ppid= -p $PPID); sleep 1"
    started = time.monotonic()
    cp = _play(
        tmp_path,
        "    - name: Watch | Lose the waiting shell\n"
        f"      refdeploy_watch: {{argv: [sh, -c, {json.dumps(script)}], timeout_s: 600}}\n"
        "      register: r\n      ignore_errors: true\n"
        f"    - ansible.builtin.copy: {{content: '{{{{ r | to_json }}}}', dest: {tmp_path}/r.json, mode: '0644'}}\n",
    )
    took = time.monotonic() - started
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["failed"] is True
    assert re.fullmatch(
        r"no exit code from Watch \| Lose the waiting shell: waited for it in \S+/refdeploy-watch\.\w+/rc, but "
        r"timeout\(1\) \(the pid in \S+/pid\) has not run for \d+ s and the shell that waits on it wrote none "
        r"\(killed with its session\?\)",
        r["msg"],
    ), r["msg"]
    assert took < 120, f"it took {took:.0f} s"
    assert not list((tmp_path / "scratch").glob("refdeploy-watch.*")), "the scratch directory was left on the host"
