"""The run record (serving/record/run_record.py): each key is added by the one role KEYS names, with a set_fact of
refdeploy_run through the refdeploy_run_add filter, and the manifest role reads the record, never another role's
variables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.record.run_record import KEYS, RunRecordError, add

ROLES = Path(__file__).resolve().parents[3] / "ansible" / "roles"


ADD = '"{{ refdeploy_run | default(none) | refdeploy_run_add(_run_items) }}"'


def _adds(task: dict[str, Any]) -> bool:
    facts = task.get("ansible.builtin.set_fact")
    return isinstance(facts, dict) and "refdeploy_run" in facts


def _records(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [node["vars"]["_run_items"]] if _adds(node) else []
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


def test_the_record_is_only_added_to_and_by_one_form() -> None:
    # A set_fact that set refdeploy_run another way (replacing it, or without the key check) could drop what an
    # earlier role added; the record stays a variable, never returned as a fact (see run_record.py).
    forms = set()
    for tasks in ROLES.glob("*/tasks/*.yml"):
        text = tasks.read_text()
        forms |= {m.group(1) for m in re.finditer(r"(?m)^\s+refdeploy_run: (\S+(?: \S+)*?)(?:  # .*)?$", text)}
    assert forms == {ADD}, forms


def test_the_filter_refuses_a_key_no_role_owns() -> None:
    from serving.bridge.playbooks import run_add

    assert run_add(None, {"replaced": False}) == {"replaced": False}
    with pytest.raises(RunRecordError, match="not a run record key: effective_config"):
        run_add({"replaced": False}, {"effective_config": {}})


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
