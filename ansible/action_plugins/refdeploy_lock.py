"""Action plugin refdeploy_lock: take or release the managed host's operation lock (serving/hostlock.py).

  - name: Take the host's lock
    refdeploy_lock:
      path: "{{ refdeploy_state_dir }}/lock"
      operation: deploy
      state: acquired          # or released

Acquired: `mkdir` of the lock directory on the host, then its holder.json; a lock held by another run fails the
task with the one line that names the holder (a dead run of this controller is taken over, and the result says
so). Released: removes the lock only if this run holds it. In check mode nothing is written; a held lock still
fails the task. Every host command is an argv (the command module): no value is put into a shell string.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "operation", "state"))

    def _argv(self, argv: list[str], task_vars: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self._execute_module(
                module_name="ansible.legacy.command",
                module_args={"argv": argv},
                task_vars=task_vars,
            )
        )

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
        holder_file = f"{path}/holder.json"

        # Reads use modules that run in check mode too (stat, slurp); the command module skips there.
        def read_holder() -> dict[str, Any] | None:
            got = self._execute_module(
                module_name="ansible.legacy.slurp", module_args={"src": holder_file}, task_vars=task_vars
            )
            if got.get("failed") or "content" not in got:
                return None
            return hostlock.parse_holder(base64.b64decode(str(got["content"])).decode(errors="replace"))

        def exists() -> bool:
            got = self._execute_module(
                module_name="ansible.legacy.stat", module_args={"path": path}, task_vars=task_vars
            )
            return bool((got.get("stat") or {}).get("exists"))

        if state == "released":
            held = read_holder()
            if not hostlock.is_ours(held, controller, pid) or self._task.check_mode:
                return {**result, "changed": False, "msg": "not held by this run: left as it is"}
            self._argv(["rm", "-rf", "--", path], task_vars)
            return {**result, "changed": False, "msg": f"released {path}"}

        took_over = None
        if exists():
            held = read_holder()
            if hostlock.is_ours(held, controller, pid):
                return {**result, "changed": False, "msg": "already held by this run"}
            if not hostlock.is_stale(held, controller):
                return {**result, "failed": True, "msg": hostlock.refusal(host, operation, path, held)}
            took_over = held
            if not self._task.check_mode:
                self._argv(["rm", "-rf", "--", path], task_vars)
        if self._task.check_mode:
            return {**result, "changed": False, "msg": "check mode: the lock is free; not taken"}
        self._argv(["mkdir", "-p", "--", path.rsplit("/", 1)[0] or "/"], task_vars)
        made = self._argv(["mkdir", "-m", "0700", "--", path], task_vars)
        if made.get("rc") != 0:  # another run took it between the test and the mkdir
            return {**result, "failed": True, "msg": hostlock.refusal(host, operation, path, read_holder())}
        record = json.dumps(hostlock.holder(operation, controller, pid))
        self._argv(["sh", "-c", 'printf "%s\\n" "$2" > "$1"', "write-holder", holder_file, record], task_vars)
        msg = f"took {path} for make {operation}"
        if took_over:
            msg += f" (taken over from a run of this controller that is gone: pid {took_over.get('pid')})"
        # The lock is the run's own bookkeeping, not a change to the host's configuration.
        out = {**result, "changed": False, "msg": msg, "taken_over": took_over}
        if took_over:
            out["warnings"] = [*out.get("warnings", []), msg]  # shown at every verbosity
        return out
