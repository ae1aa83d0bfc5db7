"""Host-state snapshots of the serving container's processes: cgroup limits and counters, rlimits, PSS, page cache.

Why is a request slow when vLLM itself looks idle? The answer is often outside the engine: the CFS quota
throttled the container, the memory cgroup is reclaiming at its limit, a page fault waited for storage because
the weights fell out of the page cache, or a process runs under an rlimit nobody meant to set. This module
reads those facts from the kernel's own text, keeps every file it read, and parses it into typed readings:

- the cgroup of a PID and each ancestor up to the root (probes/readers/cgroups.py; probes/readers/cgroup_delta.py says
  what happened between two snapshots);
- /proc/<pid>/limits, smaps_rollup (PSS split into anon, file and shmem), numa_maps (resident bytes per NUMA
  node) and /proc/meminfo (probes/readers/procfs.py);
- `fincore` (here): page-cache residency of the served data files (util-linux).
- `snapshot` gathers all of them; `write_host_state` writes the artifact directory; `format_summary` words it.

It runs in a probe container that shares the serving container's PID namespace and sees the host's cgroup
tree read-only:

  docker run --pid container:refdeploy-vllm --cap-add SYS_PTRACE --cgroupns host \\
      -v /sys/fs/cgroup:/host/sys/fs/cgroup:ro -v /data:/data:ro ... \\
      python -m probes.readers.hoststate --pid 1 [--pid N ...] [--data-file F ...] \\
          --cgroup-root /host/sys/fs/cgroup --out DIR

Nothing is written outside --out and every data file is opened read-only (fincore maps it without reading it).
Exit status: 0 the snapshot was written (readings that could not be taken say why, with status skipped or
failed, in host-state.json); 1 it could not be written; 2 bad input (one line on stderr).
Artifacts: OUT/host-state.json (the parsed readings; each `raw` map names the file under OUT/raw/ that holds
the text a figure was parsed from) and OUT/raw/<source path>, e.g. OUT/raw/proc/1/limits.

"No limit" is `Limit(value=None, unlimited=True)`, whatever the kernel's spelling ("max" in v2, -1 for
cpu.cfs_quota_us, a page-aligned LONG_MAX for v1 memory limits); a file that is absent reads as None. The two
never read alike: `memory.limit_bytes is None` means the file was not there, `memory.limit_bytes.unlimited`
means the kernel says there is no limit.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from probes.base.bounded import run_bounded
from probes.base.rawtext import bound_raw, now_wall, why
from probes.readers.cgroup_delta import cgroup_delta
from probes.readers.cgroups import (
    DEFAULT_CGROUP_ROOT,
    DEFAULT_PROC_ROOT,
    PRESSURE_RESOURCES,
    SCHEMA_VERSION,
    CgroupSnapshot,
    Limit,
    PressureReading,
    Status,
    cgroup_snapshot,
)
from probes.readers.procfs import (
    LimitsReading,
    MeminfoReading,
    NumaMapsReading,
    SmapsRollupReading,
    read_limits,
    read_meminfo,
    read_numa_maps,
    read_smaps_rollup,
)

HOST_STATE_FILE = "host-state.json"
RAW_DIR = "raw"
FINCORE_NOT_FOUND = "fincore not found: apt-get install util-linux"
FINCORE_COLUMNS = "RES,PAGES,SIZE,FILE"
DEFAULT_FINCORE_TIMEOUT_S = 60.0
DEFAULT_SYS_ROOT = Path("/sys")

_T = TypeVar("_T")


class HostStateInputError(ValueError):
    """Bad input: raised before anything is read or written."""


# --- results ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileResidency:
    path: str
    size_bytes: int
    # Whole pages, so up to a page more than size_bytes for a fully cached file whose size is not page-aligned.
    resident_bytes: int
    resident_pages: int
    resident_pct: float | None  # min(resident, size) / size; None for an empty file


@dataclass(frozen=True)
class FincoreReading:
    schema_version: int
    status: Status
    reason: str | None
    argv: list[str]
    exit_code: int | None
    timed_out: bool
    duration_s: float
    files: list[FileResidency]
    missing: list[str]  # files asked for that fincore gave no figure for (its stderr says why)
    raw: dict[str, str | None]  # "fincore/stdout.json", "fincore/stderr.txt"


@dataclass(frozen=True)
class ProcessState:
    pid: int
    comm: str | None  # /proc/<pid>/comm: "python3", "VLLM::EngineCor"
    limits: LimitsReading
    smaps_rollup: SmapsRollupReading
    numa_maps: NumaMapsReading  # where its memory is, per NUMA node (the allowed lists say only where it may be)
    # /proc/<pid>/status Cpus_allowed_list: the CPUs its main thread may run on (a rank's binding), None if unread
    cpus_allowed: str | None = None


@dataclass(frozen=True)
class HostState:
    schema_version: int
    taken_mono_s: float
    taken_wall: str
    proc_root: str
    cgroup_root: str
    pids: list[int]
    data_files: list[str]
    cgroup: CgroupSnapshot  # of the first PID: the container's PID 1
    processes: list[ProcessState]
    meminfo: MeminfoReading
    page_cache: FincoreReading
    # The host's NUMA nodes and their CPUs ({"N0": "0-15", ...}, /sys/devices/system/node/node<N>/cpulist, as
    # numa_maps names nodes): with cpus_allowed, which node a rank's CPUs are on. None where sysfs has no nodes.
    node_cpus: dict[str, str] | None = None


def host_state_cgroup_delta(before: HostState, after: HostState) -> dict[str, Any]:
    """`cgroup_delta` of two `snapshot`s' cgroup readings, as a JSON-ready dict (dataclasses.asdict)."""
    return asdict(cgroup_delta(before.cgroup, after.cgroup))


