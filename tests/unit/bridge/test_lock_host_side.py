"""The lock's host side (serving/bridge/hostlock.py take_command, read_command, remove_command), run by a real sh on
this machine as the action plugin refdeploy_lock runs it on a host; and the plugin itself in a real
ansible-playbook run: one round trip takes the lock or says who holds it, and release removes only this run's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

from serving.bridge import hostlock
from tests.helpers.ansible_run import run_playbook

PLUGINS = Path(__file__).resolve().parents[3] / "ansible" / "action_plugins"


def sh(command: str) -> tuple[str, str]:
    cp = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30, check=True)
    # As over SSH with a tty: noise before the reply does not matter.
    return hostlock.parse_reply("lastlog_openseek: noise\n" + cp.stdout)


def test_the_first_take_makes_the_lock_and_the_second_says_who_holds_it(tmp_path: Path) -> None:
    lock = tmp_path / "state" / "lock"
    record = json.dumps({"operation": "deploy", "controller": "ctl-1", "pid": 42})
    assert sh(hostlock.take_command(str(lock), record)) == ("took", "")
    assert lock.stat().st_mode & 0o777 == 0o700
    assert json.loads((lock / "holder.json").read_text()) == json.loads(record)
    word, held = sh(hostlock.take_command(str(lock), json.dumps({"pid": 43})))
    assert (word, json.loads(held)["pid"]) == ("held", 42)
    # A lock directory with no holder.json yet (a take under way) is held, by nobody named.
    (lock / "holder.json").unlink()
    assert sh(hostlock.take_command(str(lock), record)) == ("held", "")


def test_a_stale_holder_is_removed_only_while_it_still_reads_the_same(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.mkdir()
    (lock / "holder.json").write_text("old\n")
    assert sh(hostlock.remove_command(str(lock), "other")) == ("kept", "")
    assert sh(hostlock.take_command(str(lock), "new")) == ("held", "old\n")
    assert sh(hostlock.remove_command(str(lock), "old\n")) == ("removed", "")
    assert sh(hostlock.take_command(str(lock), "new")) == ("took", "")
    assert (lock / "holder.json").read_text() == "new\n"


def test_reading_changes_nothing_and_a_lock_that_cannot_be_made_says_why(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    assert sh(hostlock.read_command(str(lock))) == ("free", "")
    assert not lock.exists()
    (tmp_path / "file").write_text("")
    word, why = sh(hostlock.take_command(str(tmp_path / "file" / "lock"), "rec"))
    assert word == "error" and "cannot create directory" in why
    # Values are arguments, never script: a path with quotes and a $ is made as it is named.
    odd = tmp_path / "it's $HOME"
    assert sh(hostlock.take_command(str(odd), "r"))[0] == "took" and odd.is_dir()


def test_the_plugin_takes_refuses_takes_over_and_releases_in_a_real_run(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - refdeploy_lock: {{path: '{lock}', operation: bench}}\n"
        f"    - ansible.builtin.command: {{argv: [cp, '{lock / 'holder.json'}', '{tmp_path / 'seen.json'}']}}\n"
        f"    - refdeploy_lock: {{path: '{lock}', operation: bench, state: released}}\n"
    )
    env = {**os.environ, "ANSIBLE_ACTION_PLUGINS": str(PLUGINS), "ANSIBLE_NOCOLOR": "1"}
    run = run_playbook(play, env)
    assert run.returncode == 0, run.stdout[-2000:]
    held = json.loads((tmp_path / "seen.json").read_text())
    assert (held["operation"], held["controller"]) == ("bench", socket.gethostname())
    assert held["machine_id"] == hostlock.machine_id() and held["run_id"].startswith("pid-")
    assert not lock.exists()  # released
    # Held by another controller: refused with the one line, and the lock is left as it was.
    lock.mkdir()
    other = {
        "operation": "capture", "machine_id": "elsewhere", "run_id": "0123456789abcdef", "controller": "ctl-2",
        "pid": 7, "pid_start": "5", "started_utc": "2026-12-02T10:00:00Z",
    }  # fmt: skip
    (lock / "holder.json").write_text(json.dumps(other))
    run = run_playbook(play, env)
    assert run.returncode == 2
    assert (
        "make bench on localhost is refused, nothing was changed: the host is held by make capture "
        "(run 0123456789abcdef) from ctl-2" in run.stdout
    )
    assert json.loads((lock / "holder.json").read_text()) == other
    # Left by a run of this machine that is gone: taken over, with a warning, then released.
    gone = subprocess.Popen(["true"])
    gone.wait()
    (lock / "holder.json").write_text(json.dumps({**other, "machine_id": hostlock.machine_id(), "pid": gone.pid}))
    run = run_playbook(play, env)
    assert run.returncode == 0, run.stdout[-2000:]
    assert f"taken over from a run of this controller that is gone: pid {gone.pid}" in run.stdout + run.stderr
    assert not lock.exists()


def test_the_cleanup_releases_only_its_runs_lock_and_leaves_a_note_the_next_take_says_once(tmp_path: Path) -> None:
    """No container here (the docker client is pointed at no engine: its listing is empty); the real removal of
    a run's containers is tests/integration/test_interrupts.py."""
    lock = tmp_path / "state" / "lock"
    mine = json.dumps({"operation": "bench", "run_id": "aaaa000011112222", "pid": 1})
    assert sh(hostlock.take_command(str(lock), mine)) == ("took", "")
    note = {
        "run_id": "aaaa000011112222",
        "operation": "bench",
        "why": "interrupted by SIGINT",
        "run_dirs": "r/20261205T1",
    }
    # What the run left on the host, named as its run directory is: said, and kept.
    (tmp_path / "state" / "bench-runs" / "20261205T1-bench").mkdir(parents=True)
    (tmp_path / "state" / "probe-runs" / "20261205T2").mkdir(parents=True)
    env_path = f"DOCKER_HOST=unix://{tmp_path}/no-engine.sock"
    # Another run's cleanup leaves this run's lock, and writes no note.
    assert sh(f"{env_path} " + hostlock.cleanup_command(str(lock), "bbbb000011112222", note)) == (
        "cleaned", f"kept;{tmp_path}/state/bench-runs/20261205T1-bench",
    )  # fmt: skip
    assert lock.exists() and not (tmp_path / "state" / "interrupted.json").exists()
    left = str(tmp_path / "state" / "bench-runs" / "20261205T1-bench")
    word, reply = sh(f"{env_path} " + hostlock.cleanup_command(str(lock), "aaaa000011112222", note))
    assert (word, reply) == ("cleaned", f"released;{left}")
    assert not lock.exists()
    written = json.loads((tmp_path / "state" / "interrupted.json").read_text())
    assert written == {**note, "removed": "", "lock": "released", "host_dirs": left}
    # The note the plugin hands the play for the run's directories is the one the host keeps.
    assert hostlock.parse_cleanup(reply, note) == written
    # The next take says it, once.
    word, said = sh(hostlock.take_command(str(lock), "next"))
    assert word == "took" and json.loads(said) == written
    assert not (tmp_path / "state" / "interrupted.json").exists()
    assert sh(hostlock.remove_command(str(lock), "next")) == ("removed", "")
    assert sh(hostlock.take_command(str(lock), "next")) == ("took", "")


