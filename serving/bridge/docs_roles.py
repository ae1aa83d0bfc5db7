"""docs/roles.md, rendered from the roles' argument specs (ansible/roles/*/meta/argument_specs.yml).

Each role's entry points, and each entry point's options: type, default (or that it is required), the choices and
the description, as Ansible validates them before any task runs. The specs are the one source; the page is
regenerated, never edited, and tests/unit/repo/test_docs_roles.py fails when it is out of date:

    .venv/bin/python -m serving.bridge.docs_roles > docs/roles.md
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

REGENERATE = ".venv/bin/python -m serving.bridge.docs_roles > docs/roles.md"
WIDTH = 120
ROOT = Path(__file__).resolve().parents[2]


def _default(spec: Mapping[str, Any]) -> str:
    if spec.get("required"):
        return "required"
    if "default" not in spec:
        return "optional, no default"
    value = spec["default"]
    shown = value if isinstance(value, str) and value else json.dumps(value)
    return f"default `{shown}`"


def _type(spec: Mapping[str, Any]) -> str:
    kind = str(spec.get("type", "str"))
    return f"{kind} of {spec['elements']}" if "elements" in spec else kind


def _description(spec: Mapping[str, Any]) -> str:
    text = spec.get("description", "")
    words = " ".join(str(t) for t in text) if isinstance(text, list) else str(text)
    if spec.get("choices") is not None:
        words += " One of: " + ", ".join(f"`{json.dumps(c) if c == '' else c}`" for c in spec["choices"]) + "."
    return " ".join(words.split())


def _options(options: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    for name, spec in options.items():
        head = f"- `{prefix}{name}` ({_type(spec)}, {_default(spec)}): "
        yield textwrap.fill(
            head + _description(spec), WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        if spec.get("options"):
            yield from _options(spec["options"], f"{prefix}{name}.")


def render(roles_dir: Path = ROOT / "ansible" / "roles") -> str:
    """The page, from every role under roles_dir that has meta/argument_specs.yml, roles and options in order."""
    lines = [
        "# Role variables",
        "",
        "Every role's entry points and their options, as each role's `meta/argument_specs.yml` declares them: Ansible",
        "checks a role's inputs against them before any of its tasks runs (for `tasks_from` too). Generated from the",
        "specs by `serving/bridge/docs_roles.py`; do not edit it: change the spec, then run",
        "",
        f"    {REGENERATE}",
        "",
        "(`tests/unit/repo/test_docs_roles.py` fails while this page and the specs differ). A role's public defaults",
        "are in its `defaults/main.yml`; the inventories set them per group (`inventory/<name>/group_vars/`).",
    ]
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = spec_file.parents[1].name
        entries: Mapping[str, Any] = yaml.safe_load(spec_file.read_text())["argument_specs"]
        lines += ["", f"## {role}"]
        for entry, spec in entries.items():
            lines += ["", f"### {role}: {entry}" if entry != "main" else f"### {role} (main)", ""]
            lines += textwrap.wrap(" ".join(str(spec.get("short_description", "")).split()), WIDTH)
            options = spec.get("options") or {}
            lines += ["", *_options(options)] if options else ["", "No options."]
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
