"""A file and its directory in one module run (ansible/library/refdeploy_write_file.py), run as Ansible runs it,
on this machine: made with their modes, left alone when nothing differs, replaced with a backup, and check
mode touches nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.helpers.ansible_run import run_module


def write_file(args: dict[str, Any], *extra: str, fails: bool = False) -> dict[str, Any]:
    owner = {"owner": str(os.getuid()), "group": str(os.getgid())}
    return run_module("refdeploy_write_file", {**owner, **args}, *extra, fails=fails)


def test_the_directory_and_file_are_made_with_their_modes_then_left_alone(tmp_path: Path) -> None:
    dest = tmp_path / "rendered" / "spec.json"
    args = {"dest": str(dest), "content": "{}\n", "mode": "0600", "dir_mode": "0700"}
    assert write_file(args)["changed"]
    assert dest.read_text() == "{}\n"
    assert (dest.stat().st_mode & 0o777, dest.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    again = write_file({**args, "backup": True})
    assert not again["changed"] and "backup_file" not in again
    dest.chmod(0o644)
    assert write_file(args)["changed"] and dest.stat().st_mode & 0o777 == 0o600


def test_new_content_replaces_the_file_keeping_a_backup_and_check_mode_writes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "spec.json"
    dest.write_text("old\n")
    checked = write_file({"dest": str(dest), "content": "new\n", "backup": True}, "--check")
    assert checked["changed"] and "backup_file" not in checked and dest.read_text() == "old\n"
    got = write_file({"dest": str(dest), "content": "new\n", "backup": True, "mode": "0600"})
    assert got["changed"] and got["dest"] == str(dest) and dest.read_text() == "new\n"
    assert Path(got["backup_file"]).read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["spec.json", Path(got["backup_file"]).name])
    assert write_file({"dest": str(tmp_path / "none" / "x"), "content": "x"}, "--check")["changed"] is True
    assert not (tmp_path / "none").exists()


def test_several_files_go_into_their_directory_in_one_run_and_only_those_that_differ_are_written(
    tmp_path: Path,
) -> None:
    """The bench's driver, its modules and its plan in one module run instead of one copy each."""
    out = tmp_path / "run-bench"
    args = {"dest": str(out), "files": {"a.py": "print(1)\n", "plan.json": "{}"}, "mode": "0644", "dir_mode": "0770"}
    got = write_file(args)
    assert got["changed"] and sorted(got["files"]) == [str(out / "a.py"), str(out / "plan.json")]
    assert (out / "a.py").read_text() == "print(1)\n" and (out / "plan.json").read_text() == "{}"
    assert (out.stat().st_mode & 0o777, (out / "a.py").stat().st_mode & 0o777) == (0o770, 0o644)
    (out / "plan.json").write_text('{"runs": 2}')
    again = write_file(args)
    assert again["changed"] and again["files"] == [str(out / "plan.json")] and (out / "plan.json").read_text() == "{}"
    assert write_file(args) == {**write_file(args), "changed": False, "files": []}


def test_a_file_name_that_leaves_the_directory_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    args = {"dest": str(tmp_path / "out"), "files": {"../escape": "x", "ok": "y"}}
    got = write_file(args, fails=True)
    assert got["msg"] == "files: each name must be a file's name in dest, with no '/': ../escape"
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape").exists()