# --- per-process and host readings ------------------------------------------------------------------------


def _as_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ValueError(f"not a number: {v!r}")
    return int(v)


def parse_fincore_json(text: str) -> list[FileResidency]:
    """`fincore --json --bytes --output RES,PAGES,SIZE,FILE` (util-linux 2.38) into per-file residency."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"fincore's output is not JSON: {e}") from None
    rows = data.get("fincore") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError("fincore's JSON has no 'fincore' list")
    out: list[FileResidency] = []
    for row in rows:
        if not isinstance(row, dict) or not {"res", "pages", "size", "file"} <= row.keys():
            raise ValueError(f"fincore row lacks res, pages, size or file: {row!r}")
        size, res = _as_int(row["size"]), _as_int(row["res"])
        pct = min(res, size) / size * 100.0 if size > 0 else None
        out.append(FileResidency(str(row["file"]), size, res, _as_int(row["pages"]), pct))
    return out


def fincore(
    paths: Sequence[Path],
    *,
    binary: str = "fincore",
    timeout_s: float = DEFAULT_FINCORE_TIMEOUT_S,
    none_given: str = "no data files given (--data-file)",
) -> FincoreReading:
    """Page-cache residency of each file, by util-linux fincore (which opens them read-only and reads no data).

    `binary` is the program to run (a name looked up on PATH, or a path); absent, the reading is skipped.
    """
    names = list(dict.fromkeys(str(p) for p in paths))
    raw: dict[str, str | None] = {}

    def result(
        status: Status,
        reason: str | None,
        argv: list[str] | None = None,
        exit_code: int | None = None,
        timed_out: bool = False,
        duration_s: float = 0.0,
        files: list[FileResidency] | None = None,
        missing: list[str] | None = None,
    ) -> FincoreReading:
        return FincoreReading(
            SCHEMA_VERSION,
            status,
            reason,
            argv or [],
            exit_code,
            timed_out,
            duration_s,
            files or [],
            missing or [],
            raw,
        )

    if not names:
        return result("skipped", none_given)
    found = shutil.which(binary)
    if found is None:
        return result("skipped", FINCORE_NOT_FOUND)
    argv = [found, "--json", "--bytes", "--output", FINCORE_COLUMNS, "--", *names]
    started = time.monotonic()
    try:
        done = run_bounded(argv, timeout_s)
    except OSError as e:
        return result("failed", f"cannot run {found}: {why(e)}", argv)
    duration_s = round(time.monotonic() - started, 3)
    raw["fincore/stdout.json"] = bound_raw(done.stdout.encode())
    raw["fincore/stderr.txt"] = bound_raw(done.stderr.encode())
    if done.timed_out:
        return result(
            "failed", f"fincore did not finish within {timeout_s:g} s and was terminated", argv, done.exit_code, True
        )
    files: list[FileResidency] = []
    reason: str | None = None
    if done.stdout.strip():
        try:
            files = parse_fincore_json(done.stdout)
        except ValueError as e:
            reason = str(e)
    got = {f.path for f in files}
    missing = [n for n in names if n not in got]
    if reason is None and missing:
        stderr = "; ".join(line.strip() for line in done.stderr.splitlines() if line.strip()) or "(no stderr)"
        reason = f"fincore gave no figure for {missing} (exit {done.exit_code}): {stderr}"
    if reason is None and done.exit_code != 0:
        reason = f"fincore exited with status {done.exit_code}: {done.stderr.strip()[-200:]}"
    status: Status = "failed" if reason else "successful"
    return result(status, reason, argv, done.exit_code, False, duration_s, files, missing)


def _comm(pid: int, proc_root: Path) -> str | None:
    try:
        return (proc_root / str(pid) / "comm").read_text(errors="replace").strip()
    except OSError:
        return None


def _cpus_allowed(pid: int, proc_root: Path) -> str | None:
    """Cpus_allowed_list from /proc/<pid>/status (the kernel's list format, "0-3,8"), None if unread."""
    try:
        text = (proc_root / str(pid) / "status").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return None


def read_node_cpus(sys_root: Path = DEFAULT_SYS_ROOT) -> dict[str, str] | None:
    """Each NUMA node's CPUs from sysfs ({"N0": "0-15"}); None where the kernel lists no node (no NUMA support).
    A container sees the host's: /sys/devices/system is not namespaced."""
    base = sys_root / "devices" / "system" / "node"
    out: dict[str, str] = {}
    for d in sorted(base.glob("node[0-9]*"), key=lambda d: int(d.name[4:])):
        try:
            out[f"N{d.name[4:]}"] = (d / "cpulist").read_text().strip()
        except OSError:
            continue
    return out or None


# --- snapshot ---------------------------------------------------------------------------------------------


def check_inputs(pids: Sequence[int], data_files: Sequence[Path], proc_root: Path = DEFAULT_PROC_ROOT) -> None:
    """Raise HostStateInputError unless every PID is running here and every data file is a regular file."""
    if not pids:
        raise HostStateInputError("no PID given: pass --pid with the serving container's PID 1 (and others)")
    seen: set[int] = set()
    for pid in pids:
        if pid in seen:
            raise HostStateInputError(f"PID {pid} is given twice")
        seen.add(pid)
        if pid < 1 or not (proc_root / str(pid)).is_dir():
            raise HostStateInputError(
                f"process {pid} is not running here (no {proc_root / str(pid)}): the probe container must share "
                "the serving container's PID namespace (docker run --pid container:refdeploy-vllm)"
            )
    for f in data_files:
        if not f.is_file():
            what = "does not exist" if not f.exists() else "is not a regular file"
            raise HostStateInputError(f"data file {f} {what}: give a file the serving stack reads, mounted read-only")


def snapshot(
    pids: Sequence[int],
    data_files: Sequence[Path] = (),
    proc_root: Path = DEFAULT_PROC_ROOT,
    cgroup_root: Path = DEFAULT_CGROUP_ROOT,
    *,
    fincore_binary: str = "fincore",
    fincore_timeout_s: float = DEFAULT_FINCORE_TIMEOUT_S,
    no_data_files: str = "",
    sys_root: Path = DEFAULT_SYS_ROOT,
) -> HostState:
    """Everything at once: the cgroup of the first PID (the container's PID 1), limits and smaps_rollup of each
    PID, /proc/meminfo, and the page-cache residency of the data files. Bad input raises HostStateInputError
    before anything is read; a reading that cannot be taken says why in its status and reason (`no_data_files`:
    why no data file was given, for the page-cache reading's skip reason)."""
    check_inputs(pids, data_files, proc_root)
    taken_mono_s, taken_wall = time.monotonic(), now_wall()
    cgroup = cgroup_snapshot(pids[0], proc_root, cgroup_root)
    processes = [
        ProcessState(
            pid,
            _comm(pid, proc_root),
            read_limits(pid, proc_root),
            read_smaps_rollup(pid, proc_root),
            read_numa_maps(pid, proc_root),
            _cpus_allowed(pid, proc_root),
        )
        for pid in pids
    ]
    return HostState(
        schema_version=SCHEMA_VERSION,
        taken_mono_s=taken_mono_s,
        taken_wall=taken_wall,
        proc_root=str(proc_root),
        cgroup_root=str(cgroup_root),
        pids=list(pids),
        data_files=[str(f) for f in data_files],
        cgroup=cgroup,
        processes=processes,
        meminfo=read_meminfo(proc_root),
        page_cache=fincore(
            data_files,
            binary=fincore_binary,
            timeout_s=fincore_timeout_s,
            none_given=f"no data file to read: {no_data_files}"
            if no_data_files
            else "no data files given (--data-file)",
        ),
        node_cpus=read_node_cpus(sys_root),
    )


def raw_relpath(source: str) -> PurePosixPath:
    """Where under OUT a raw text is kept: raw/<source without its leading '/'>, '..' parts dropped."""
    parts = [p for p in PurePosixPath(source.lstrip("/")).parts if p not in ("..", ".")]
    return PurePosixPath(RAW_DIR, *(parts or ["unnamed"]))


def _externalise_raw(node: Any, out_dir: Path) -> Any:
    """Write every `raw` map's texts under out_dir/raw/ and put their relative file names in its place."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "raw" and isinstance(value, dict):
                files: dict[str, str | None] = {}
                for source, text in value.items():
                    if text is None:
                        files[source] = None
                        continue
                    rel = raw_relpath(source)
                    dest = out_dir / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_text(bound_raw(text.encode()))
                    files[source] = str(rel)
                out[key] = files
            else:
                out[key] = _externalise_raw(value, out_dir)
        return out
    if isinstance(node, list):
        return [_externalise_raw(item, out_dir) for item in node]
    return node


def write_host_state(state: HostState, out_dir: Path) -> Path:
    """Write OUT/host-state.json and the raw texts under OUT/raw/; return the JSON file's path.

    In the JSON each `raw` map gives, for every source file, the file under OUT that holds its text (null: the
    source was absent). Raises OSError when the directory cannot be written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = _externalise_raw(asdict(state), out_dir)
    path = out_dir / HOST_STATE_FILE
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


# --- report -----------------------------------------------------------------------------------------------


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / (1 << 20):,.1f} MiB"


