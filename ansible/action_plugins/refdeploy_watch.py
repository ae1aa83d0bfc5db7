"""Action plugin refdeploy_watch: run a long command on the host, bounded, and say what it is doing every 10 s
(REFDEPLOY_PROGRESS_S sets the interval) until it ends:

  - name: Images | Build the runtime image
    refdeploy_watch:
      argv: [docker, build, ...]
      timeout_s: 3600          # timeout(1) --kill-after=10: rc 124 past it
      progress: docker_build   # or marked (the product's own progress lines), last_line; serving/bridge/progress.py
    environment: {DOCKER_BUILDKIT: "0"}
    register: build            # as the command module's: rc, stdout, stderr, *_lines, start, end, delta

      ... Images | Build the runtime image: step 9/14 RUN pip install … | Collecting torch (40 s so far, …)

Why not the command module with Ansible's async: its output comes back only at the end, and each async_status
poll is a Python module run on the host (a few hundred ms of CPU on a 2-core host that is being measured).
Here every step is a command through the connection's shell, no module run at all (each costs 0.35-0.5 s here,
more on a loaded host): the start runs the command detached (setsid -f), its stdout and stderr in a private
mktemp directory, with the task's environment before it (as the command module would have it); polls are
`cat`/`tail`, once a second; the end reads both files exactly (base64) and removes the directory in one round
trip. Over SSH these may carry login noise: every reply is read from its marked lines. An interrupted run
(Ctrl-C, the task's timeout) stops the command before the task ends.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# $1 timeout_s, then the argv. Prints the scratch directory. Inside it: pid (timeout(1)'s), stdout, stderr,
# and rc once the command has ended (written to rc.tmp first, so a poll never reads half of it).
_START = r"""
d=$(mktemp -d "${TMPDIR:-/tmp}/refdeploy-watch.XXXXXX") || exit 1
setsid -f sh -c '
  d=$1; t=$2; shift 2
  timeout --kill-after=10 "$t" "$@" </dev/null >"$d/stdout" 2>"$d/stderr" &
  echo $! >"$d/pid"
  wait $!
  echo $? >"$d/rc.tmp" && mv "$d/rc.tmp" "$d/rc"
' refdeploy-watch "$d" "$@" </dev/null >/dev/null 2>&1 || exit 1
# Only once the command runs (its pid written, after setsid(2)) does this session end: an SSH session that closed
# first once took the starting shell with it, and the task then waited for an exit code that nothing would write.
i=0
while [ ! -s "$d/pid" ]; do
  i=$((i + 1))
  [ "$i" -le 300 ] || {
    echo "waited 30 s for the detached shell to start the command and write its pid in $d/pid; it did not" >&2
    rm -rf -- "$d"; exit 1; }
  sleep 0.1
