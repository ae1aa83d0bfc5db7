"""make's way into ansible-playbook: it names the run, and cleans up after a run that ends early.

    python -m serving.bridge.play [--hold] [--var NAME=ENV]... [--ansible-args TEXT] OPERATION -- \
        ansible-playbook -i INV --limit HOST ... PLAYBOOK.yml

The make variables reach ansible-playbook here, never on a command line: each --var NAME=ENV is the extra var
NAME with the value of the environment variable ENV (the make variable, exported; empty: left out), written to
an extra-vars file that ends the command line. That file is YAML with every value tagged `!unsafe`: Ansible
templates extra vars wherever they are used, from JSON as much as from key=value (an -e '{"x": "{{ lookup(...)
}}"}' runs the lookup), and `!unsafe` is the one form whose strings it never templates. The values were checked
by serving/config/make_vars.py before; this keeps them data should one slip through. --ansible-args is the
operator's ANSIBLE_ARGS, split as a shell would (shlex, nothing expanded) and refused in one line where it sets
one of the NAMEs (make_vars.ansible_args_error): the make variable is the way to set it.

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
was removed, and the run directories written, incomplete). A make profile that ended early (without KEEP=1) left
the engine running with the torch profiler configured, and maybe profiling: then ansible/deploy.yml runs too, with
the profiler off, as profile.yml's last play would have: the profiling engine is stopped and replaced by the plan's
(restore_argv). A run that ends normally costs nothing more here.

Standard library only, and nothing of serving/ imported but hostlock's and make_vars's names: it starts before
every make target that touches a host.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from serving.bridge.hostlock import ENV_RUN_HOLD, ENV_RUN_ID, ENV_RUN_PID
from serving.config.make_vars import ENV_NAME, ansible_args_error, unsafe_yaml

# refdeploy_run_dir appends every run directory it creates to this file (the note names them).
ENV_RUN_DIRS = "REFDEPLOY_RUN_DIRS_FILE"
# An interrupted run's result in each run directory it created: the cleanup's note (docs/artifacts.md).
RESULT_FILE = "interrupted.json"
CLEANUP_PLAYBOOK = Path(__file__).resolve().parents[2] / "ansible" / "interrupted.yml"
RESTORE_PLAYBOOK = Path(__file__).resolve().parents[2] / "ansible" / "deploy.yml"
# ansible-playbook's exit codes (ansible-core's cli): 2 a host failed (its `always:` ran), 4 and 5 the command
# line or a playbook did not parse (nothing ran). Anything else non-zero ended a run where its `always:` may not
# have run: 1 an error, 3 a host unreachable, 99 interrupted by the user, 250 an unexpected error.
_CLEAN_RC = frozenset((1, 3, 99, 250))
# After the signal, ansible-playbook ends its tasks and exits in seconds; this long and it is stopped.
STOP_GRACE_S = 60.0
CLEANUP_TIMEOUT_S = 180.0
# The engine put back after an interrupted make profile: a replacement, an engine start (minutes on a GPU host; the
# deploy bounds each step itself). Killed mid-replace it would leave NAME-previous: this bound is a last resort.
RESTORE_TIMEOUT_S = 3600.0


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


def _with_playbook(argv: list[str], playbook: Path) -> list[str]:
    """argv with its playbook replaced: the run's own options (inventory, --limit, -e) kept."""
    books = [i for i, a in enumerate(argv) if a.endswith((".yml", ".yaml")) and not argv[i - 1].startswith("-")]
    if not books:
        raise ValueError(f"no playbook in {argv}")
    return [*argv[: books[-1]], str(playbook), *argv[books[-1] + 1 :]]


def restores_engine(operation: str, argv: list[str]) -> bool:
    """Whether a run that ended early left the engine profiling: make profile, unless KEEP=1 asked to keep it so."""
    return operation == "profile" and "refdeploy_profiler_keep=true" not in argv


def restore_argv(argv: list[str]) -> list[str]:
    """deploy.yml on the run's hosts with the profiler off (profile.yml's last play), its other -e values kept."""
    return [*_with_playbook(argv, RESTORE_PLAYBOOK), "-e", json.dumps({"refdeploy_profiler": ""})]


def cleanup_argv(argv: list[str], run_id: str, note: dict[str, str]) -> list[str]:
    """The cleanup's ansible-playbook: the run's own options (inventory, --limit, -e), its playbook replaced."""
    out = _with_playbook(argv, CLEANUP_PLAYBOOK)
    # One JSON -e: a key=value -e is split at spaces.
    extra = {"refdeploy_cleanup_run": run_id, **{f"refdeploy_cleanup_{k}": v for k, v in note.items()}}
    return [*out, "-e", json.dumps(extra)]


