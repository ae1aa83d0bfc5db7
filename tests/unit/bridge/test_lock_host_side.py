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
    assert not lock.exists()  # released
    # Held by another controller: refused with the one line, and the lock is left as it was.
    lock.mkdir()
    other = {"operation": "capture", "controller": "elsewhere", "pid": 7, "started_utc": "2026-12-02T10:00:00Z"}
    (lock / "holder.json").write_text(json.dumps(other))
    run = run_playbook(play, env)
    assert run.returncode == 2
    assert (
        "make bench on localhost is refused, nothing was changed: the host is held by make capture from elsewhere"
        in (run.stdout)
    )
    assert json.loads((lock / "holder.json").read_text()) == other
    # Left by a run of this controller that is gone: taken over, with a warning, then released.
    gone = subprocess.Popen(["true"])
    gone.wait()
    (lock / "holder.json").write_text(json.dumps({**other, "controller": socket.gethostname(), "pid": gone.pid}))
    run = run_playbook(play, env)
    assert run.returncode == 0, run.stdout[-2000:]
    assert f"taken over from a run of this controller that is gone: pid {gone.pid}" in run.stdout + run.stderr
    assert not lock.exists()