def _size(n_bytes: int) -> str:
    return _mib(n_bytes) if n_bytes >= 1 << 20 else f"{n_bytes / 1024:,.1f} KiB"


def _limit_text(limit: Limit | None) -> str:
    if limit is None:
        return "unknown"
    return "none" if limit.unlimited or limit.value is None else _mib(limit.value)


def _cgroup_lines(c: CgroupSnapshot) -> list[str]:
    if c.status != "successful" or not c.levels:
        return [f"cgroup: {c.status.upper()}: {c.reason}"]
    inner = c.levels[0]
    lines = [f"cgroup {c.version} {inner.path} (pid {c.pid}; {len(c.levels)} levels read)"]
    mem_level = next((lv for lv in c.levels if lv.memory and lv.memory.usage_bytes is not None), None)
    if mem_level is not None and mem_level.memory is not None:
        m = mem_level.memory
        own = m.limit_bytes.value if m.limit_bytes is not None and m.limit_bytes.value is not None else math.inf
        # An ancestor's limit binds the container too: name it when it is the tighter one.
        tighter = [
            (lv.memory.limit_bytes.value, lv.path)
            for lv in c.levels
            if lv.memory and lv.memory.limit_bytes and lv.memory.limit_bytes.value is not None
            if lv.memory.limit_bytes.value < own
        ]
        tightest = f"; tighter limit {_mib(min(tighter)[0])} at {min(tighter)[1]}" if tighter else ""
        oom = f", oom_kill {m.oom_kill}" if m.oom_kill is not None else ""
        usage = m.usage_bytes if m.usage_bytes is not None else 0
        lines.append(
            f"  memory at {mem_level.path}: {_mib(usage)} used, limit {_limit_text(m.limit_bytes)}{tightest}{oom}"
        )
    # Every level with a CPU quota, named: on a GPU host the quota is an ancestor's (refdeploy.slice).
    quotas = [
        (lv.path, lv.cpu)
        for lv in c.levels
        if lv.cpu and lv.cpu.quota_us and lv.cpu.quota_us.value is not None and lv.cpu.period_us
    ]
    for path, cpu in quotas:
        assert cpu.quota_us is not None and cpu.quota_us.value is not None and cpu.period_us
        throttled_s = (cpu.throttled_ns or 0) / 1e9
        lines.append(
            f"  cpu quota {cpu.quota_us.value / cpu.period_us:g} CPUs at {path}: throttled in {cpu.nr_throttled} "
            f"of {cpu.nr_periods} periods ({throttled_s:.3f} s)"
        )
    if not quotas:
        lines.append(f"  cpu quota: none at any of the {len(c.levels)} levels")
    pressure = []
    for res in PRESSURE_RESOURCES:
        reading: PressureReading | None = getattr(inner, f"{res}_pressure")
        if reading is not None and reading.some is not None:
            full = f", full {reading.full.avg10_pct:.2f}%" if reading.full is not None else ""
            pressure.append(f"{res} some {reading.some.avg10_pct:.2f}%{full}")
    if pressure:
        lines.append("  pressure (10 s average): " + "; ".join(pressure))
    return lines


