"""Callback plugin refdeploy_fleet: at the end of a run over several hosts, the roll's summary (make deploy) or the
table of hosts by must-match differences (make verify), decided in serving/record/fleet.py.

A roll stops at its first failure (deploy.yml: max_fail_percentage 0), and Ansible then runs nothing more, so
the summary cannot be a task: it is printed here, from what the run saw. A run over one host prints nothing.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

DOCUMENTATION = """
name: refdeploy_fleet
type: aggregate
short_description: the roll's summary and the verify table of a group
description: At the end of a deploy or verify over several hosts, name the hosts done, failed and untouched.
requirements: []
"""

# The plays whose hosts are a roll or a verify (their names in ansible/deploy.yml and ansible/verify.yml).
ROLL_PLAY = "Deploy the vLLM serving stack"
VERIFY_PLAY = "Verify what runs against a reference manifest"

display = Display()


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "refdeploy_fleet"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._kind: str | None = None
        self._group = ""
        self._targeted: dict[str, list[str]] = {}
        self._failed: dict[str, dict[str, str]] = {"roll": {}, "verify": {}}
        self._verify: dict[str, dict[str, Any]] = {}

    def v2_playbook_on_play_start(self, play: Any) -> None:
        name = play.get_name().strip()
        self._kind = "roll" if name == ROLL_PLAY else "verify" if name == VERIFY_PLAY else None
        if self._kind is None or self._kind in self._targeted:
            return
        # The hosts the play targets, --limit applied, in inventory order (the order serial rolls them in); not
        # only this batch (serial restricts the inventory to it: ignore_restrictions). VariableManager keeps the
        # inventory privately; it is the one the play runs on.
        inventory = play.get_variable_manager()._inventory
        self._targeted[self._kind] = [h.name for h in inventory.get_hosts(play.hosts, ignore_restrictions=True)]
        limit = getattr(inventory, "_subset", None)
        pattern = play.hosts if isinstance(play.hosts, list) else [play.hosts]
        self._group = ",".join(limit or pattern)

    def _fail(self, result: Any, why: str) -> None:
        # The last failure a host saw says most (deploy.yml's rescue ends in the line naming what was rolled back).
        if self._kind is not None:
            self._failed[self._kind][result._host.get_name()] = why

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not ignore_errors:
            self._fail(result, str(result._result.get("msg") or "failed"))

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._fail(result, f"unreachable: {result._result.get('msg', '')}")

    def v2_runner_on_ok(self, result: Any) -> None:
        if self._kind == "verify" and result._task.action in ("refdeploy_verify",):
            self._verify[result._host.get_name()] = dict(result._result)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        from serving.record import fleet

        processed = list(stats.processed)
        # A failure a rescue recovered from is not the host's: only hosts Ansible counts as failed are.
        ended_failed = {h for h in processed if stats.failures.get(h) or stats.dark.get(h)}
        roll = self._targeted.get("roll") or []
        if len(roll) > 1:
            failed = {h: why for h, why in self._failed["roll"].items() if h in ended_failed}
            lines = fleet.roll_summary(self._group, roll, processed, failed)
            display.display("\n".join(lines), color="bright red" if failed else "green")
        hosts = self._targeted.get("verify") or []
        if len(hosts) > 1:
            failed = {h: why for h, why in self._failed["verify"].items() if h in ended_failed}
            display.display("\n".join(fleet.verify_table(self._group, hosts, self._verify, failed)))
