"""Action plugin refdeploy_shell: a short shell script on the host through the connection, with the task's
environment, and no module run (serving/bridge/hostshell.py says why):

  - name: Capture | Remove a probe container a stopped capture left behind
    refdeploy_shell:
      cmd: docker rm --force refdeploy-vllm-probe
    register: got              # as the shell module's: rc, stdout, stderr, *_lines; failed where rc != 0

For the steps an operator waits on (a capture's, around its window); elsewhere the shell module is the usual
choice. Skipped in check mode unless the task says check_mode: false, as a command would be.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("cmd",))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.bridge import hostshell

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        script = str(self._task.args.get("cmd") or "")
        if not script.strip():
            return {**result, "failed": True, "msg": "refdeploy_shell needs cmd (a shell script)"}
        if self._task.check_mode:
            return {**result, "changed": False, "skipped": True, "msg": "check mode: not run"}
        got = dict(self._low_level_execute_command(hostshell.wrap(script, self._compute_environment_string())))
        reply = hostshell.parse(str(got.get("stdout", "")))
        if reply is None:
            said = str(got.get("stderr") or got.get("stdout") or "").strip()[-300:]
            return {**result, "failed": True, "rc": got.get("rc"), "msg": f"the script did not run on the host: {said}"}
        stdout, stderr = reply.stdout.rstrip("\n"), reply.stderr.rstrip("\n")
        return {
            **result,
            "changed": True,
            "failed": reply.rc != 0,
            "rc": reply.rc,
            "cmd": script,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_lines": stdout.splitlines(),
            "stderr_lines": stderr.splitlines(),
            "msg": "" if reply.rc == 0 else "non-zero return code",
        }
