"""Every task of the roles' YAML, nested blocks included, with the file it is in: for tests that hold all of them to a
rule (directory modes, bounded waits)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROLES = Path(__file__).resolve().parents[2] / "ansible" / "roles"
_NESTED = ("block", "rescue", "always")


@dataclass(frozen=True)
class Task:
    file: str  # relative to ansible/roles
    name: str
    body: dict[str, Any]

    def module(self) -> tuple[str, Any] | None:
        """(module name, its arguments) of the task: the one key that is not a task keyword."""
        for key, value in self.body.items():
            if key not in _KEYWORDS and not key.startswith("_"):
                return key, value
        return None


_KEYWORDS = {
    "name", "when", "vars", "register", "loop", "loop_control", "with_items", "changed_when", "failed_when",
    "check_mode", "no_log", "tags", "become", "become_user", "delegate_to", "run_once", "until", "retries",
    "delay", "ignore_errors", "notify", "environment", "args", "listen", "diff", "throttle", "any_errors_fatal",
    "block", "rescue", "always", "delegate_facts", "timeout", "module_defaults",
}  # fmt: skip


def _walk(tasks: Any, file: str) -> Iterator[Task]:
    for t in tasks or []:
        if not isinstance(t, dict):
            continue
        yield Task(file, str(t.get("name", "")), t)
        for key in _NESTED:
            yield from _walk(t.get(key), file)


def role_tasks() -> Iterator[Task]:
    """Every task in ansible/roles/*/tasks/*.yml and handlers/*.yml."""
    for path in sorted([*ROLES.glob("*/tasks/*.yml"), *ROLES.glob("*/handlers/*.yml")]):
        yield from _walk(yaml.safe_load(path.read_text()), str(path.relative_to(ROLES)))
