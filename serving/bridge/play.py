"""make's way into ansible-playbook: it names the run, and cleans up after a run that ends early.

    python -m serving.bridge.play [--hold] OPERATION -- ansible-playbook -i INV --limit HOST ... PLAYBOOK.yml

The run's identity goes to ansible-playbook in its environment (serving/bridge/hostlock.py): a random run id,
this process's pid (it lives as long as the run), and with --hold the make target that holds the host's lock
across its plays (profile, validate: their last play releases it). The lock's holder is that identity, and
every container the run starts through refdeploy_watch carries its label.

Ctrl-C reaches make's whole process group: ansible-playbook stops, but what it started on the host does not
(the commands run detached, and a docker client's signal does not stop its container), and Ansible's `always:`
blocks do not run. A dropped connection ends the play with the host unreachable, and leaves the same. So when
the run ends early (a signal, an unreachable host, Ansible's own error, or any failure of a --hold target) this
wrapper runs ansible/interrupted.yml for the same hosts: it removes the containers with this run's label,
releases the lock if the run still holds it, and leaves a note on the host that the next operation prints (what
was removed, and the run directories written, incomplete). A run that ends normally costs nothing more here.

Standard library only, and nothing of serving/ imported but hostlock's names: it starts before every make target
that touches a host.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from serving.bridge.hostlock import ENV_RUN_HOLD, ENV_RUN_ID, ENV_RUN_PID

# refdeploy_run_dir appends every run directory it creates to this file (the note names them).
ENV_RUN_DIRS = "REFDEPLOY_RUN_DIRS_FILE"
CLEANUP_PLAYBOOK = Path(__file__).resolve().parents[2] / "ansible" / "interrupted.yml"
# ansible-playbook's exit codes (ansible-core's cli): 2 a host failed (its `always:` ran), 4 and 5 the command
# line or a playbook did not parse (nothing ran). Anything else non-zero ended a run where its `always:` may not
# have run: 1 an error, 3 a host unreachable, 99 interrupted by the user, 250 an unexpected error.
_CLEAN_RC = frozenset((1, 3, 99, 250))
# After the signal, ansible-playbook ends its tasks and exits in seconds; this long and it is stopped.
STOP_GRACE_S = 60.0
CLEANUP_TIMEOUT_S = 180.0


class _Signals:
    def __init__(self) -> None:
        self.got: list[int] = []

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.got.append(signum)


def _why(rc: int, got: list[int]) -> str:
    if got:
        return f"interrupted by {signal.Signals(got[0]).name}"
    if rc < 0:
        return f"ansible-playbook killed by {signal.Signals(-rc).name}"
    return {3: "a host became unreachable", 99: "interrupted"}.get(rc, f"ansible-playbook exit {rc}")


def needs_cleanup(rc: int, got: list[int], hold: bool, argv: list[str]) -> bool:
    """Whether the run ended early enough that what it started may still run, or its lock may still be held."""
    if "--check" in argv or "-C" in argv or "--syntax-check" in argv:
        return False  # a check run starts nothing and takes no lock
    return bool(got) or rc < 0 or rc in _CLEAN_RC or (hold and rc != 0)


def cleanup_argv(argv: list[str], run_id: str, note: dict[str, str]) -> list[str]:
    """The cleanup's ansible-playbook: the run's own options (inventory, --limit, -e), its playbook replaced."""
    books = [i for i, a in enumerate(argv) if a.endswith((".yml", ".yaml")) and not argv[i - 1].startswith("-")]
    if not books:
        raise ValueError(f"no playbook in {argv}")
    out = [*argv[: books[-1]], str(CLEANUP_PLAYBOOK), *argv[books[-1] + 1 :]]
    # One JSON -e: a key=value -e is split at spaces.
    extra = {"refdeploy_cleanup_run": run_id, **{f"refdeploy_cleanup_{k}": v for k, v in note.items()}}
    return [*out, "-e", json.dumps(extra)]


def remove_if_empty(run_dir: Path) -> bool:
    """Remove a run directory that holds no file (empty directories in it included); True where none is left. A
    directory with a file in it is kept whole: what an interrupted run wrote is the operator's."""
    if not run_dir.is_dir():
        return True
    if any(p.is_file() or p.is_symlink() for p in run_dir.rglob("*")):
        return False
    for sub in sorted((p for p in run_dir.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        sub.rmdir()
    run_dir.rmdir()
    return True


def main(args: list[str]) -> int:
    hold = args[:1] == ["--hold"]
    args = args[1:] if hold else args
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m serving.bridge.play [--hold] OPERATION -- ansible-playbook ARGS...", file=sys.stderr)
        return 2
    operation, argv = args[0], args[2:]
    run_id = secrets.token_hex(8)
    dirs_file = tempfile.NamedTemporaryFile(prefix="refdeploy-run-dirs.", delete=False)  # noqa: SIM115
    dirs_file.close()
    env = {
        **os.environ,
        ENV_RUN_ID: run_id,
        ENV_RUN_PID: str(os.getpid()),
        ENV_RUN_HOLD: operation if hold else "",
        ENV_RUN_DIRS: dirs_file.name,
    }
    signals = _Signals()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signals)
    try:
        rc = _run(argv, env, signals)
        if not needs_cleanup(rc, signals.got, hold, argv):
            return rc
        # Those still there and holding something: a refused run removes its own while it is empty
        # (refdeploy_run_dir discard); one interrupted before it wrote anything is removed here. Their names are
        # the run's ids all the same: the host keeps its scratch directories under them (hostlock cleanup_command).
        created = Path(dirs_file.name).read_text().split()
        note = {
            "operation": operation,
            "why": _why(rc, signals.got),
            "ended_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "run_dirs": " ".join(d for d in created if not remove_if_empty(Path(d))),
            "run_ids": " ".join(Path(d).name for d in created),
        }
        print(
            f"make {operation} ended early ({note['why']}): removing what run {run_id} started on the host, "
            "and its lock",
            file=sys.stderr,
            flush=True,
        )
        clean_env = {k: v for k, v in env.items() if k not in (ENV_RUN_ID, ENV_RUN_PID, ENV_RUN_HOLD, ENV_RUN_DIRS)}
        crc = _run(cleanup_argv(argv, run_id, note), clean_env, signals, cleanup=True)
        if crc != 0:
            print(
                f"make {operation}: the cleanup of run {run_id} did not complete (exit {crc}): see `make status`; "
                f"containers labelled refdeploy.run={run_id} may still run on the host",
                file=sys.stderr,
            )
        return rc if rc > 0 else 130
    finally:
        Path(dirs_file.name).unlink(missing_ok=True)


def _run(argv: list[str], env: dict[str, str], signals: _Signals, cleanup: bool = False) -> int:
    """Run argv to its end. A signal to this process is the child's too (the same process group) for Ctrl-C;
    SIGTERM and SIGHUP sent to this process alone are passed on as SIGINT, Ansible's graceful stop. Bounded:
    STOP_GRACE_S after a signal, the child is killed. The cleanup runs in a session of its own, out of reach of
    a second Ctrl-C (stopping it would leave what it is there to remove), bounded by CLEANUP_TIMEOUT_S."""
    child = subprocess.Popen(argv, env=env, start_new_session=cleanup)
    seen = len(signals.got)
    deadline = time.monotonic() + CLEANUP_TIMEOUT_S if cleanup else None
    while True:
        try:
            return child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if not cleanup and len(signals.got) > seen:
            if any(s != signal.SIGINT for s in signals.got[seen:]):
                child.send_signal(signal.SIGINT)
            seen = len(signals.got)
            deadline = min(deadline or float("inf"), time.monotonic() + STOP_GRACE_S)
        if deadline is not None and time.monotonic() > deadline:
            child.kill()
            return child.wait()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
