"""The progress callback (ansible/callback_plugins/refdeploy_progress.py) in a real ansible-playbook run: a
task that runs past the interval gets a line per interval, with what is left of its bound; a quick one none."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
    cp = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    lines = re.findall(r"^\s+\.\.\. (.*)$", cp.stdout, re.M)
    assert lines and all(ln.startswith("Wait a while: ") for ln in lines), cp.stdout
    assert 2 <= len(lines) <= 4, lines
    assert lines[0] == "Wait a while: 1 s so far (at most 29 s more)", lines
