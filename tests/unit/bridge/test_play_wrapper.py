"""make's way into ansible-playbook (serving/bridge/play.py): when a run must be cleaned up after, what the cleanup
runs, and a real Ctrl-C (SIGINT to the process group, as a terminal sends it) to a real ansible-playbook holding the
lock: the lock is released, the note left, and the next take says it. Docker is not used here: the removal of a
run's containers is tests/integration/test_interrupts.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.bridge import play
from tests.helpers.ansible_run import REPO

CASES = [
    # (rc, signals, hold, argv, cleaned, why)
    (0, [], False, [], False, "a run that ended well left nothing"),
    (2, [], False, [], False, "a failed host ran its always: (the lock released, containers removed)"),
    (2, [], True, [], True, "a held target that failed before its last play still holds the lock"),
    (0, [], True, [], False, "a held target's last play released it"),
    (99, [], False, [], True, "Ansible says the user interrupted it"),
    (3, [], False, [], True, "a host became unreachable mid-run (a dropped connection)"),
    (1, [], False, [], True, "an error Ansible's always: may not have caught"),
    (4, [], False, [], False, "the playbook did not parse: nothing ran"),
    (0, [signal.SIGINT], False, [], True, "interrupted, whatever the exit"),
    (-9, [], False, [], True, "ansible-playbook killed"),
    (99, [signal.SIGINT], False, ["--check"], False, "a check run starts nothing and takes no lock"),
]


@pytest.mark.parametrize(("rc", "got", "hold", "argv", "cleaned", "why"), CASES, ids=[c[-1] for c in CASES])
def test_when_a_run_is_cleaned_up_after(
    rc: int, got: list[int], hold: bool, argv: list[str], cleaned: bool, why: str
) -> None:
    assert play.needs_cleanup(rc, got, hold, argv) is cleaned, why


def test_the_cleanup_runs_the_same_hosts_and_options_with_its_own_playbook() -> None:
    argv = ["ansible-playbook", "-i", "inventory/x.yml", "--limit", "gpu-a", "ansible/bench.yml", "-e", "@v.yml",
            "-e", "bench_runs=2"]  # fmt: skip
    out = play.cleanup_argv(argv, "abc123", {"why": "interrupted by SIGINT", "run_dirs": "runs/gpu-a/x runs/gpu-a/y"})
    assert out[:5] == ["ansible-playbook", "-i", "inventory/x.yml", "--limit", "gpu-a"]
    assert out[5] == str(REPO / "ansible" / "interrupted.yml")
    assert out[6:10] == ["-e", "@v.yml", "-e", "bench_runs=2"]
    # One JSON -e: values with spaces stay whole.
    assert out[10] == "-e" and json.loads(out[11]) == {
        "refdeploy_cleanup_run": "abc123",
        "refdeploy_cleanup_why": "interrupted by SIGINT",
        "refdeploy_cleanup_run_dirs": "runs/gpu-a/x runs/gpu-a/y",
    }
    with pytest.raises(ValueError, match="no playbook"):
        play.cleanup_argv(["ansible-playbook", "-i", "inv.yml"], "r", {})


def _wrapped(tmp_path: Path, operation: str, book: Path) -> list[str]:
    bin_dir = Path(sys.executable).parent
    return [
        sys.executable, "-m", "serving.bridge.play", operation, "--",
        str(bin_dir / "ansible-playbook"), "-i", "localhost,", "-c", "local",
        "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"refdeploy_state_dir={tmp_path}/state",
        str(book),
    ]  # fmt: skip


def test_a_real_ctrl_c_releases_the_lock_and_the_next_run_says_what_was_left(tmp_path: Path) -> None:
    lock = tmp_path / "state" / "lock"
    book = tmp_path / "hold.yml"
    # No path: the lock is <refdeploy_state_dir>/lock, as every playbook takes it.
    book.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - refdeploy_lock: {operation: bench}\n"
        f"    - ansible.builtin.command: {{argv: [sleep, '300'], chdir: '{tmp_path}'}}\n"
        "    - refdeploy_lock: {operation: bench, state: released}\n"
    )
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    # Its own session: the SIGINT below reaches it and its children as a terminal's Ctrl-C reaches make's.
    proc = subprocess.Popen(
        _wrapped(tmp_path, "bench", book), cwd=REPO, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while not (lock / "holder.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the play never took the lock"
        time.sleep(0.2)
    holder = json.loads((lock / "holder.json").read_text())
    assert holder["operation"] == "bench" and len(holder["run_id"]) == 16 and not holder["run_id"].startswith("pid-")
    time.sleep(2)  # into the sleep task
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None), out[-3000:]
    assert "make bench ended early (interrupted by SIGINT)" in out, out[-3000:]
    assert not lock.exists(), out[-3000:]
    note = json.loads((tmp_path / "state" / "interrupted.json").read_text())
    assert (note["run_id"], note["operation"], note["lock"]) == (holder["run_id"], "bench", "released")
    # Nothing of the run still runs: no sleep started from this test's directory.
    left = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True, check=False).stdout.split()
    assert not [p for p in left if Path(f"/proc/{p}/cwd").resolve() == tmp_path.resolve()]
    # The next run on the host says what the interrupted one left, once.
    quick = tmp_path / "quick.yml"
    quick.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - refdeploy_lock: {path: '{{ refdeploy_state_dir }}/lock', operation: capture}\n"
        "    - refdeploy_lock: {path: '{{ refdeploy_state_dir }}/lock', operation: capture, state: released}\n"
    )
    nxt = subprocess.run(_wrapped(tmp_path, "capture", quick), cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert nxt.returncode == 0, nxt.stdout[-2000:]
    said = " ".join((nxt.stdout + nxt.stderr).split())
    assert f"the previous make bench on localhost (run {holder['run_id']}) ended early (interrupted by SIGINT" in said
    assert "released its lock" in said
    assert not (tmp_path / "state" / "interrupted.json").exists()


def test_an_interrupted_runs_empty_directory_is_removed_and_one_with_a_file_kept(tmp_path: Path) -> None:
    """After a run that ended early, the run directories it created are named in the note, and those it wrote
    nothing into (an interrupted capture or probe-io, before its first fetch) are removed, empty subdirectories
    and all; one with a file anywhere in it is kept whole."""
    empty = tmp_path / "20261206T085818Z"
    (empty / "capture" / "samplers").mkdir(parents=True)
    kept = tmp_path / "20261206T085827Z"
    (kept / "capture").mkdir(parents=True)
    (kept / "capture" / "capture-started.json").write_text("{}")
    assert play.remove_if_empty(empty) is True and not empty.exists()
    assert play.remove_if_empty(kept) is False
    assert (kept / "capture" / "capture-started.json").read_text() == "{}"
    assert play.remove_if_empty(tmp_path / "never-made") is True
