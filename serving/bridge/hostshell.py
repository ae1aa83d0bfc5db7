"""A shell script on the managed host through the connection itself (an action plugin's
_low_level_execute_command), its exit status, stdout and stderr read back exactly.

Why not the shell module: each module run starts Python on the host (0.3-0.5 s here, seconds on a loaded host),
and a capture's steps around its window are on the path an operator waits for. Over SSH with a tty, stdout and
stderr arrive merged and login noise may come first, so the script's own outputs are captured to files and printed
back as marked base64 lines: what is read back is exactly what the script wrote.

  command = hostshell.wrap("docker inspect x; echo hi >&2")    # one line of sh for the connection
  reply = hostshell.parse(connection_stdout)                      # Reply(rc, stdout, stderr) or None
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass

MARK = "refdeploy-sh"

# $1 the script. Its outputs go to a private scratch directory, then come back as one marked line each.
_WRAP = r"""
d=$(mktemp -d "${TMPDIR:-/tmp}/refdeploy-sh.XXXXXX") || exit 1
sh -c "$1" </dev/null >"$d/out" 2>"$d/err"; rc=$?
printf '%s-rc: %s\n' "$2" "$rc"
printf '%s-out: %s\n' "$2" "$(base64 -w0 "$d/out")"
printf '%s-err: %s\n' "$2" "$(base64 -w0 "$d/err")"
rm -rf -- "$d"
"""


@dataclass(frozen=True)
class Reply:
    rc: int
    stdout: str
    stderr: str


def wrap(script: str, environment: str = "") -> str:
    """The connection's command for script; environment: the task's (an action plugin's
    _compute_environment_string(), e.g. DOCKER_HOST) before it."""
    command = " ".join(shlex.quote(a) for a in ("sh", "-c", _WRAP, "refdeploy-sh", script, MARK))
    return f"{environment} {command}".strip()


def decoded(text: str, mark: str) -> str | None:
    """The last `<mark>: <base64>` line of text, decoded; None where there is none."""
    found = re.findall(rf"(?m)^{re.escape(mark)}: ?([A-Za-z0-9+/=]*)\s*$", text)
    return base64.b64decode(found[-1]).decode(errors="replace") if found else None


def parse(text: str) -> Reply | None:
    """The script's reply from the connection's stdout; None where it did not run to its end (no marked lines)."""
    codes = re.findall(rf"(?m)^{MARK}-rc: (\d+)\s*$", text)
    out, err = decoded(text, f"{MARK}-out"), decoded(text, f"{MARK}-err")
    if not codes or out is None or err is None:
        return None
    return Reply(int(codes[-1]), out, err)
