"""A run's files written on the controller in-process (ansible/action_plugins/refdeploy_controller_files.py), run
as Ansible runs it: JSON and text, 0644 unless the task asks for less (a capture's host processes, 0600, may name
the host's secrets on their command lines), and a name that leaves the directory refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.ansible_run import run_tasks


def test_json_and_text_are_written_with_the_mode_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "run" / "host-state"
    tasks = f"""
    - refdeploy_controller_files:
        dir: {out}
        json: {{outcome.json: {{ok: true, line: "PASS"}}}}
    - refdeploy_controller_files:
        dir: {out}
        text: {{host-processes-before.txt: "1 init\\n"}}
        mode: "0600"
"""
    cp = run_tasks(tmp_path, tasks, "refdeploy_print")
    assert cp.returncode == 0, cp.stdout[-2000:]
    assert json.loads((out / "outcome.json").read_text()) == {"line": "PASS", "ok": True}
    assert (out / "host-processes-before.txt").read_text() == "1 init\n"
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert modes == {"outcome.json": 0o644, "host-processes-before.txt": 0o600}


def test_a_name_that_leaves_the_directory_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "run"
    tasks = f"""
    - refdeploy_controller_files:
        dir: {out}
        text: {{"../escape.txt": "x"}}
"""
    cp = run_tasks(tmp_path, tasks, "refdeploy_print")
    assert cp.returncode != 0 and "../escape.txt: a plain file name, please" in cp.stdout
    assert not (tmp_path / "escape.txt").exists() and not out.exists()
