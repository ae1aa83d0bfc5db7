"""Action plugin refdeploy_lock: take or release the managed host's operation lock (serving/bridge/hostlock.py).

  - name: Take the host's lock
    refdeploy_lock:
      operation: deploy        # path: the lock directory; by default <refdeploy_state_dir>/lock
      state: acquired          # or released; or cleaned (with run: and note:), ansible/interrupted.yml

Acquired: `mkdir` of the lock directory on the host, then its holder.json; a lock held by another run fails the
task with the one line that names the holder (a dead run of this controller is taken over: what it left running,
its containers and a replacement it left half done, is removed or put back first, and the result says so; so
does a note an interrupted run's cleanup left). Released: removes the lock only if this run holds it and
no make target holds it across its plays (REFDEPLOY_RUN_HOLD: make profile, make validate). In check mode
nothing is written; a held lock still fails the task. Cleaned (ansible/interrupted.yml, for a run that ended
early): the run's containers removed, its lock released, a note left. The host side is a shell round trip per
step (serving/bridge/hostlock.py take_command, read_command, remove_command, cleanup_command; a second only to
take over a stale lock or to release): a module run would cost a Python start on the host, and the lock is on
every operation's path.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

# Where the inventory sets no refdeploy_state_dir (its paths.yml does).
DEFAULT_STATE_DIR = "/var/lib/refdeploy"


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "operation", "state", "run", "note"))

    def _host(self, command: str) -> tuple[str, str]:
        """The reply of one of hostlock's shell commands: (word, text)."""
        from serving.bridge import hostlock

        got = dict(self._low_level_execute_command(command, sudoable=True))
        word, text = hostlock.parse_reply(str(got.get("stdout", "")))
        if got.get("rc") != 0 or not word or word == "error":
            said = text or str(got.get("stderr", "")).strip() or f"exit {got.get('rc')}"
            raise AnsibleError(f"the lock on the host: {said[-300:]}")
        return word, text

    def _default_path(self, task_vars: dict[str, Any]) -> str:
        state_dir = self._templar.template(task_vars.get("refdeploy_state_dir") or DEFAULT_STATE_DIR)
        return f"{str(state_dir).rstrip('/')}/lock"

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.bridge import hostlock

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        # The host's lock: <refdeploy_state_dir>/lock (the inventory's paths.yml), unless a task names another.
        path = str(self._task.args.get("path") or "").rstrip("/") or self._default_path(task_vars)
        operation = str(self._task.args.get("operation", "deploy"))
        state = str(self._task.args.get("state", "acquired"))
        host = str(task_vars.get("inventory_hostname", ""))
        # Ansible runs each task in a worker forked from ansible-playbook: its parent is the run, unless the
        # wrapper (serving/bridge/play.py) named the run.
        run = hostlock.this_run(os.getppid())

        if state == "cleaned":  # ansible/interrupted.yml, for a run that ended early (serving/bridge/play.py)
            clean = hostlock.cleanup_command(path, str(self._task.args["run"]), dict(self._task.args.get("note") or {}))
            # The play's environment (DOCKER_HOST, a test host's replay seam) before it, as a module would have it.
            _word, text = self._host(f"{self._compute_environment_string()} {clean}".strip())
            # The note with what was cleaned: ansible/interrupted.yml writes it into the run's run directories.
            note = hostlock.parse_cleanup(text, dict(self._task.args.get("note") or {}))
            removed, lock = note["removed"].split(), note["lock"]
            said = (
                f"{host}: removed {', '.join(removed) if removed else 'no container'} of run {self._task.args['run']}; "
                f"the lock: {lock}"
            )
            changed = bool(removed) or lock == "released"
            return {**result, "changed": changed, "msg": said, "removed": removed, "lock": lock, "note": note}

        if state == "released":
            if self._task.check_mode:  # a check-mode run took nothing
                return {**result, "changed": False, "msg": "not held by this run: left as it is"}
            if not hostlock.releases(run, operation):
                return {**result, "changed": False, "msg": f"kept for make {run.hold}, which holds it to its end"}
            word, text = self._host(hostlock.read_command(path))
            mine = word == "held" and hostlock.is_ours(hostlock.parse_holder(text), run)
            if not mine or self._host(hostlock.remove_command(path, text))[0] != "removed":
                return {**result, "changed": False, "msg": "not held by this run: left as it is"}
            return {**result, "changed": False, "msg": f"released {path}"}

        record = json.dumps(hostlock.holder(operation, run))
        take = hostlock.read_command(path) if self._task.check_mode else hostlock.take_command(path, record)
        word, text = self._host(take)
        took_over = None
        if word == "held":
            held = hostlock.parse_holder(text) if text else None
            if hostlock.is_ours(held, run):
                return {**result, "changed": False, "msg": "already held by this run"}
            if not hostlock.is_stale(held, run):
                return {**result, "failed": True, "msg": hostlock.refusal(host, operation, path, held)}
            took_over = held
            if not self._task.check_mode:
                # Only while it still reads as it did: a run that took it meanwhile keeps it.
                self._host(hostlock.remove_command(path, text))
                word, text = self._host(hostlock.take_command(path, record))
        if self._task.check_mode:
            return {**result, "changed": False, "msg": "check mode: the lock is free; not taken"}
        if word != "took":  # another run took it between the test and the mkdir
            held = hostlock.parse_holder(text) if text else None
            return {**result, "failed": True, "msg": hostlock.refusal(host, operation, path, held)}
        msg = f"took {path} for make {run.hold or operation}"
        warnings: list[str] = []
        if took_over:
            msg += f" (taken over from a run of this controller that is gone: pid {took_over.get('pid')})"
            # Before anything else runs on the host: what the dead run left running (its containers, a half-done
            # replacement), in the play's environment (DOCKER_HOST) as the cleanup above.
            dead = str(took_over.get("run_id", ""))
            env = self._compute_environment_string()
            removed, restored = hostlock.parse_cleaned(self._host(f"{env} {hostlock.takeover_command(dead)}")[1])
            msg += f"; removed what run {dead} left: {', '.join(removed) if removed else 'no container'}" + (
                f"; put back {', '.join(restored)}, which it had set aside to replace" if restored else ""
            )
            warnings.append(msg)
        note = hostlock.parse_holder(text) if text else None
        if note:  # shown once, at every verbosity: what the last interrupted run left, and what was cleaned
            warnings.append(hostlock.interrupted_line(host, note))
        out = {**result, "changed": False, "msg": msg, "taken_over": took_over, "interrupted_before": note}
        if warnings:
            out["warnings"] = [*out.get("warnings", []), *warnings]
        return out
