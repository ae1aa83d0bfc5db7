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
import yaml

from serving.bridge import play
from serving.config import make_vars
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
        f"    - refdeploy_run_dir: {{runs_dir: '{tmp_path}/runs'}}\n"
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
    # The run directory it made, empty when the interrupt came, holds the run's result: the note, with what the
    # cleanup did, as the host keeps it (issue 46: no interrupt leaves a run directory without a result).
    (run_dir,) = (tmp_path / "runs" / "localhost").iterdir()
    assert note["run_dirs"] == str(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == [play.RESULT_FILE]
    assert json.loads((run_dir / play.RESULT_FILE).read_text()) == note
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


def test_each_directory_an_interrupted_run_created_gets_its_result_and_keeps_what_it_held(tmp_path: Path) -> None:
    """After a run that ended early, every run directory it created holds interrupted.json, the note of what ended
    it: one it wrote nothing into (a capture interrupted in its window, whose output is on the host) as much as
    one with files, which are kept whole. One that is gone (a refused run's, discarded) is not made again."""
    empty = tmp_path / "20261206T085818Z"
    (empty / "capture" / "samplers").mkdir(parents=True)
    kept = tmp_path / "20261206T085827Z"
    (kept / "capture").mkdir(parents=True)
    (kept / "capture" / "capture-started.json").write_text("{}")
    note = {"run_id": "abc", "operation": "capture", "why": "interrupted by SIGINT", "ended_utc": "2026-12-06T08:58Z"}
    gone = tmp_path / "never-made"
    assert play.write_interrupted([str(empty), str(kept), str(gone)], note) == [str(empty), str(kept)]
    for d in (empty, kept):
        # The note as the directories stand: the one that is gone is not among those it names.
        assert json.loads((d / play.RESULT_FILE).read_text()) == {**note, "run_dirs": f"{empty} {kept}"}
        assert (d / play.RESULT_FILE).stat().st_mode & 0o777 == 0o600
    assert (kept / "capture" / "capture-started.json").read_text() == "{}"
    assert not gone.exists()


def test_make_values_reach_ansible_as_data_never_as_templates(tmp_path: Path) -> None:
    """--var's value goes in the extra-vars file, !unsafe: Ansible prints the template's text and runs nothing. The
    same text as a JSON extra var runs the lookup (the control: without it this test could not fail)."""
    book = tmp_path / "book.yml"
    book.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug: {msg: 'got=[{{ v }}]'}\n"
    )
    template = "{{ lookup('pipe', 'touch " + str(tmp_path / "MARKER") + "') }}"
    bin_dir = Path(sys.executable).parent
    ansible = [str(bin_dir / "ansible-playbook"), "-i", "localhost,", "-c", "local",
               "-e", f"ansible_python_interpreter={sys.executable}", str(book)]  # fmt: skip
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "MAKE_V": template,
        "REFDEPLOY_STATE_DIR": str(tmp_path / "state"),
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
    }  # fmt: skip (json: the message on one line)
    argv = [sys.executable, "-m", "serving.bridge.play", "--var", "v=MAKE_V", "--ansible-args", "-e w=1", "plan", "--"]
    cp = subprocess.run([*argv, *ansible], cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert f"got=[{template}]" in cp.stdout, cp.stdout[-3000:]
    assert not (tmp_path / "MARKER").exists()
    control = subprocess.run([*ansible, "-e", json.dumps({"v": template})], cwd=REPO, env=env, capture_output=True,
                             text=True, check=False, timeout=120)  # fmt: skip
    assert control.returncode == 0 and (tmp_path / "MARKER").exists(), control.stdout[-3000:]


def test_an_operators_e_for_a_name_make_sets_is_refused_before_ansible_runs(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "serving.bridge.play", "--var", "bench_runs=RUNS", "--ansible-args",
            "-e bench_runs=1", "bench", "--", "touch", str(tmp_path / "ran")]  # fmt: skip
    cp = subprocess.run(argv, cwd=REPO, env={**os.environ, "RUNS": "2"}, capture_output=True, text=True, check=False)
    assert (cp.returncode, cp.stdout) == (2, "")
    assert cp.stderr == (
        "make bench: ANSIBLE_ARGS: -e bench_runs: the Makefile sets bench_runs from RUNS: give RUNS= instead (two "
        "values for one name: Ansible would keep one of them without a word)\n"
    )
    assert not (tmp_path / "ran").exists()


def test_the_extra_vars_file_is_yaml_ansible_reads_back_as_the_same_strings() -> None:
    values = {"a": "{{ x }}", "b": "q\"'\\ é \t", "c": "{% raw %}"}
    text = make_vars.unsafe_yaml(values)
    assert text.count("!unsafe") == 3
    assert yaml.load(text, Loader=_UnsafeLoader) == values
    with pytest.raises(ValueError, match="not an Ansible variable name"):
        make_vars.unsafe_yaml({"a b": "x"})
    assert play.parse(["--var", "x=Y", "bench", "--", "ap"]) == (False, {"x": "Y"}, "", "bench", ["ap"])
    assert play.parse(["--var", "x", "bench", "--", "ap"]) is None


class _UnsafeLoader(yaml.SafeLoader):
    """PyYAML with Ansible's !unsafe read as the plain string (Ansible's loader marks it, this only reads it)."""


_UnsafeLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def test_an_interrupted_profile_puts_the_plans_engine_back_unless_kept() -> None:
    argv = ["ansible-playbook", "-i", "inventory/x.yml", "--limit", "gpu-a", "ansible/profile.yml",
            "-e", "profiler_workload=smoke", "-e", "profiler_requests=4"]  # fmt: skip
    assert play.restores_engine("profile", argv)
    assert not play.restores_engine("profile", [*argv, "-e", "refdeploy_profiler_keep=true"])  # KEEP=1
    assert not play.restores_engine("bench", argv)
    out = play.restore_argv(argv)
    assert out[:6] == [*argv[:5], str(REPO / "ansible" / "deploy.yml")]
    assert out[6:10] == argv[6:10] and out[10] == "-e" and json.loads(out[11]) == {"refdeploy_profiler": ""}


def test_a_profile_that_ended_early_runs_its_cleanup_then_the_deploy_that_turns_the_profiler_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapper in this process, real ansible-playbook runs: a held make profile whose play fails (its rescue ran,
    its last plays never will); the cleanup and the deploy are playbooks that write what they were given."""
    seen = tmp_path / "seen"
    seen.mkdir()

    def book(name: str, line: str) -> Path:
        path = tmp_path / f"{name}.yml"
        path.write_text(
            "- hosts: all\n  gather_facts: false\n  tasks:\n"
            f"    - ansible.builtin.copy: {{content: \"{line}\", dest: '{seen}/{name}'}}\n"
        )
        return path

    monkeypatch.setattr(play, "CLEANUP_PLAYBOOK", book("cleanup", "{{ refdeploy_cleanup_operation }}"))
    monkeypatch.setattr(play, "RESTORE_PLAYBOOK", book("deploy", "profiler=[{{ refdeploy_profiler }}]"))
    failing = tmp_path / "profile.yml"
    failing.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.fail: {msg: stop}\n")
    monkeypatch.setenv("ANSIBLE_NOCOLOR", "1")
    # main() installs its own signal handlers: pytest's are put back after.
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        _profile_runs(tmp_path, failing, seen)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


def _profile_runs(tmp_path: Path, failing: Path, seen: Path) -> None:
    args = _wrapped(tmp_path, "profile", failing)[3:]  # after `python -m serving.bridge.play`
    assert play.main(["--hold", *args]) == 2
    assert (seen / "cleanup").read_text() == "profile"
    assert (seen / "deploy").read_text() == "profiler=[]"
    # KEEP=1: the engine stays profiling, as asked; the cleanup runs all the same.
    for f in seen.iterdir():
        f.unlink()
    assert play.main(["--hold", *args, "-e", "refdeploy_profiler_keep=true"]) == 2
    assert (seen / "cleanup").is_file() and not (seen / "deploy").exists()