def write_interrupted(run_dirs: list[str], note: dict[str, str]) -> list[str]:
    """Each run directory the run created that is still there, with RESULT_FILE in it: the note of what ended the run
    and when (the host's interrupted.json, hostlock cleanup_command), so that none is left without a result, and
    what the run had written beside it is kept whole. The cleanup's play writes it again with what it removed and
    where the host kept the run's scratch (ansible/interrupted.yml); this one stands where that play could not run.
    The directories written, absolute."""
    kept = [str(Path(d).resolve()) for d in run_dirs if Path(d).is_dir()]
    said = json.dumps({**note, "run_dirs": " ".join(kept)}, indent=2, sort_keys=True) + "\n"
    for d in kept:
        (Path(d) / RESULT_FILE).write_text(said)
        (Path(d) / RESULT_FILE).chmod(0o600)  # beside the run's readings, as private as its directory
    return kept


USAGE = (
    "usage: python -m serving.bridge.play [--hold] [--var NAME=ENV]... [--ansible-args TEXT] OPERATION -- "
    "ansible-playbook ARGS..."
)


def parse(args: list[str]) -> tuple[bool, dict[str, str], str, str, list[str]] | None:
    """(hold, {extra var: environment variable}, ANSIBLE_ARGS, operation, ansible-playbook's argv), None: unusable."""
    hold, owned, extra = False, {}, ""
    while args and args[0].startswith("--") and args[0] != "--":
        if args[0] == "--hold":
            hold, args = True, args[1:]
        elif args[0] in ("--var", "--ansible-args") and len(args) > 1:
            if args[0] == "--ansible-args":
                extra = args[1]
            else:
                name, eq, env = args[1].partition("=")
                if not eq or not name.isidentifier() or not env:
                    return None
                owned[name] = env
            args = args[2:]
        else:
            return None
    if len(args) < 3 or args[1] != "--":
        return None
    return hold, owned, extra, args[0], args[2:]


def main(args: list[str]) -> int:
    parsed = parse(args)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    hold, owned, extra, operation, argv = parsed
    make_name = {v: k for k, v in ENV_NAME.items()}
    if (line := ansible_args_error(extra, {n: make_name.get(e, e) for n, e in owned.items()}, operation)) is not None:
        print(line, file=sys.stderr)
        return 2
    values = {name: v for name, env in owned.items() if (v := os.environ.get(env, ""))}
    argv = [*argv, *shlex.split(extra)]
    if not values:
        return _main(hold, operation, argv)
    with tempfile.TemporaryDirectory(prefix="refdeploy-extra-vars.") as tmp:
        vars_file = Path(tmp) / "make.yml"
        vars_file.write_text(unsafe_yaml(values))
        # After the operator's options: the last -e wins in Ansible, so that an operator's own @file naming one of
        # these (not read here) does not override the checked value.
        return _main(hold, operation, [*argv, "-e", f"@{vars_file}"])


def _main(hold: bool, operation: str, argv: list[str]) -> int:
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
        # Those still there (a refused run removes its own while it is empty: refdeploy_run_dir discard), each given
        # its result, RESULT_FILE, even one the run wrote nothing into: the run's partial output may be on the host
        # only, under the run's ids (hostlock cleanup_command), and the result says where.
        created = Path(dirs_file.name).read_text().split()
        note = {
            "run_id": run_id,
            "operation": operation,
            "why": _why(rc, signals.got),
            "ended_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "run_ids": " ".join(Path(d).name for d in created),
        }
        note["run_dirs"] = " ".join(write_interrupted(created, note))
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
        elif restores_engine(operation, argv):
            print(
                f"make {operation}: putting the plan's engine back, the torch profiler off (ansible/deploy.yml)",
                file=sys.stderr,
                flush=True,
            )
            if _run(restore_argv(argv), clean_env, signals, cleanup=True, limit_s=RESTORE_TIMEOUT_S) != 0:
                print(
                    f"make {operation}: the engine could not be put back: it may still run with the torch profiler "
                    "configured; make deploy HOST=<host> puts the plan's spec back",
                    file=sys.stderr,
                )
        return rc if rc > 0 else 130
    finally:
        Path(dirs_file.name).unlink(missing_ok=True)


def _run(
    argv: list[str], env: dict[str, str], signals: _Signals, cleanup: bool = False, limit_s: float = CLEANUP_TIMEOUT_S
) -> int:
    """Run argv to its end. A signal to this process is the child's too (the same process group) for Ctrl-C;
    SIGTERM and SIGHUP sent to this process alone are passed on as SIGINT, Ansible's graceful stop. Bounded:
    STOP_GRACE_S after a signal, the child is killed. The cleanup runs in a session of its own, out of reach of
    a second Ctrl-C (stopping it would leave what it is there to remove), bounded by limit_s."""
    child = subprocess.Popen(argv, env=env, start_new_session=cleanup)
    seen = len(signals.got)
    deadline = time.monotonic() + limit_s if cleanup else None
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
