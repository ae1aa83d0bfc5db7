"""The probe roles' shared dependency (ansible/roles/probes) refuses an inventory that still sets a variable under
the name it had before issue 30 split the probes role: ignored, it would leave the probe on its defaults without a
word. Real ansible-playbook, the project's roles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.ansible_run import REPO, run_playbook


def _play(tmp_path: Path, play_vars: str) -> tuple[int, str]:
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        f"  vars:\n{play_vars}"
        "  roles:\n    - role: probes\n"
        "  tasks:\n    - name: After the check\n      ansible.builtin.debug:\n        msg: probes may run\n"
    )
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "ansible" / "roles"), "ANSIBLE_NOCOLOR": "1"}
    cp = run_playbook(play, env)
    return cp.returncode, cp.stdout + cp.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [("probes_io_thresholds", "probe_io_*"), ("probes_capture_seconds", "capture_*"),
     ("probes_profile_requests", "profiler_*"), ("refdeploy_profile_keep", "refdeploy_profiler_keep")],
)  # fmt: skip
def test_an_old_variable_name_is_refused_naming_the_new_one(tmp_path: Path, old: str, new: str) -> None:
    rc, out = _play(tmp_path, f"    {old}: 1\n")
    assert rc == 2, out[-2000:]
    assert f"renamed variables set for localhost: {old};" in out and new in out, out[-2000:]
    assert "probes may run" not in out


def test_the_new_names_pass(tmp_path: Path) -> None:
    rc, out = _play(tmp_path, "    probe_io_runtime_s: 5\n    capture_seconds: 3\n    refdeploy_profiler_keep: false\n")
    assert rc == 0, out[-2000:]
    assert "probes may run" in out
