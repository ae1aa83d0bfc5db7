"""The roles' variables, checked before any role checks its own: one line naming each bad value and its allowed form.

Ansible validates a role's inputs against its `meta/argument_specs.yml` when the role starts, and a wrong-typed
value (`-e bench_runs=abc`) then fails with the whole spec of the role printed, some 80 lines. Every playbook plans
first, and the plan role's dependency (role `check_vars`, the action plugin refdeploy_check_vars) runs this before
the plan role's own check: every variable any role declares that is set (inventory, `-e`, defaults) is checked here
with Ansible's own validator against that role's spec. The specs stay the one definition of each variable's type and
choices (docs/roles.md is rendered from them too); this only says it in one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES_DIR = ROOT / "ansible" / "roles"

# Facts the playbooks set themselves (the plan's), not an operator's input: a replan finds them set.
SET_BY_THE_PLAYBOOKS = frozenset(("refdeploy_plan", "refdeploy_host"))

# How each spec type is written, for the line's "give ...", and a list's elements.
_FORMS = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "dict": "a mapping (YAML {key: value}; with -e, JSON)",
    "list": "a list (YAML [a, b]; with -e, JSON or comma-separated)",
    "str": "a string",
    "path": "a path",
}
_ELEMENTS = {"int": "whole numbers", "float": "numbers", "str": "strings", "bool": "true or false values"}


def role_options(roles_dir: Path = ROLES_DIR) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Every option of every role's entry points: name -> (role, its spec). A name belongs to one role's spec (the
    names carry their role's prefix); where two entry points declare it, the first in role order is taken."""
    found: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = spec_file.parents[1].name
        for entry in (yaml.safe_load(spec_file.read_text())["argument_specs"] or {}).values():
            for name, spec in (entry.get("options") or {}).items():
                if name not in SET_BY_THE_PLAYBOOKS:
                    found.setdefault(name, (role, spec))
    return found


def allowed(spec: Mapping[str, Any]) -> str:
    """The allowed form of a spec's value, in words: its type (and elements), its choices."""
    kind = str(spec.get("type", "str"))
    if spec.get("choices") is not None:
        return "one of " + ", ".join(json.dumps(c) if c == "" else str(c) for c in spec["choices"])
    if kind == "list" and spec.get("elements"):
        return f"a list of {_ELEMENTS.get(str(spec['elements']), spec['elements'])} (YAML [a, b]; with -e, JSON)"
    return _FORMS.get(kind, kind)


def _shown(name: str, value: Any) -> str:
    from serving.config.redact import is_secret_name, redact_text

    if is_secret_name(name):  # a refusal must not print what may be a secret
        return "<not shown>"
    # Nor one inside another value (a proxy URL's password), hidden before the cut, which could halve it.
    text = redact_text(value if isinstance(value, str) else json.dumps(value, default=str))
    return json.dumps(text[:60] + ("..." if len(text) > 60 else ""))


def problem(name: str, value: Any, spec: Mapping[str, Any]) -> str | None:
    """Why value is not one its spec allows, as Ansible's own validator judges it (with its conversions: "5" is a
    whole number), in one line naming the variable and the allowed form; None when it is allowed."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # type: ignore[import-untyped]

    checked = {k: v for k, v in spec.items() if k not in ("required", "default")}
    result = ArgumentSpecValidator({name: checked}).validate({name: value}, validate_role_argument_spec=True)
    if not result.error_messages:
        return None
    why = " ".join(str(spec.get("description", "")).split()).split(". ")[0].rstrip(".")
    return f"{name}={_shown(name, value)} is not {allowed(spec)}" + (f" ({why})" if why else "")


def check(values: Mapping[str, Any], options: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None) -> str | None:
    """One line naming every set variable whose value its role's spec does not allow, and how to set it; None when
    all are allowed. Unset (None) values are left to the roles (a required one is theirs to name)."""
    options = role_options() if options is None else options
    bad = [
        line
        for name in sorted(values)
        if name in options and values[name] is not None
        if (line := problem(name, values[name], options[name][1])) is not None
    ]
    if not bad:
        return None
    return "; ".join(bad) + ": set it in the inventory or with -e as docs/roles.md says"
