"""The preload callback (ansible/callback_plugins/refdeploy_preload.py) in a real ansible-playbook run: a task's
worker finds serving.plan.plan already imported, inherited from ansible-playbook's process; without the callback it
does not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.ansible_run import run_playbook

REPO = Path(__file__).resolve().parents[3]


def _imported_in_the_worker(tmp_path: Path, callbacks: str) -> str:
    filters = tmp_path / "filter_plugins"
    filters.mkdir(exist_ok=True)
    # A filter runs in the task's worker: sys.modules there is what it inherited.
    (filters / "imported.py").write_text(
        "import sys\n\n\nclass FilterModule:\n"
        "    def filters(self):\n        return {'imported': lambda name: name in sys.modules}\n"
    )
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug: {msg: \"IMPORTED={{ 'serving.plan.plan' | imported }}\"}\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "ansible" / "callback_plugins"),
        "ANSIBLE_FILTER_PLUGINS": str(filters),
        "ANSIBLE_CALLBACKS_ENABLED": callbacks,
        "ANSIBLE_NOCOLOR": "1",
    }
    cp = run_playbook(play, env)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    return cp.stdout


@pytest.mark.parametrize(
    ("callbacks", "said"), [("refdeploy_preload", "IMPORTED=True"), ("refdeploy_progress", "IMPORTED=False")]
)
def test_a_tasks_worker_inherits_the_serving_package_preloaded(tmp_path: Path, callbacks: str, said: str) -> None:
    assert said in _imported_in_the_worker(tmp_path, callbacks)
