"""The run record (serving/record/run_record.py): each key is added by the one role KEYS names, with the
refdeploy_record action, and the manifest role reads the record, never another role's variables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.record.run_record import KEYS, RunRecordError, add

ROLES = Path(__file__).resolve().parents[3] / "ansible" / "roles"


def _records(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [node["refdeploy_record"]] if "refdeploy_record" in node else []
        return found + [r for v in node.values() for r in _records(v)]
    if isinstance(node, list):
        return [r for v in node for r in _records(v)]
    return []


def test_add_merges_and_refuses_a_key_no_role_owns() -> None:
    record = add(None, {"plan": {"gpu": None}})
    assert add(record, {"replaced": True}) == {"plan": {"gpu": None}, "replaced": True}
    assert record == {"plan": {"gpu": None}}  # not changed in place
    with pytest.raises(RunRecordError, match="not a run record key: serve_effective"):
        add(record, {"serve_effective": {}})


def test_each_key_is_added_by_the_role_that_owns_it() -> None:
    added: dict[str, set[str]] = {}
    for tasks in ROLES.glob("*/tasks/*.yml"):
        for args in _records(yaml.safe_load(tasks.read_text())):
            for key in args:
                added.setdefault(key, set()).add(tasks.parts[-3])
    assert added == {k: {role} for k, role in KEYS.items()}


def test_the_manifest_role_reads_only_the_run_record_and_its_own_readings() -> None:
    files = sorted(p for p in (ROLES / "manifest").glob("*/*.yml") if p.parent.name != "meta")
    text = "\n".join(re.sub(r"(?m)^\s*#.*$", "", p.read_text()) for p in files)  # comments may name anything
    others = {r.name for r in ROLES.iterdir() if r.is_dir() and r.name != "manifest"}
    # A variable (not an attribute after a dot) named with another role's prefix.
    names = re.findall(r"(?<![.\w])([a-z][a-z0-9_]*)", text)
    foreign = sorted({n for n in names for role in others if n.startswith(role + "_")})
    assert foreign == [], f"the manifest role reads other roles' variables: {foreign}"
    assert "refdeploy_plan" not in text and "refdeploy_run" not in text
    used = set(re.findall(r"manifest_run\.([a-z_]+)", text))
    assert used and used <= set(KEYS), used - set(KEYS)
