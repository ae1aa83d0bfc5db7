"""Real Ansible on this machine, for the unit tests of the product's modules and plugins: one module of
ansible/library through `ansible` (its JSON result), or a small playbook through `ansible-playbook`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "ansible" / "library"
# What the modules share (ansible.cfg's module_utils): found by Ansible where no ansible.cfg is read.
MODULE_UTILS = REPO / "ansible" / "module_utils"


def load_library_module(name: str) -> Any:
    """A module of ansible/library imported in this process (its functions under test), with the project's
    module_utils where Ansible would put them (ansible.module_utils.<name>)."""
    import importlib.util

    def load(modname: str, path: Path) -> Any:
        spec = importlib.util.spec_from_file_location(modname, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
        return mod

    # Each file after the project's files it imports (refdeploy_host_state imports refdeploy_cgroups): one that
    # imports a file not yet loaded waits for the next pass.
    waiting = sorted(MODULE_UTILS.glob("*.py"))
    while waiting:
        left = []
        for util in waiting:
            try:
                load(f"ansible.module_utils.{util.stem}", util)
            except ModuleNotFoundError as e:
                if not str(e.name).startswith("ansible.module_utils.refdeploy_"):
                    raise
                left.append(util)
        assert len(left) < len(waiting), f"module_utils that import each other: {left}"
        waiting = left
    return load(f"refdeploy_test_{name}", LIBRARY / f"{name}.py")


def load_module_utils(name: str) -> Any:
    """A file of ansible/module_utils as a module of ansible/library imports it (ansible.module_utils.<name>)."""
    load_library_module("refdeploy_host_readings")
    return sys.modules[f"ansible.module_utils.{name}"]


def run_module(
    module: str, args: dict[str, Any], *extra: str, env: dict[str, str] | None = None, fails: bool = False
) -> dict[str, Any]:
    """The module's result as Ansible returns it; `fails`: the run must fail (its result is returned, msg and all)."""
    cp = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-M", str(LIBRARY), "-m", module, "-a", json.dumps(args),
         "-e", f"ansible_python_interpreter={sys.executable}", "-o", *extra],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_MODULE_UTILS": str(MODULE_UTILS), **(env or {})},
    )  # fmt: skip
    assert (cp.returncode != 0) == fails, cp.stdout[-2000:] + cp.stderr[-2000:]
    # -o: one line, "localhost | SUCCESS => {the module's JSON}" (FAILED! where it failed)
    result: dict[str, Any] = json.loads(cp.stdout.split(" => ", 1)[1])
    return result


def run_playbook(play: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """ansible-playbook PLAY against this machine (local connection) with env; the caller judges the exit."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def run_tasks(tmp_path: Path, tasks: str, callback: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A play of `tasks` (task YAML, indented under the play's `tasks:`) against this machine, with the project's
    action and callback plugins, `callback` enabled and no colour; env adds to that environment or overrides it.
    The play file is tmp_path/play.yml; the caller judges the exit."""
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + tasks)
    return run_playbook(
        play,
        {
            **os.environ,
            "ANSIBLE_ACTION_PLUGINS": str(REPO / "ansible" / "action_plugins"),
            "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "ansible" / "callback_plugins"),
            "ANSIBLE_CALLBACKS_ENABLED": callback,
            "ANSIBLE_NOCOLOR": "1",
            **env,
        },
    )
