"""The lock's host side (ansible/library/refdeploy_lock_dir.py), run as Ansible runs it, on this machine: one
module run takes the lock or says who holds it, and release removes only the named holder's lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.ansible_run import run_module


def lock_dir(args: dict[str, Any], *extra: str) -> dict[str, Any]:
    return run_module("refdeploy_lock_dir", args, *extra)


def test_the_first_take_makes_the_lock_and_the_second_says_who_holds_it(tmp_path: Path) -> None:
    lock = tmp_path / "state" / "lock"
    record = json.dumps({"operation": "deploy", "controller": "ctl-1", "pid": 42})
    got = lock_dir({"path": str(lock), "record": record})
    assert (got["took"], got["changed"]) == (True, False)
    assert lock.stat().st_mode & 0o777 == 0o700
    assert json.loads((lock / "holder.json").read_text()) == json.loads(record)
    again = lock_dir({"path": str(lock), "record": json.dumps({"pid": 43})})
    assert (again["took"], again["exists"], json.loads(again["holder"])["pid"]) == (False, True, 42)


def test_a_stale_holder_is_replaced_only_while_it_still_reads_the_same(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.mkdir()
    (lock / "holder.json").write_text("old")
    kept = lock_dir({"path": str(lock), "record": "new", "replace": "other"})
    assert (kept["took"], kept["holder"]) == (False, "old")
    taken = lock_dir({"path": str(lock), "record": "new", "replace": "old"})
    assert taken["took"] and (lock / "holder.json").read_text() == "new\n"


def test_release_removes_only_the_named_holders_lock_and_check_mode_touches_nothing(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    held = {"path": str(lock), "state": "released", "controller": "ctl-1", "pid": 42}
    checked = lock_dir({"path": str(lock), "record": json.dumps({"controller": "ctl-1", "pid": 42})}, "--check")
    assert (checked["took"], checked["exists"]) == (False, False) and not lock.exists()
    lock_dir({"path": str(lock), "record": json.dumps({"controller": "ctl-1", "pid": 42})})
    assert not lock_dir({**held, "pid": 43})["removed"] and lock.is_dir()
    assert not lock_dir({**held, "controller": "ctl-2"})["removed"] and lock.is_dir()
    assert not lock_dir(held, "--check")["removed"] and lock.is_dir()
    assert lock_dir(held)["removed"] and not lock.exists()
