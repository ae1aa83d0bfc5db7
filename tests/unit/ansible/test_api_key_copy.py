"""The API key's copy through a replacement: the container set aside keeps the key it was started with until the
new one is committed, so a rollback restarts it with its own key (ansible/roles/serve/tasks/{api_key,commit,
rollback}.yml).

Every container of a name mounts the same copy (serving/plan/render.py api_key_copy). Before, a deploy wrote the
new key over it, or removed it under a plan without a key, before the launch: a rollback then started the previous
container with another key, or with no key file at all. The serve role's own key tasks run here for real, through
ansible-playbook on this machine, with the copy in a temporary directory; the docker tasks around them are not run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.ansible_run import run_playbook

SERVE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "serve"


def _tasks(path: Path, names: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The task file's tasks, or those named, found in its blocks too."""
    found: list[dict[str, Any]] = []

    def walk(tasks: list[dict[str, Any]]) -> None:
        for t in tasks:
            if "block" in t:
                walk(t["block"])
            elif not names or t.get("name") in names:
                found.append(t)

    top: list[dict[str, Any]] = yaml.safe_load(path.read_text())
    if not names:
        return top
    walk(top)
    assert [t["name"] for t in found] == list(names), f"{path.name}: {names} not all found"
    return found


DEPLOY = _tasks(SERVE / "tasks/api_key.yml")
ROLLBACK = _tasks(
    SERVE / "tasks/rollback.yml",
    ("Serve | Put the previous container's key copy back",
     "Serve | Remove the key copy the previous container was not started with"),
)  # fmt: skip
COMMIT = _tasks(SERVE / "tasks/commit.yml", ("Serve | Remove the key copies no container uses any more",))
_ROLE_VARS = {k: v for k, v in yaml.safe_load((SERVE / "vars/main.yml").read_text()).items() if "_key_" in k}


class Host:
    """A managed host's key files in tmp_path, and the serve role's key tasks run against them."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.copy = tmp_path / "secrets" / "refdeploy-vllm.api-key"
        self.previous = Path(f"{self.copy}.previous")

    def key(self, name: str) -> str:
        path = self.tmp / f"{name}.key"
        path.write_text(f"key-{name}\n")
        path.chmod(0o600)
        return str(path)

    def run(self, tasks: list[dict[str, Any]], key_file: str | None, replace: bool) -> None:
        # As the plan's read found the copy before this deploy (refdeploy_host.paths).
        found = "file" if self.copy.is_file() else "missing"
        play = [{
            "hosts": "localhost", "gather_facts": False,
            "vars": {
                **_ROLE_VARS,
                "refdeploy_plan": {"api": {"key_file": key_file, "key_copy": str(self.copy), "key_gid": os.getgid(),
                                           "hf_token_file": None, "hf_token_copy": str(self.tmp / "no.hf-token")}},
                "refdeploy_host": {"paths": {str(self.copy): found}},
                "_serve_replace": replace,
            },
            "tasks": tasks,
        }]  # fmt: skip
        (self.tmp / "play.yml").write_text(yaml.safe_dump(play))
        cp = run_playbook(self.tmp / "play.yml", {**os.environ, "ANSIBLE_NOCOLOR": "1"})
        assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]

    def holds(self) -> tuple[str | None, str | None]:
        """The key in the copy, and in the copy kept for the previous container."""
        read = lambda p: p.read_text().strip() if p.exists() else None  # noqa: E731
        return read(self.copy), read(self.previous)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    h = Host(tmp_path)
    h.run(DEPLOY, h.key("a"), replace=False)  # the running container, started with key a
    assert h.holds() == ("key-a", None)
    return h


def test_a_rollback_from_a_new_key_restarts_the_previous_container_with_its_own(host: Host) -> None:
    host.run(DEPLOY, host.key("b"), replace=True)
    assert host.holds() == ("key-b", "key-a")  # the new container reads b; a is kept
    host.run(ROLLBACK, str(host.tmp / "b.key"), replace=True)
    assert host.holds() == ("key-a", None)
    assert oct(host.copy.stat().st_mode & 0o777) == "0o440"


def test_a_rollback_from_a_plan_without_a_key_finds_the_previous_containers_key_in_place(host: Host) -> None:
    host.run(DEPLOY, None, replace=True)
    assert host.holds() == ("key-a", None)  # not removed before the launch: the set-aside container mounts it
    host.run(ROLLBACK, None, replace=True)
    assert host.holds() == ("key-a", None)


def test_a_commit_removes_what_no_container_uses(host: Host) -> None:
    host.run(DEPLOY, host.key("b"), replace=True)
    host.run(COMMIT, str(host.tmp / "b.key"), replace=True)
    assert host.holds() == ("key-b", None)
    host.run(DEPLOY, None, replace=True)
    host.run(COMMIT, None, replace=True)
    assert host.holds() == (None, None)


def test_a_kept_container_under_a_plan_without_a_key_loses_the_stale_copy_at_once(host: Host) -> None:
    host.run(DEPLOY, None, replace=False)
    assert host.holds() == (None, None)
