"""No task shows a container's inspection at -v or -vvv: every task that returns one has no_log.

A `docker inspect` holds the container's environment (an HF_TOKEN, a proxy's password in http_proxy), and an image's
holds its build's arguments. Ansible prints a task's result at -v and its module arguments at -vvv, so every task
whose result carries an inspection must set no_log: docker_container_info and docker_image_info; docker_container
unless it removes (state: absent returns no container); library/refdeploy_engine_readings (container_readings);
a command that runs `docker ... inspect`; and a set_fact of refdeploy_run, the run record, which holds the plan
(the launch's env) and, after serve, the container's readings. library/refdeploy_host_readings is not among them:
it cuts the inspection to what a deploy decides on, never the environment.

The one templated no_log accepted is the serving container's start, which hands Docker the plan's own env: hidden
whenever that env holds a value redaction hides (serving/config/redact.py secret_env_names), so the operator still
sees why a start failed when there is nothing to hide.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
_RETURNS_INSPECTION = {
    "docker_container_info",
    "docker_image_info",
    "refdeploy_engine_readings",
}
_COMMANDS = {"command", "shell", "refdeploy_shell", "refdeploy_watch", "raw"}
_PLANS_ENV = "{{ refdeploy_plan.api.secret_env | length > 0 }}"
_TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")


def _module(task: dict[str, Any]) -> tuple[str, Any]:
    """The task's module (its short name) and its arguments."""
    for key, value in task.items():
        short = key.rsplit(".", 1)[-1]
        if short in _RETURNS_INSPECTION | _COMMANDS | {"docker_container"}:
            return short, value
    return "", None


def shows_an_inspection(task: dict[str, Any]) -> bool:
    """Whether the task's result (or its -vvv arguments) carries a container's or an image's inspection."""
    module, args = _module(task)
    if module in _RETURNS_INSPECTION:
        return True
    facts = task.get("ansible.builtin.set_fact")
    if isinstance(facts, dict) and "refdeploy_run" in facts:
        return True
    if module == "docker_container":
        return not (isinstance(args, dict) and args.get("state") == "absent")
    if module in _COMMANDS:
        words = " ".join(map(str, args.get("argv") or [args.get("cmd", "")])) if isinstance(args, dict) else str(args)
        return "docker" in words and "inspect" in words.split()
    return False


def hidden(task: dict[str, Any]) -> bool:
    return task.get("no_log") is True or (task.get("no_log") == _PLANS_ENV and task.get("name", "").endswith(
        "Start the serving container"))  # fmt: skip


def _tasks(node: Any) -> list[dict[str, Any]]:
    """Every task below a parsed playbook or task file, blocks and plays opened."""
    found: list[dict[str, Any]] = []
    for item in node if isinstance(node, list) else []:
        if not isinstance(item, dict):
            continue
        lists = [item[k] for k in _TASK_LISTS if isinstance(item.get(k), list)]
        if "hosts" not in item and "block" not in item:
            found.append(item)
        for tasks in lists:
            found += _tasks(tasks)
    return found


def _all_tasks() -> list[tuple[str, dict[str, Any]]]:
    files = (
        sorted(ANSIBLE.glob("*.yml"))
        + sorted(ANSIBLE.glob("tasks/*.yml"))
        + sorted(ANSIBLE.glob("roles/*/tasks/*.yml"))
    )
    return [(str(f.relative_to(ANSIBLE)), t) for f in files for t in _tasks(yaml.safe_load(f.read_text()))]


_SHOWING = [(where, t) for where, t in _all_tasks() if shows_an_inspection(t)]


def test_the_walk_finds_the_tasks_that_read_an_inspection() -> None:
    names = {t.get("name") for _, t in _SHOWING}
    for name in (
        "Serve | Inspect the serving container and its samplers sidecar after the replacement",
        "Serve | Wait for the engine to answer /health, then read its start-up lines and metrics",
        "Verify | Read the engine's start-up lines and metrics and the container, once it answers /health",
        "Serve | Start the serving container",
        "Serve | Start the previous container again",
        "Placement | Add each rank's placement to the run record",
        "Manifest | Look up the runtime image",
    ):
        assert name in names, name
    # A removal returns no inspection and is left to show what it did.
    assert "Serve | Remove the previous container" not in names


@pytest.mark.parametrize(("where", "task"), _SHOWING, ids=[f"{w}:{t.get('name')}" for w, t in _SHOWING])
def test_every_task_that_reads_an_inspection_has_no_log(where: str, task: dict[str, Any]) -> None:
    assert hidden(task), f"{where}: task {task.get('name')!r} shows a docker inspection at -v: give it no_log: true"


def test_a_task_without_no_log_is_caught() -> None:
    # The check above must be able to fail: the same tasks as written before this rule, and a templated no_log
    # anywhere but the serving container's start.
    bare = [
        {"name": "Look", "community.docker.docker_container_info": {"name": "c"}, "register": "x"},
        {"name": "Inspect", "ansible.builtin.command": {"argv": ["docker", "container", "inspect", "c"]}},
        {"name": "Stop", "community.docker.docker_container": {"name": "c", "state": "stopped"}},
        {"name": "Record", "ansible.builtin.set_fact": {"refdeploy_run": "{{ refdeploy_run }}"}},
        {"name": "Start the sidecar", "community.docker.docker_container": {"name": "s"}, "no_log": _PLANS_ENV},
    ]
    assert [shows_an_inspection(t) and not hidden(t) for t in bare] == [True] * len(bare)
    removal = {"name": "Remove", "community.docker.docker_container": {"name": "c", "state": "absent"}}
    assert not shows_an_inspection(removal)
