"""The Hugging Face token's copy (ansible/roles/serve/tasks/hf_token.yml, and commit.yml's removal): a directory of
its own holding the token, root:RUNTIME_GID 0750 and 0440, which the container mounts read-only (serving/plan/render.py
with_hf_token). A new token replaces the file inside the same directory, so the running container's mount sees it; a
plan without a token removes the copy at once, or, through a replacement, only at the commit (the container set
aside may mount it until then). The serve role's own tasks run here for real, through ansible-playbook on this
machine, with the copy in a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.ansible_run import run_playbook

SERVE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "serve"
DEPLOY: list[dict[str, Any]] = yaml.safe_load((SERVE / "tasks/hf_token.yml").read_text())
COMMIT = [t for t in yaml.safe_load((SERVE / "tasks/commit.yml").read_text())
          if t["name"] == "Serve | Remove the key copies no container uses any more"]  # fmt: skip
_ROLE_VARS = {k: v for k, v in yaml.safe_load((SERVE / "vars/main.yml").read_text()).items() if "_key_" in k}


class Host:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.copy = tmp_path / "secrets" / "refdeploy-vllm.hf-token"

    def token(self, name: str) -> str:
        path = self.tmp / f"{name}.token"
        path.write_text(f"hf_{name}\n")
        path.chmod(0o600)
        return str(path)

    def run(self, tasks: list[dict[str, Any]], token_file: str | None, replace: bool) -> None:
        api = {"key_file": None, "key_copy": str(self.tmp / "secrets" / "refdeploy-vllm.api-key"),
               "key_gid": os.getgid(), "hf_token_file": token_file, "hf_token_copy": str(self.copy)}  # fmt: skip
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks,
                 "vars": {**_ROLE_VARS, "refdeploy_plan": {"api": api}, "_serve_replace": replace,
                          "refdeploy_host": {"paths": {}}}}]  # fmt: skip
        (self.tmp / "play.yml").write_text(yaml.safe_dump(play))
        cp = run_playbook(self.tmp / "play.yml", {**os.environ, "ANSIBLE_NOCOLOR": "1"})
        assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
        assert "hf_a" not in cp.stdout + cp.stderr and "hf_b" not in cp.stdout + cp.stderr  # no_log

    def holds(self) -> str | None:
        token = self.copy / "token"
        return token.read_text().strip() if token.exists() else None


@pytest.fixture
def host(tmp_path: Path) -> Host:
    h = Host(tmp_path)
    h.run(DEPLOY, h.token("a"), replace=False)
    return h


def test_the_copy_is_the_runtime_groups_to_read_in_a_directory_of_its_own(host: Host) -> None:
    assert host.holds() == "hf_a"
    assert (host.copy.stat().st_mode & 0o777, (host.copy / "token").stat().st_mode & 0o777) == (0o750, 0o440)
    assert host.copy.parent.stat().st_mode & 0o777 == 0o700


def test_a_new_token_is_written_inside_the_directory_the_container_mounts(host: Host) -> None:
    inode = host.copy.stat().st_ino
    host.run(DEPLOY, host.token("b"), replace=False)
    assert host.holds() == "hf_b" and host.copy.stat().st_ino == inode


def test_a_plan_without_a_token_removes_the_copy_at_once_or_at_the_commit_of_a_replacement(host: Host) -> None:
    host.run(DEPLOY, None, replace=True)
    assert host.holds() == "hf_a"  # the container set aside may still mount it
    host.run(COMMIT, None, replace=True)
    assert not host.copy.exists()
    host.run(DEPLOY, host.token("a"), replace=False)
    host.run(DEPLOY, None, replace=False)
    assert not host.copy.exists()
