"""One operation at a time per managed host: the lock that every make target that changes a host takes.

The lock is a directory on the managed host (`mkdir` is atomic, on every filesystem the state directory can be
on), with `holder.json` inside saying who holds it: the operation, and the run's identity (the controller's
machine id and a random run id, serving/bridge/play.py), with the controller's host name, the run's pid and that
process's start time for people and for the stale check, and when it started. The playbooks take it first and
release it in an `always:`; a make target of several plays (profile, validate) holds it from its first play to
its last (REFDEPLOY_RUN_HOLD: the plays inside it keep it). What Ansible cannot run (Ctrl-C, a dropped
connection) the run's wrapper cleans up after it (serving/bridge/play.py, ansible/interrupted.yml); what nothing
runs after (a SIGKILL, a lost controller) leaves it behind: a lock whose run was on this controller and is no
longer alive is taken over, saying so, and what that run left running is removed first (takeover_command); any
other is refused with its holder and what to do.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# What serving/bridge/play.py hands every ansible-playbook it runs (and so every worker and plugin).
ENV_RUN_ID = "REFDEPLOY_RUN_ID"
ENV_RUN_PID = "REFDEPLOY_RUN_PID"
ENV_RUN_HOLD = "REFDEPLOY_RUN_HOLD"
# The label every container a run starts through refdeploy_watch carries: what a cleanup removes.
RUN_LABEL = "refdeploy.run"


def machine_id() -> str:
    """The controller's machine id (machine-id(5)); its host name where it has none (a bare container)."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return "host:" + socket.gethostname()


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (proc(5) stat field 22): with the pid, one process,
    never a later one given the same pid. "" when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow its last ")".
    return stat.rpartition(")")[2].split()[19]


@dataclass(frozen=True)
class Run:
    """Who is running: the controller's machine id and the run's random id, and the process that lives as long
    as the run (the wrapper's, or ansible-playbook's when it was started directly)."""

    machine_id: str
    run_id: str
    pid: int
    pid_start: str
    hold: str = ""  # the make target holding the lock across its plays ("": each play releases its own)


def this_run(playbook_pid: int, env: Any = None) -> Run:
    """The run a plugin works for: the wrapper's (REFDEPLOY_RUN_ID, REFDEPLOY_RUN_PID), else the ansible-playbook
    process it was forked from (started directly: its pid and start time stand for the run)."""
    env = os.environ if env is None else env
    run_id = str(env.get(ENV_RUN_ID, ""))
    pid = int(env.get(ENV_RUN_PID) or playbook_pid) if run_id else playbook_pid
    start = process_start(pid)
    return Run(machine_id(), run_id or f"pid-{pid}-{start}", pid, start, str(env.get(ENV_RUN_HOLD, "")))


def holder(operation: str, run: Run, now: datetime | None = None) -> dict[str, Any]:
    started = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "operation": run.hold or operation,
        "machine_id": run.machine_id,
        "run_id": run.run_id,
        "controller": socket.gethostname(),
        "pid": run.pid,
        "pid_start": run.pid_start,
        "started_utc": started,
    }


