"""The served files' page cache around each bench run, on the serving host: made cold or warm before the run
(`make_page_cache_state`), their residency read before and after it (fincore, through a helper process that keeps
CAP_FOWNER: `ResidencyReader`), and the engine processes' read volume (`engine_io`). images/vllm/bench_client.py
records them in each run's status.json.

  python3 -I bench_page_cache.py --residency-helper

is that helper (ResidencyReader.start): residency() of each JSON list of files read from stdin, as a JSON line on
stdout.

Standard library only, and nothing of its own beside it (the helper runs isolated, -I: no script directory on its
path): copied to the host beside bench_client.py (ansible/roles/bench/tasks/main.yml) and run with the image's Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def served_files(paths: list[str]) -> list[str]:
    """Every regular file under the served paths (the model, a GPU profile's data), sorted; links not followed."""
    files: list[str] = []
    for top in paths:
        for root, _dirs, names in os.walk(top):
            files += [
                str(Path(root) / n) for n in names if (Path(root) / n).is_file() and not (Path(root) / n).is_symlink()
            ]
    return sorted(files)


def make_page_cache_state(state: str, files: list[str]) -> dict[str, Any]:
    """Before a run: "cold" evicts each served file's clean, unmapped pages (posix_fadvise DONTNEED: this file's
    pages only, nothing else on the host); "warm" reads each file through; "as-found" touches nothing.
    What was done, and what could not be (a file that would not open)."""
    t0 = time.monotonic()
    done: dict[str, Any] = {"state": state, "files": len(files), "bytes_read": 0, "errors": []}
    if state not in ("cold", "warm"):
        return done
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError as exc:
            done["errors"].append(f"{f}: {exc.strerror}")
            continue
        try:
            if state == "cold":
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while chunk := os.read(fd, 1 << 20):
                    done["bytes_read"] += len(chunk)
        except OSError as exc:
            done["errors"].append(f"{f}: {exc.strerror}")
        finally:
            os.close(fd)
    done["seconds"] = round(time.monotonic() - t0, 3)
    return done


CAP_FOWNER = 3


def has_fowner() -> bool:
    """Whether this process holds CAP_FOWNER (its effective set in /proc/self/status)."""
    try:
        eff = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("CapEff:"))
        return bool(int(eff.split()[1], 16) & (1 << CAP_FOWNER))
    except (OSError, StopIteration, ValueError):
        return False


def _owner(path: str) -> int | None:
    try:
        return Path(path).stat().st_uid
    except OSError:
        return None


def residency(files: list[str]) -> dict[str, Any]:
    """The served files' pages in the page cache now, from util-linux fincore (mincore(2) per file): totals in
    pages and bytes, and per file; {"error": why} when fincore could not say.

    mincore(2) tells the truth only to a caller that owns the file, may write it, or holds CAP_FOWNER: for anyone
    else the kernel reports every page resident (a side-channel guard). Measured here: 100% resident in a
    container without FOWNER while the host's fincore read 0 after an eviction. So no figure is better than
    that one."""
    if not files:
        return {"error": "no served files found"}
    if not has_fowner():
        foreign = [f for f in files if _owner(f) != os.geteuid()]
        if foreign:
            return {
                "error": f"not read: uid {os.geteuid()} without CAP_FOWNER neither owns nor may write {foreign[0]}, "
                "and mincore(2) reports every page of such a file resident"
            }
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        proc = subprocess.run(
            ["fincore", "--json", "--bytes", "--output", "RES,PAGES,SIZE,FILE", *files],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        rows = json.loads(proc.stdout or "{}").get("fincore") or []
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"error": f"fincore: {type(exc).__name__}: {exc}"}
    if not rows:
        return {"error": f"fincore exited {proc.returncode}: {proc.stderr.strip()[:300]}"}
    total = sum(-(-int(r["size"]) // page) for r in rows)
    resident = sum(int(r["pages"]) for r in rows)
    return {
        "files": len(rows),
        "pages": total,
        "resident_pages": resident,
        "size_bytes": sum(int(r["size"]) for r in rows),
        "resident_bytes": resident * page,
        "fraction": resident / total if total else None,
        "per_file": {r["file"]: int(r["pages"]) for r in rows},
    }


class ResidencyReader:
    """Reads residency in a helper process that keeps root's CAP_FOWNER (started before the client drops to the
    runtime user, which runs everything else): one JSON line of files in, one JSON line of residency out."""

    def __init__(self, proc: subprocess.Popen[str] | None = None) -> None:
        self.proc = proc

    @classmethod
    def start(cls) -> ResidencyReader:
        helper = [sys.executable, "-I", str(Path(__file__).resolve()), "--residency-helper"]
        return cls(subprocess.Popen(helper, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))

    def read(self, files: list[str]) -> dict[str, Any]:
        if self.proc is None or self.proc.stdin is None or self.proc.stdout is None:
            return residency(files)
        try:
            self.proc.stdin.write(json.dumps(files) + "\n")
            self.proc.stdin.flush()
            got: dict[str, Any] = json.loads(self.proc.stdout.readline() or "{}")
            return got or {"error": f"the residency helper exited ({self.proc.poll()})"}
        except (OSError, ValueError) as exc:
            return {"error": f"the residency helper: {type(exc).__name__}: {exc}"}

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            self.proc.wait(10)


def residency_helper() -> int:
    """--residency-helper: residency() of each JSON list of files read from stdin, as a JSON line on stdout."""
    for line in sys.stdin:
        print(json.dumps(residency(list(json.loads(line)))), flush=True)
    return 0


def engine_io(engine_pid: int = 1) -> dict[str, Any]:
    """Read volume so far of every process of the serving container: `engine_pid` (its init, in this container's
    view of PIDs: the host's, serving/bench/protocol.py) and its descendants. /proc/<pid>/io's rchar (read syscalls,
    page-cache hits included) and read_bytes (what the block layer was asked to read); pids that could not be
    read are named with the reason."""
    parents: dict[int, int] = {}
    comms: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comms[int(d.name)] = stat[stat.find("(") + 1 : stat.rfind(")")]
        parents[int(d.name)] = int(stat[stat.rfind(")") + 2 :].split()[1])

    def under(pid: int) -> bool:
        seen = 0
        while pid != engine_pid and parents.get(pid, 0) not in (0, pid) and seen < 4096:
            pid, seen = parents[pid], seen + 1
        return pid == engine_pid

    out: dict[str, Any] = {"pids": {}, "unreadable": {}}
    for pid in sorted(p for p in parents if under(p)):
        try:
            text = (Path("/proc") / str(pid) / "io").read_text()
            fields: dict[str, str] = dict(line.split(": ", 1) for line in text.splitlines())
            reading: dict[str, Any] = {"comm": comms[pid]}
            reading.update({k: int(v) for k, v in fields.items() if k in ("rchar", "read_bytes", "syscr")})
            out["pids"][str(pid)] = reading
        except (OSError, ValueError) as exc:
            out["unreadable"][str(pid)] = f"{comms.get(pid, '?')}: {getattr(exc, 'strerror', None) or exc}"
    return out


def main(argv: list[str]) -> int:
    if argv == ["--residency-helper"]:
        return residency_helper()
    print("usage: bench_page_cache.py --residency-helper", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
