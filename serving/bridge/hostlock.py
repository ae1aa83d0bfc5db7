"""One operation at a time per managed host: the lock that deploy, bench, capture and probe-io take.

The lock is a directory on the managed host (`mkdir` is atomic, on every filesystem the state directory can be
on), with `holder.json` inside saying who holds it: the operation, the controller's host name and the
ansible-playbook's pid there, and when it started. The playbooks take it first and release it in an `always:`,
so every exit path Ansible runs releases it. What Ansible cannot run (a SIGKILL, a lost controller) leaves it
behind; a lock whose holder ran on this controller and is no longer alive is taken over, saying so, and any
other is refused with its holder and what to do.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
from datetime import UTC, datetime
from typing import Any


def holder(operation: str, controller: str, pid: int, now: datetime | None = None) -> dict[str, Any]:
    started = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"operation": operation, "controller": controller, "pid": pid, "started_utc": started}


def parse_holder(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(held: dict[str, Any] | None, controller: str, alive: Any = pid_alive) -> bool:
    """A lock left by a run of this controller that is gone (interrupted beyond Ansible's reach)."""
    if not held or held.get("controller") != controller:
        return False
    try:
        return not alive(int(held["pid"]))
    except (KeyError, TypeError, ValueError):
        return False


def is_ours(held: dict[str, Any] | None, controller: str, pid: int) -> bool:
    return bool(held) and held.get("controller") == controller and held.get("pid") == pid  # type: ignore[union-attr]


def refusal(host: str, operation: str, path: str, held: dict[str, Any] | None) -> str:
    """The one line of a refused operation: who holds the host, since when, and what to do."""
    if held is None:
        who = "another operation (its holder.json is not written yet, or unreadable)"
    else:
        who = (
            f"make {held.get('operation', '?')} from {held.get('controller', '?')} (pid {held.get('pid', '?')}), "
            f"since {held.get('started_utc', '?')}"
        )
    return (
        f"make {operation} on {host} is refused, nothing was changed: the host is held by {who}. Wait for it to "
        f"finish, or, if that run is gone (interrupted), remove its lock on {host} (rm -r {path}) and run again"
    )


# The host side: POSIX sh run through the connection's shell, one round trip each. Each was a module run
# (library/refdeploy_lock_dir.py), 0.35-0.5 s apiece here, twice on every operation's path; a shell round trip
# is about 0.03 s. Every value is an argument of `sh -c`, never part of the script. The reply is one marked line,
# found after any login noise an SSH session with a tty prints first.
MARK = "refdeploy-lock:"

_TAKE = r"""
p=$1; rec=$2
err=$(mkdir -p -- "$(dirname -- "$p")" 2>&1 && mkdir -m 700 -- "$p" 2>&1)
if [ $? -eq 0 ]; then
  printf '%s\n' "$rec" >"$p/holder.json" && echo "refdeploy-lock: took" && exit 0
  echo "refdeploy-lock: error cannot write $p/holder.json"
elif [ -e "$p" ] || [ -L "$p" ]; then
  echo "refdeploy-lock: held $(base64 -w0 "$p/holder.json" 2>/dev/null)"
else
  echo "refdeploy-lock: error $err"
fi
"""
_READ = r"""
p=$1
if [ -e "$p" ] || [ -L "$p" ]; then echo "refdeploy-lock: held $(base64 -w0 "$p/holder.json" 2>/dev/null)"
else echo "refdeploy-lock: free"; fi
"""
# Removes the lock only while its holder.json still reads as given (a stale holder, or this run's own).
_REMOVE = r"""
p=$1; was=$2
if [ "$(cat -- "$p/holder.json" 2>/dev/null)" = "$was" ] && rm -rf -- "$p"; then echo "refdeploy-lock: removed"
else echo "refdeploy-lock: kept"; fi
"""


def _sh(script: str, *args: str) -> str:
    return " ".join(shlex.quote(a) for a in ("sh", "-c", script, "refdeploy-lock", *args))


def take_command(path: str, record: str) -> str:
    """Make the lock directory (mode 0700, atomic) and its holder.json: `took`; or `held <holder.json, base64>`
    (empty when it has none yet), or `error <why>`."""
    return _sh(_TAKE, path, record)


def read_command(path: str) -> str:
    """Only read, for check mode: `held <base64>` or `free`."""
    return _sh(_READ, path)


def remove_command(path: str, holder_text: str) -> str:
    """Remove the lock if its holder.json still reads holder_text (trailing newlines aside): `removed` or `kept`."""
    return _sh(_REMOVE, path, holder_text.rstrip("\n"))


def parse_reply(stdout: str) -> tuple[str, str]:
    """(word, rest) of the reply's marked line; the holder's text decoded for `held`. ("", "") when there is none."""
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip().startswith(MARK)]
    if not lines:
        return "", ""
    word, _, rest = lines[-1][len(MARK) :].strip().partition(" ")
    if word == "held":
        try:
            rest = base64.b64decode(rest, validate=True).decode(errors="replace")
        except ValueError:
            rest = ""
    return word, rest
