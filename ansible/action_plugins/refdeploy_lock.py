"""Action plugin refdeploy_lock: take or release the managed host's operation lock (serving/hostlock.py).

  - name: Take the host's lock
    refdeploy_lock:
      path: "{{ refdeploy_state_dir }}/lock"
      operation: deploy
      state: acquired          # or released

Acquired: `mkdir` of the lock directory on the host, then its holder.json; a lock held by another run fails the
task with the one line that names the holder (a dead run of this controller is taken over, and the result says
so). Released: removes the lock only if this run holds it. In check mode nothing is written; a held lock still
fails the task. The host side is one module run per step (library/refdeploy_lock_dir.py; a second one only to
take over a stale lock): each module run costs a Python start on the host, and the lock is on every run's path.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "operation", "state"))

    def _lock_dir(self, task_vars: dict[str, Any], **args: Any) -> dict[str, Any]:
        got = dict(self._execute_module(module_name="refdeploy_lock_dir", module_args=args, task_vars=task_vars))
        if got.get("failed"):
            raise AnsibleError(f"the lock on the host: {got.get('msg') or 'failed'}")
        return got

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving import hostlock

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        path = str(self._task.args["path"]).rstrip("/")
        operation = str(self._task.args.get("operation", "deploy"))
        state = str(self._task.args.get("state", "acquired"))
        host = str(task_vars.get("inventory_hostname", ""))
        controller = socket.gethostname()
        # Ansible runs each task in a worker forked from ansible-playbook: its parent is the run.
        pid = os.getppid()

        if state == "released":
            if self._task.check_mode:  # a check-mode run took nothing
                return {**result, "changed": False, "msg": "not held by this run: left as it is"}
            got = self._lock_dir(task_vars, path=path, state="released", controller=controller, pid=pid)
            if not got.get("removed"):
                return {**result, "changed": False, "msg": "not held by this run: left as it is"}
            return {**result, "changed": False, "msg": f"released {path}"}

        record = json.dumps(hostlock.holder(operation, controller, pid))
        got = self._lock_dir(task_vars, path=path, state="acquired", record=record)
        took_over = None
        if not got.get("took") and got.get("exists"):
            held = hostlock.parse_holder(got["holder"]) if got.get("holder") is not None else None
            if hostlock.is_ours(held, controller, pid):
                return {**result, "changed": False, "msg": "already held by this run"}
            if not hostlock.is_stale(held, controller):
                return {**result, "failed": True, "msg": hostlock.refusal(host, operation, path, held)}
            took_over = held
            if not self._task.check_mode:
                got = self._lock_dir(task_vars, path=path, state="acquired", record=record, replace=got["holder"])
        if self._task.check_mode:
            return {**result, "changed": False, "msg": "check mode: the lock is free; not taken"}
        if not got.get("took"):  # another run took it between the test and the mkdir
            held = hostlock.parse_holder(got["holder"]) if got.get("holder") is not None else None
            return {**result, "failed": True, "msg": hostlock.refusal(host, operation, path, held)}
        msg = f"took {path} for make {operation}"
        if took_over:
            msg += f" (taken over from a run of this controller that is gone: pid {took_over.get('pid')})"
        out = {**result, "changed": False, "msg": msg, "taken_over": took_over}
        if took_over:
            out["warnings"] = [*out.get("warnings", []), msg]  # shown at every verbosity
        return out
