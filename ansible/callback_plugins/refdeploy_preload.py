"""Callback plugin refdeploy_preload: import the serving package once, in ansible-playbook's own process.

Ansible runs every task in a worker process forked from ansible-playbook, so what a worker imports dies with it:
each task whose filter or action plugin asks the serving package for a decision (the plan, the running
container against it, the effective config, each worker rank, the manifest) imported serving.plan.plan and pydantic
again, about 0.25 s a task on a 2-core host. Imported here, before the first task, every worker inherits them.
Nothing is printed and nothing else changes; a serving package that does not import is left for the plugins
that need it to report.
"""

from __future__ import annotations

import importlib
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: refdeploy_preload
type: aggregate
short_description: import the serving package once, before the workers fork
description: Imports serving.bridge.playbooks (and with it serving.plan.plan) in ansible-playbook's process.
requirements: []
"""

# What the plugins import first: the filters' decisions (serving.bridge.playbooks, which imports serving.plan.plan), the
# manifest and the lock.
MODULES = ("serving.bridge.playbooks", "serving.record.manifest", "serving.bridge.hostlock")


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "refdeploy_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        for name in MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                return
