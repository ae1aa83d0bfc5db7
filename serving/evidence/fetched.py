"""What a probe wrote on the host, collected after its window, and unpacked on the controller.

after_window_script / parse_after_window: the one round trip to the host after a probe container's window (the
action plugin refdeploy_collect runs it through serving/bridge/hostshell.py): the probe containers are removed first, so
that nothing still writes what is packed; the serving container is read (the "after" of the window); what the
probe wrote is packed where it did not pack it itself, and its SHA-1 given for the fetch; and the lines of the
engine's log the controller asks for come back from its end.

unpack: the fetched archive unpacked into the run directory under its own name, with the records the controller
adds beside it, and the archive removed. In-process on the controller: as unarchive, command (mv), file and copy
tasks delegated to localhost it was five module runs, 0.3-0.9 s each here, after every capture window.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# At most this many matching log lines come back (the end of what matched).
LOG_LINES_MAX = 512


class UnpackError(ValueError):
    pass


def unpack(
    archive: Path | None, dest: Path, top: str, name: str, records: Mapping[str, Any], merge: bool = False
) -> Path:
    """dest/name: the archive's top-level directory `top`, unpacked (tarfile's "data" filter: no absolute paths,
    no links out of it, no devices) and renamed, or an empty directory where nothing was fetched; each record
    written into it as JSON. The archive is removed once unpacked. With `merge`, dest/name may exist already (the
    bench writes its manifest there first): what the archive holds is moved into it, and a name both have is
    refused before anything moves."""
    target = dest / name
    if archive is not None and archive.exists():
        staging = dest / f".{name}.unpacking"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
        except (tarfile.TarError, OSError) as e:
            raise UnpackError(f"{archive}: {e}") from None
        unpacked = staging / top
        if not unpacked.is_dir():
            raise UnpackError(f"{archive}: no {top}/ in it")
        both = sorted(p.name for p in unpacked.iterdir() if (target / p.name).exists()) if merge else []
        if (target.exists() and not merge) or both:
            shutil.rmtree(staging)
            said = f"{archive}: {', '.join(both)} in {target} already" if both else f"{target} exists already"
            raise UnpackError(said)
        if target.exists():
            for p in unpacked.iterdir():
                p.rename(target / p.name)
        else:
            unpacked.rename(target)
        shutil.rmtree(staging)
        archive.unlink()
    target.mkdir(parents=True, exist_ok=True)
    for file, data in records.items():
        if "/" in file or file.startswith("."):
            raise UnpackError(f"record {file!r}: a plain file name, please")
        (target / file).write_text(json.dumps(data, indent=4, sort_keys=True) + "\n")
    return target


# Seconds the collection waits for Docker to notice that the serving container's PID 1 died (after_window_script).
WAIT_FOR_DOCKER_S = 10


def after_window_script(
    out: str,
    top: str,
    serving: str,
    remove: Sequence[str],
    log_match: str = "",
    log_tail: int = 0,
    before_pid: int = 0,
) -> str:
    """The host's side of a probe's collection (sh). out: the probe's output directory on the host, holding
    top/ or top.tar.gz; serving: the serving container's name; remove: the probe containers' names;
    before_pid: the serving container's PID before the window (0: unknown).

    Docker learns of its container's death asynchronously: just after the kernel killed vLLM's PID 1 (and the
    probe with it), `docker inspect` can still say "running" with the dead PID, and the capture would be judged
    to have run throughout (seen in CI, under load). While the PID before the window is dead or dying and Docker
    still reports it, the script waits for Docker to catch up (at most WAIT_FOR_DOCKER_S). Dead or dying: gone
    from /proc, a zombie not yet reaped by containerd's shim (state Z; seen for 0.35 s here, while the probe's
    `docker run` had already returned 137), or still tearing down (PF_EXITING, 0x4, in /proc/PID/stat's flags)."""
    q = shlex.quote
    archive = f"{out.rstrip('/')}/{top}.tar.gz"
    pid = int(before_pid)
    lines = [
        f"docker rm --force {' '.join(q(n) for n in remove)} >/dev/null 2>&1",
        # /proc/PID/stat after the command's closing parenthesis: state, then ppid..tpgid, then flags (proc(5)).
        "ending() { read -r s 2>/dev/null < /proc/$p/stat || return 0; s=${s##*') '}; set -- $s; "
        '[ "$1" = Z ] || [ "$1" = X ] || [ $(( ${7:-0} & 4 )) -ne 0 ]; }',
        f"p={pid}; i=0; while [ $p -gt 0 ] && ending && [ $i -lt {WAIT_FOR_DOCKER_S * 5} ] && "
        f'[ "$(docker container inspect --format \'{{{{.State.Pid}}}}\' {q(serving)} 2>/dev/null)" = "$p" ]; '
        "do sleep 0.2; i=$((i+1)); done",
        # One line: the container's object, or what docker said instead ("No such container", or no daemon).
        f"docker container inspect --format '{{{{json .}}}}' {q(serving)} 2>&1 | tr '\\n' ' '"
        " | sed 's/^/serving /'; echo",
        f"if [ ! -e {q(archive)} ] && [ -d {q(out)}/{q(top)} ]; then",
        f"  tar -C {q(out)} -czf {q(archive)} {q(top)} && echo packed",
        "fi",
        f"if [ -e {q(archive)} ]; then echo \"archive $(sha1sum {q(archive)} | cut -d' ' -f1)\"; fi",
    ]
    if log_match and log_tail > 0:
        lines.append(
            f"docker logs --tail {int(log_tail)} {q(serving)} 2>&1 | grep -F -- {q(log_match)}"
            f" | tail -n {LOG_LINES_MAX} | sed 's/^/log /'"
        )
    return "\n".join(lines) + "\n"


@dataclass
class AfterWindow:
    serving: dict[str, Any] | None  # docker inspect's object; None where the container is gone
    serving_error: str  # what docker said when it could not be read
    packed: bool  # the archive was made here (the probe was stopped before it could)
    archive_sha1: str | None  # None: nothing to fetch
    log: list[str] = field(default_factory=list)


def parse_after_window(stdout: str) -> AfterWindow:
    serving: dict[str, Any] | None = None
    error, packed, sha1, log = "", False, None, []
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "serving" and rest.lstrip().startswith("{"):
            got = json.loads(rest)
            serving = got if isinstance(got, dict) else None
        elif word == "serving":
            error = rest.strip()
        elif word == "packed":
            packed = True
        elif word == "archive" and rest.strip():
            sha1 = rest.strip()
        elif word == "log":
            log.append(rest)
    return AfterWindow(serving, error, packed, sha1, log)


def serving_unreadable(after: AfterWindow) -> bool:
    """Docker could not say whether the serving container exists (it is not just gone): the daemon did not
    answer, or refused."""
    return after.serving is None and bool(after.serving_error) and "No such" not in after.serving_error