def format_summary(state: HostState, out_dir: Path | None = None) -> str:
    where = f" -> {out_dir / HOST_STATE_FILE}" if out_dir is not None else ""
    lines = [f"host state at {state.taken_wall} of PIDs {', '.join(map(str, state.pids))}{where}"]
    lines += _cgroup_lines(state.cgroup)
    for p in state.processes:
        s = p.smaps_rollup
        name = f"pid {p.pid} ({p.comm or '?'})"
        if s.pss is None:
            lines.append(f"{name}: smaps_rollup {s.status}: {s.reason}")
        else:
            kib = 1024
            split = [("anon", s.pss.pss_anon_kb), ("file", s.pss.pss_file_kb), ("shmem", s.pss.pss_shmem_kb)]
            parts = " + ".join(f"{k} {_mib(v * kib)}" for k, v in split if v is not None)
            lines.append(f"{name}: PSS {_mib(s.pss.pss_kb * kib)}" + (f" = {parts}" if parts else ""))
        if p.limits.status != "successful":
            lines.append(f"  limits {p.limits.status}: {p.limits.reason}")
        n = p.numa_maps
        if n.status == "successful":
            nodes = ", ".join(f"{node} {_mib(b)}" for node, b in n.node_bytes.items()) or "no resident pages"
            policy = ", ".join(f"{k} x{v}" for k, v in sorted(n.policies.items(), key=lambda kv: -kv[1]))
            lines.append(f"  resident by NUMA node: {nodes} (mappings by policy: {policy})")
        else:
            lines.append(f"  numa_maps {n.status}: {n.reason}")
    mi = state.meminfo
    if mi.status == "successful":
        total, avail = mi.values_kb.get("MemTotal"), mi.values_kb.get("MemAvailable")
        cached = mi.values_kb.get("Cached")
        if total is not None and avail is not None:
            extra = f", page cache {_mib(cached * 1024)}" if cached is not None else ""
            lines.append(f"host memory: {_mib(avail * 1024)} available of {_mib(total * 1024)}{extra}")
    else:
        lines.append(f"host memory: {mi.status}: {mi.reason}")
    pc = state.page_cache
    for f in pc.files:
        pct = f"{f.resident_pct:.1f}%" if f.resident_pct is not None else "empty file"
        cached = min(f.resident_bytes, f.size_bytes)  # fincore counts whole pages
        lines.append(f"page cache: {f.path}: {pct} resident ({_size(cached)} of {_size(f.size_bytes)})")
    if pc.status != "successful":
        lines.append(f"page cache: {pc.status}: {pc.reason}")
    return "\n".join(lines) + "\n"


