"""Run directories on the controller: private, and never shared by two runs of one second (serving/record/manifest.py
new_run_dir, and the action plugin refdeploy_run_dir the bench and probe playbooks get theirs from)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from serving.record.manifest import new_run_dir

REPO = Path(__file__).resolve().parents[3]


def test_two_runs_in_one_second_get_two_private_directories(tmp_path: Path) -> None:
    dirs = [new_run_dir(tmp_path / "runs", "h1") for _ in range(3)]
    assert len(set(dirs)) == 3 and all(d.parent == (tmp_path / "runs" / "h1").resolve() for d in dirs)
    assert all(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in [*dirs, dirs[0].parent])


def test_the_playbooks_run_dir_plugin_gives_each_task_its_own(tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        + "".join(f"    - refdeploy_run_dir: {{runs_dir: '{tmp_path}/runs'}}\n      register: r{i}\n" for i in range(3))
        + "    - ansible.builtin.copy: {content: '{{ [r0, r1, r2] | to_json }}', dest: '"
        + str(tmp_path / "out.json")
        + "'}\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_ACTION_PLUGINS": str(REPO / "ansible" / "action_plugins"),
        "PYTHONPATH": str(REPO),
        "ANSIBLE_NOCOLOR": "1",
    }
    cp = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(play),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads((tmp_path / "out.json").read_text())
    paths = [Path(r["path"]) for r in got]
    assert len(set(paths)) == 3 and all(p.is_dir() and p.parent.name == "localhost" for p in paths)
    assert [r["run_id"] for r in got] == [p.name for p in paths]
    assert not any(r["changed"] for r in got)


def test_a_refused_runs_directory_is_discarded_only_while_empty_and_only_its_own(tmp_path: Path) -> None:
    """Refused runs left empty runs/<host>/<ts>/ directories (17 in an afternoon, issue 31): the roles discard theirs
    before a refusal, through the same plugin. A directory with anything in it is a record, and stays."""
    runs = tmp_path / "runs"
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - refdeploy_run_dir: {{runs_dir: '{runs}'}}\n      register: empty\n"
        f"    - refdeploy_run_dir: {{runs_dir: '{runs}'}}\n      register: written\n"
        "    - ansible.builtin.copy: {content: x, dest: '{{ written.path }}/kept.txt', mode: '0600'}\n"
        + "".join(
            f"    - refdeploy_run_dir: {{runs_dir: '{runs}', discard: '{{{{ {r}.path }}}}'}}\n      register: d_{r}\n"
            for r in ("empty", "written")
        )
        + "    - ansible.builtin.copy: {content: '{{ [d_empty, d_written] | to_json }}', dest: '"
        + f"{tmp_path}/out.json'}}\n"
        # Another host's directory, or anything outside runs/<host>/, is never removed.
        f"    - refdeploy_run_dir: {{runs_dir: '{runs}', discard: '{tmp_path}'}}\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_ACTION_PLUGINS": str(REPO / "ansible" / "action_plugins"),
        "PYTHONPATH": str(REPO),
        "ANSIBLE_NOCOLOR": "1",
    }
    cp = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert cp.returncode == 2, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert f"{tmp_path}: not a run directory of localhost under {runs}: nothing removed" in cp.stdout
    removed = [r["removed"] for r in json.loads((tmp_path / "out.json").read_text())]
    assert removed == [True, False]
    [left] = (runs / "localhost").iterdir()
    assert [p.name for p in left.iterdir()] == ["kept.txt"] and tmp_path.is_dir()