def test_a_cleanup_finds_the_hosts_scratch_by_run_id_when_the_controller_kept_no_run_directory(tmp_path: Path) -> None:
    """An interrupted probe that wrote nothing on the controller has its empty run directory removed there
    (serving/bridge/play.py): the note's run_ids still name its scratch directory on the host, which is kept."""
    lock = tmp_path / "state" / "lock"
    assert sh(hostlock.take_command(str(lock), json.dumps({"run_id": "cccc000011112222", "pid": 1}))) == ("took", "")
    (tmp_path / "state" / "probe-runs" / "20261206T085818Z").mkdir(parents=True)
    note = {"run_id": "cccc000011112222", "operation": "capture", "why": "interrupted by SIGINT", "run_dirs": "",
            "run_ids": "20261206T085818Z"}  # fmt: skip
    env_path = f"DOCKER_HOST=unix://{tmp_path}/no-engine.sock"
    assert sh(f"{env_path} " + hostlock.cleanup_command(str(lock), "cccc000011112222", note)) == (
        "cleaned", f"released;{tmp_path}/state/probe-runs/20261206T085818Z",
    )  # fmt: skip
    written = json.loads((tmp_path / "state" / "interrupted.json").read_text())
    assert written["host_dirs"] == str(tmp_path / "state" / "probe-runs" / "20261206T085818Z")
    assert "what it wrote, incomplete: none written; on h: " in hostlock.interrupted_line("h", written)