done
echo "$d"
"""


def with_run_label(argv: list[str]) -> list[str]:
    """A `docker run` carries the run's label (serving/bridge/hostlock.py RUN_LABEL): a run that ends early has
    its containers removed by it (ansible/interrupted.yml). Other commands are left as they are."""
    from serving.bridge import hostlock

    run_id = os.environ.get(hostlock.ENV_RUN_ID, "")
    if not run_id or argv[:2] != ["docker", "run"]:
        return argv
    return [*argv[:2], "--label", f"{hostlock.RUN_LABEL}={run_id}", *argv[2:]]


POLL_S = 1.0
# Past timeout(1)'s bound and its --kill-after 10 s, the exit code is due; this much more, and it never will be
# (the wrapper that writes it is gone): the task fails instead of waiting for ever.
RC_GRACE_S = 40.0
# timeout(1) gone and still no exit code this long (polls a second apart): the shell that waits on it and writes the
# code died with it (killed with its session, OOM), and none will come; the task fails then, not at the bound.
GONE_GRACE_S = 10.0
# Printed by a poll while timeout(1) (its pid in the scratch directory) still runs.
_RUNNING = "refdeploy-watch-running"
TAIL_BYTES = 4096
# $1 the scratch directory: both outputs, each as one marked base64 line, then the directory goes.
_COLLECT = r"""
d=$1
printf 'refdeploy-watch-out: %s\n' "$(base64 -w0 "$d/stdout" 2>/dev/null)"
printf 'refdeploy-watch-err: %s\n' "$(base64 -w0 "$d/stderr" 2>/dev/null)"
rm -rf -- "$d"
"""


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("argv", "timeout_s", "progress"))

    def _sh(self, cmd: str) -> dict[str, Any]:
        return dict(self._low_level_execute_command(cmd, sudoable=True))

    def _tail(self, path: str, mode: str) -> str:
        """The end of a file, for the progress line (over SSH with a tty, login noise may come first); for a
        docker build, the last step's line first (serving/bridge/progress.py tail_command)."""
        from serving.bridge import progress

        got = self._sh(progress.tail_command(mode, path, TAIL_BYTES))
        return str(got.get("stdout", "")) if got.get("rc") == 0 else ""

    def _exit_code(self, scratch: str) -> tuple[int | None, bool]:
        """(the command's exit code once it has ended: the one line of rc that is a number, whether timeout(1) still
        runs), in one round trip."""
        q = shlex.quote(scratch)
        got = self._sh(f'cat {q}/rc 2>/dev/null || {{ kill -0 "$(cat {q}/pid)" 2>/dev/null && echo {_RUNNING}; }}')
        out = str(got.get("stdout", ""))
        codes = re.findall(r"(?m)^\s*(\d+)\s*$", out) if got.get("rc") == 0 else []
        return (int(codes[-1]) if codes else None), _RUNNING in out

    def _collect(self, scratch: str) -> tuple[str, str]:
        """The command's stdout and stderr, exactly (base64, read from the marked lines after any login noise);
        the scratch directory is removed in the same round trip."""
        from serving.bridge.hostshell import decoded

        got = self._sh(" ".join(shlex.quote(a) for a in ("sh", "-c", _COLLECT, "refdeploy-watch", scratch)))
        text = str(got.get("stdout", ""))
        return decoded(text, "refdeploy-watch-out") or "", decoded(text, "refdeploy-watch-err") or ""

    def _args(self) -> tuple[list[str], float, str]:
        from serving.bridge import progress

        argv = [str(a) for a in self._task.args.get("argv") or []]
        mode = str(self._task.args.get("progress", "last_line"))
        try:
            bound_s = float(self._task.args["timeout_s"])
        except (KeyError, TypeError, ValueError):
            bound_s = 0.0
        if not argv or bound_s <= 0 or mode not in progress.MODES:
            raise AnsibleActionFail(
                f"refdeploy_watch needs argv (a list), timeout_s (seconds) and progress ({', '.join(progress.MODES)})"
            )
        return argv, bound_s, mode

    def _wait(self, scratch: str, mode: str, bound_s: float, started: float) -> int:
        """The command's exit code, once it has ended; a progress line every interval until then."""
        from serving.bridge import progress

        name, interval = self._task.get_name().strip(), progress.interval_s()
        shown, gone_since = started, None
        while True:
            rc, running = self._exit_code(scratch)
            if rc is not None:
                return rc
            now = time.monotonic()
            gone_since = None if running else (gone_since or now)
            if gone_since is not None and now - gone_since > GONE_GRACE_S:
                raise AnsibleActionFail(
                    f"no exit code from {name}: waited for it in {scratch}/rc, but timeout(1) (the pid in "
                    f"{scratch}/pid) has not run for {now - gone_since:.0f} s and the shell that waits on it wrote "
                    "none (killed with its session?)"
                )
            if now - started > bound_s + RC_GRACE_S:
                raise AnsibleActionFail(
                    f"no exit code from {name} {now - started:.0f} s after it started (bound {bound_s:g} s): waited "
                    f"for it in {scratch}/rc; the process that waits on the command is gone (killed with its "
                    "session?); the command is stopped if it runs"
                )
            if now - shown >= interval:
                shown = now
                tails = self._tail(f"{scratch}/stdout", mode), self._tail(f"{scratch}/stderr", "last_line")
                display.display(progress.ticker(name, progress.status_line(mode, *tails), now - started, bound_s))
            time.sleep(POLL_S)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.bridge import progress

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        argv, bound_s, mode = self._args()
        argv = with_run_label(argv)
        if self._task.check_mode:
            return {**result, "changed": False, "skipped": True, "msg": "check mode: not run"}
        started, start_wall = time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S")
        # The task's environment (DOCKER_HOST, DOCKER_BUILDKIT, a test host's replay seam) before the command.
        start = " ".join(shlex.quote(a) for a in ("sh", "-c", _START, "refdeploy-watch", f"{bound_s:g}", *argv))
        begun = self._sh(f"{self._compute_environment_string()} {start}".strip())
        dirs = re.findall(r"(?m)^(/\S*/refdeploy-watch\.\S+)\s*$", str(begun.get("stdout", "")))
        if begun.get("rc") != 0 or not dirs:
            why = str(begun.get("stderr") or begun.get("stdout") or "").strip()[-300:]
            return {**result, "failed": True, "rc": begun.get("rc"), "msg": f"could not start {argv[0]}: {why}"}
        scratch = dirs[-1]
        rc, collected = None, False
        try:
            rc = self._wait(scratch, mode, bound_s, started)
            stdout, stderr = self._collect(scratch)
            collected = True
        finally:
            if rc is None:  # interrupted: stop the command (timeout(1) passes the signal on)
                self._sh(f"kill -TERM $(cat {shlex.quote(scratch)}/pid) 2>/dev/null")
            if not collected:
                self._sh(f"rm -rf -- {shlex.quote(scratch)}")
        if mode == "marked":
            stderr = progress.without_marked(stderr)
        stdout, stderr = stdout.rstrip("\n"), stderr.rstrip("\n")
        msg = "" if rc == 0 else f"{argv[0]} exited {rc}" + (f" (past its bound of {bound_s:g} s)" if rc == 124 else "")
        return {
            **result,
            "changed": True,
            "failed": rc != 0,
            "rc": rc,
            "cmd": argv,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_lines": stdout.splitlines(),
            "stderr_lines": stderr.splitlines(),
            "start": start_wall,
            "end": time.strftime("%Y-%m-%d %H:%M:%S"),
            "delta": f"{time.monotonic() - started:.1f} s",
            "msg": msg,
        }