def parse_holder(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def run_alive(pid: int, start: str) -> bool:
    """The process is there, is the one that started then (a pid reused since is not it), and has not ended: a run
    killed a moment ago stays a zombie until it is reaped (its parent, make, was killed with it), not alive."""
    now = process_start(pid)
    return bool(now) and (not start or now == start) and _state(pid) not in ("Z", "X", "")


def _state(pid: int) -> str:
    """proc(5) stat field 3: R, S, D, ..., Z (ended, not yet reaped), X (dead); "" when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


def is_stale(held: dict[str, Any] | None, run: Run, alive: Any = run_alive) -> bool:
    """A lock left by a run of this controller that is gone (interrupted beyond Ansible's reach). Another
    controller's run cannot be checked from here: never stale."""
    if not held or held.get("machine_id") != run.machine_id:
        return False
    try:
        return not alive(int(held["pid"]), str(held.get("pid_start", "")))
    except (KeyError, TypeError, ValueError):
        return False


def is_ours(held: dict[str, Any] | None, run: Run) -> bool:
    return bool(held) and held.get("machine_id") == run.machine_id and held.get("run_id") == run.run_id  # type: ignore[union-attr]


def releases(run: Run, operation: str) -> bool:
    """Whether a play's release lets the lock go: always, unless a make target holds it across its plays and
    this is not that target's own release (deploy.yml inside make profile keeps it)."""
    return not run.hold or run.hold == operation


def refusal(host: str, operation: str, path: str, held: dict[str, Any] | None) -> str:
    """The one line of a refused operation: who holds the host, since when, and what to do."""
    if held is None:
        who = "another operation (its holder.json is not written yet, or unreadable)"
    else:
        run = str(held.get("run_id", "")) or "?"
        who = (
            f"make {held.get('operation', '?')} (run {run[:24]}) from {held.get('controller', '?')} "
            f"(pid {held.get('pid', '?')}), since {held.get('started_utc', '?')}"
        )
    return (
        f"make {operation} on {host} is refused, nothing was changed: the host is held by {who}. Wait for it to "
        f"finish, or, if that run is gone (interrupted), remove its lock on {host} (rm -r {path}) and run again"
    )


def interrupted_line(host: str, note: dict[str, Any]) -> str:
    """What the last run that ended early left on host, and what its cleanup did (the note cleanup_command wrote)."""
    removed = str(note.get("removed", "")).split()
    lock = {"released": "released its lock", "free": "found no lock", "kept": "left the lock to another run"}.get(
        str(note.get("lock", "")), "did not get to the lock"
    )
    where = str(note.get("run_dirs", "")) or "none written"
    on_host = f"; on {host}: {note['host_dirs']}" if note.get("host_dirs") else ""
    return (
        f"the previous make {note.get('operation', '?')} on {host} (run {str(note.get('run_id', '?'))[:24]}) "
        f"ended early ({note.get('why', '?')}, {note.get('ended_utc', '?')}): its cleanup removed "
        f"{', '.join(removed) if removed else 'no container'} and {lock}; what it wrote, incomplete: {where}"
        f"{on_host}"
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
  # What an interrupted run's cleanup left for the next operation to say (cleanup_command below): said once.
  n=$(dirname -- "$p")/interrupted.json; note=""
  [ -f "$n" ] && note=$(base64 -w0 "$n") && rm -f -- "$n"
  printf '%s\n' "$rec" >"$p/holder.json" && echo "refdeploy-lock: took $note" && exit 0
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


# After a run that ended early (serving/bridge/play.py): remove the containers it started (RUN_LABEL), each
# docker call bounded; release the lock if this run still holds it; leave a note beside the lock for the next
# operation, saying what was cleaned and what the run left on the host: its scratch directories beside the lock
# (bench-runs/, probe-runs/: named as its run directories are), kept for what they hold. $1 the lock, $2 the run
# id, $3 the note (JSON, less what was cleaned), $4 the names of the run's directories.
_CLEANUP = r"""
p=$1; run=$2; note=$3; names=$4; removed=""; lock=kept; left=""
for r in $names; do
  for d in "$(dirname -- "$p")"/*-runs/"$r" "$(dirname -- "$p")"/*-runs/"$r"-*; do [ -d "$d" ] && left="$left $d"; done
done
for c in $(timeout 30 docker ps -aq --filter "label=refdeploy.run=$run" 2>/dev/null); do
  n=$(timeout 30 docker inspect -f '{{.Name}}' "$c" 2>/dev/null)
  timeout 60 docker rm -f "$c" >/dev/null 2>&1 && removed="$removed ${n#/}"
done
if [ -f "$p/holder.json" ] && grep -q "\"run_id\": \"$run\"" "$p/holder.json"; then rm -rf -- "$p" && lock=released
elif [ ! -e "$p" ]; then lock=free; fi
if [ -n "$removed" ] || [ "$lock" = released ]; then
  printf '%s, "removed": "%s", "lock": "%s", "host_dirs": "%s"}\n' "${note%\}}" "${removed# }" "$lock" \
    "${left# }" >"$(dirname -- "$p")/interrupted.json"
fi
echo "refdeploy-lock: cleaned $lock$removed;${left# }"
"""


# After a takeover, with the lock now this run's: what the dead run ($1, its run id) left running. A SIGKILL or a
# lost controller ran no cleanup (serving/bridge/play.py), so it is the one above but for the lock and the note:
# the run's containers (RUN_LABEL) go; and a replacement it left half done (the serving container set aside as
# NAME-previous, ansible/roles/serve/tasks/replace.yml; only a deploy makes one, under the lock) is rolled back as
# launch.yml tells an operator to: the unverified NAME removed, NAME-previous renamed NAME and started. Reply:
# `cleaned <removed names>;<restored names>`.
_TAKEOVER = r"""
run=$1; removed=""; restored=""
for c in $([ -n "$run" ] && timeout 30 docker ps -aq --filter "label=refdeploy.run=$run" 2>/dev/null); do
  n=$(timeout 30 docker inspect -f '{{.Name}}' "$c" 2>/dev/null)
  timeout 60 docker rm -f "$c" >/dev/null 2>&1 && removed="$removed ${n#/}"
done
for n in $(timeout 30 docker ps -a --filter label=org.refdeploy.profile --format '{{.Names}}' 2>/dev/null); do
  case $n in *-previous) s=${n%-previous} ;; *) continue ;; esac
  if timeout 30 docker inspect "$s" >/dev/null 2>&1; then
    timeout 60 docker rm -f "$s" >/dev/null 2>&1 || continue
    removed="$removed $s"
  fi
  timeout 30 docker rename "$n" "$s" && timeout 60 docker start "$s" >/dev/null && restored="$restored $s"
done
echo "refdeploy-lock: cleaned ${removed# };${restored# }"
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


def cleanup_command(path: str, run_id: str, note: dict[str, Any]) -> str:
    """Remove what run_id left on the host (its containers; the lock if still its): `cleaned <lock> <names...>;<host
    dirs...>`, lock one of released (it held it), free, kept (another run holds it now), the host dirs its scratch
    directories kept (parse_cleanup reads it). The note goes beside the lock when anything was cleaned, for the
    next take to say."""
    # The ids of the run directories the run created (its note's run_ids; an older note's run_dirs), which name its
    # scratch directories on the host, whether or not the controller kept the directory.
    ids = str(note.get("run_ids") or note.get("run_dirs") or "")
    names = " ".join(d.rstrip("/").rsplit("/", 1)[-1] for d in ids.split())
    return _sh(_CLEANUP, path, run_id, json.dumps(note), names)


def parse_cleanup(text: str, note: dict[str, Any]) -> dict[str, Any]:
    """The note of cleanup_command's reply: `note` with what was cleaned (removed, lock, host_dirs), as the host's
    interrupted.json holds it (whether or not it wrote one), for the run directories the run left (ansible/
    interrupted.yml writes it into each: an interrupted run's result)."""
    head, _, left = text.partition(";")
    lock, _, names = head.partition(" ")
    return {**note, "removed": " ".join(names.split()), "lock": lock, "host_dirs": " ".join(left.split())}


def takeover_command(dead_run_id: str) -> str:
    """Remove what a dead run left running, its lock already taken over: `cleaned <removed>;<restored>`."""
    return _sh(_TAKEOVER, dead_run_id)


def parse_cleaned(text: str) -> tuple[list[str], list[str]]:
    """(containers removed, serving containers put back) of takeover_command's reply."""
    removed, _, restored = text.partition(";")
    return removed.split(), restored.split()


def parse_reply(stdout: str) -> tuple[str, str]:
    """(word, rest) of the reply's marked line; the holder's text decoded for `held`. ("", "") when there is none."""
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip().startswith(MARK)]
    if not lines:
        return "", ""
    word, _, rest = lines[-1][len(MARK) :].strip().partition(" ")
    if word in ("held", "took"):
        try:
            rest = base64.b64decode(rest, validate=True).decode(errors="replace")
        except ValueError:
            rest = ""
    return word, rest
