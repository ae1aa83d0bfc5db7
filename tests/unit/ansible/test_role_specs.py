"""Every role entry point the playbooks use has an argument spec, so Ansible validates its inputs.

Ansible names an entry point by `tasks_from` verbatim: `tasks_from: io.yml` looks up a spec called "io.yml",
finds none and validates nothing (`-e probe_io_depths=64` then ran fio at QD6 and QD4). This test reads every
playbook and task file for the roles they use and checks that the spec exists, and that each spec's defaults
agree with the role's defaults/main.yml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
ROLES = ANSIBLE / "roles"


def _walk(node: Any) -> list[tuple[str, str]]:
    """(role, entry point) of every role use below a parsed playbook or task list."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
            if key in node:
                found.append((node[key]["name"], node[key].get("tasks_from", "main")))
        for role in node.get("roles") or []:
            found.append((role if isinstance(role, str) else role["role"], "main"))
        for v in node.values():
            found += _walk(v)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v)
    return found


def _uses() -> list[tuple[str, str, str]]:
    files = sorted(ANSIBLE.glob("*.yml")) + sorted(ANSIBLE.glob("tasks/*.yml")) + sorted(ROLES.glob("*/tasks/*.yml"))
    return sorted({(r, e, str(f.relative_to(ANSIBLE))) for f in files for r, e in _walk(yaml.safe_load(f.read_text()))})


def _specs(role: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    return data["argument_specs"]


def test_the_playbooks_use_roles_by_entry_point() -> None:
    assert ("probe_io", "main", "probe-io.yml") in _uses()
    assert ("plan", "replan", "roles/serve/tasks/model.yml") in _uses()


@pytest.mark.parametrize(("role", "entry", "where"), _uses())
def test_every_entry_point_in_use_has_an_argument_spec(role: str, entry: str, where: str) -> None:
    assert not entry.endswith((".yml", ".yaml")), f"{where}: tasks_from: {entry} skips the spec; write {entry[:-4]}"
    assert entry in _specs(role), f"{where}: role {role} has no argument spec for entry point {entry!r}"
    assert (ROLES / role / "tasks" / f"{entry}.yml").is_file()


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir() if (p / "meta/argument_specs.yml").is_file()))
def test_spec_defaults_agree_with_the_role_defaults(role: str) -> None:
    defaults_file = ROLES / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) or {} if defaults_file.is_file() else {}
    for entry, spec in _specs(role).items():
        for name, option in (spec.get("options") or {}).items():
            if name in defaults and "default" in option and "{{" not in str(defaults[name]):
                assert option["default"] == defaults[name], f"{role}:{entry}: {name} default {option['default']!r}"
    declared = {name for spec in _specs(role).values() for name in spec.get("options") or {}}
    missing = sorted(set(defaults) - declared)
    assert not missing, f"role {role}: defaults that no entry point's argument spec declares: {missing}"