# A docker client that answers as an engine holding a dead deploy's leftovers would: a bench container of the run
# (c1), and a replacement left half done (refdeploy-vllm started, refdeploy-vllm-previous set aside). It logs each
# call; the real engine's removal is tests/integration/test_safety.py.
FAKE_DOCKER = r"""#!/bin/sh
echo "$*" >>"$LOG"
case "$*" in
  "ps -aq --filter label=refdeploy.run=0123456789abcdef") echo c1 ;;
  "ps -aq --filter "*) ;;
  "inspect -f {{.Name}} c1") echo /refdeploy-vllm-bench ;;
  "ps -a --filter label=org.refdeploy.profile --format {{.Names}}")
    printf 'refdeploy-vllm\nrefdeploy-vllm-previous\n' ;;
  "inspect refdeploy-vllm"|"rm -f "*|"rename "*|"start "*) ;;
  *) exit 1 ;;
esac
"""


def _fake_docker(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "docker.log")}


def test_a_takeover_removes_the_dead_runs_containers_and_puts_a_half_done_replacement_back(tmp_path: Path) -> None:
    from serving.plan.render import PROFILE_LABEL

    assert PROFILE_LABEL == "org.refdeploy.profile"  # the label the host side finds the serving containers by
    env = _fake_docker(tmp_path)
    cp = subprocess.run(["sh", "-c", hostlock.takeover_command("0123456789abcdef")], env=env, capture_output=True,
                        text=True, timeout=30, check=True)  # fmt: skip
    word, text = hostlock.parse_reply(cp.stdout)
    assert word == "cleaned"
    assert hostlock.parse_cleaned(text) == (["refdeploy-vllm-bench", "refdeploy-vllm"], ["refdeploy-vllm"])
    calls = (tmp_path / "docker.log").read_text().splitlines()
    assert [c for c in calls if c.split()[0] in ("rm", "rename", "start")] == [
        "rm -f c1",
        "rm -f refdeploy-vllm",
        "rename refdeploy-vllm-previous refdeploy-vllm",
        "start refdeploy-vllm",
    ]
    # A holder with no run id (an older lock) removes no container by an empty label.
    (tmp_path / "docker.log").unlink()
    cp = subprocess.run(["sh", "-c", hostlock.takeover_command("")], env=env, capture_output=True, text=True,
                        timeout=30, check=True)  # fmt: skip
    assert not any(c.startswith("ps -aq") for c in (tmp_path / "docker.log").read_text().splitlines())


def test_the_plugin_removes_what_the_dead_run_left_when_it_takes_its_lock_over(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - refdeploy_lock: {{path: '{lock}', operation: deploy}}\n"
        f"    - refdeploy_lock: {{path: '{lock}', operation: deploy, state: released}}\n"
    )
    env = {**_fake_docker(tmp_path), "ANSIBLE_ACTION_PLUGINS": str(PLUGINS), "ANSIBLE_NOCOLOR": "1"}
    gone = subprocess.Popen(["true"])
    gone.wait()
    lock.mkdir()
    dead = {"operation": "deploy", "machine_id": hostlock.machine_id(), "run_id": "0123456789abcdef",
            "controller": "ctl", "pid": gone.pid, "pid_start": "5", "started_utc": "2026-12-02T10:00:00Z"}  # fmt: skip
    (lock / "holder.json").write_text(json.dumps(dead))
    run = run_playbook(play, env)
    assert run.returncode == 0, run.stdout[-2000:]
    said = " ".join((run.stdout + run.stderr).split())
    assert (
        f"taken over from a run of this controller that is gone: pid {gone.pid}); removed what run 0123456789abcdef "
        "left: refdeploy-vllm-bench, refdeploy-vllm; put back refdeploy-vllm, which it had set aside to replace"
    ) in said
    assert not lock.exists()