# --- CLI --------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line on stderr, exit 2
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def check_out_dir(out_dir: Path) -> None:
    """Create out_dir (new or empty); raise HostStateInputError when that cannot be done."""
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise HostStateInputError(f"output directory {out_dir} exists and is not empty: give a new --out directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HostStateInputError(f"cannot create output directory {out_dir}: {why(e)}") from None


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m probes.readers.hoststate", description="snapshot the host state of serving processes")
    p.add_argument("--pid", required=True, type=int, action="append", help="PID to read; the first is the container's")
    p.add_argument(
        "--data-file", type=Path, action="append", default=[], help="file whose page-cache residency to read"
    )
    p.add_argument("--cgroup-root", type=Path, default=DEFAULT_CGROUP_ROOT, help="where the host's cgroup fs is")
    p.add_argument("--proc-root", type=Path, default=DEFAULT_PROC_ROOT, help="where proc is mounted (default /proc)")
    p.add_argument("--out", required=True, type=Path, help="new or empty directory for the artifacts")
    p.add_argument("--fincore-timeout", type=float, default=DEFAULT_FINCORE_TIMEOUT_S, help="seconds (default 60)")
    a = p.parse_args(argv)
    if not math.isfinite(a.fincore_timeout) or a.fincore_timeout <= 0:
        p.error(f"--fincore-timeout must be a positive number of seconds, got {a.fincore_timeout}")
    try:
        check_inputs(a.pid, a.data_file, a.proc_root)
        check_out_dir(a.out)
        state = snapshot(a.pid, a.data_file, a.proc_root, a.cgroup_root, fincore_timeout_s=a.fincore_timeout)
    except HostStateInputError as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return 2
    try:
        write_host_state(state, a.out)
    except OSError as e:
        print(f"{p.prog}: could not write the snapshot to {a.out}: {why(e)}", file=sys.stderr)
        return 1
    sys.stdout.write(format_summary(state, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
