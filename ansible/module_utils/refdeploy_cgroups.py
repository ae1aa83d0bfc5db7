"""The limits a running container is under, read from the kernel on its host: shared by the host's reads.

The plan's read of the host (library/refdeploy_host_readings.py: `make status` and `make deploy` judge drift from
it) and the engine's readings (module_utils/refdeploy_engine_read.py, the manifest's read once the engine answers:
`make verify` compares it) read the same files the same way, so what status calls drift is what verify calls a
difference.

  read_limits(pid, cid) -> {"proc_cgroup": <the text of /proc/<pid>/cgroup>,
                       "files": {<absolute path>: <text>},   every limit file of every level, container to root
                       "tasks": [{"pid", "cmdline", "threads": [[tid, comm, Cpus_allowed_list], ...]}, ...]}

Every value is the kernel's own text, unparsed (serving/host/cgroup_limits.py interprets them). The levels are
the container's cgroup and each ancestor up to the hierarchy's root, for each controller that limits: a quota
set on /docker or system.slice by hand bounds the container as surely as its own. The tasks are the processes in
the container's cgroup under its PID 1 (not what `docker exec` runs there) and each of their threads with the
CPUs it may run on (its own affinity, which taskset or a runtime's thread binding narrows inside the cpuset). A
file a kernel does not have (blkio.weight without CFQ/BFQ, memsw without swap accounting) is absent, not empty.
Read-only; standard library only (it runs on the managed host, where Ansible ships it with the module).
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1: per controller, the files that limit (quota, shares, CPUs and nodes, memory, swap, soft limit, tasks,
# I/O weights and throttles).
V1_FILES = {
    "cpu": ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares"),
    "cpuset": ("cpuset.cpus", "cpuset.mems", "cpuset.effective_cpus", "cpuset.effective_mems"),
    "memory": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.soft_limit_in_bytes"),
    "pids": ("pids.max",),
    "blkio": (
        "blkio.weight",
        "blkio.throttle.read_bps_device",
        "blkio.throttle.write_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.throttle.write_iops_device",
    ),
}
# cgroup v2 (the unified hierarchy): the same limits, as v2 names them.
V2_FILES = (
    "cpu.max",
    "cpu.weight",
    "cpuset.cpus",
    "cpuset.mems",
    "cpuset.cpus.effective",
    "cpuset.mems.effective",
    "memory.max",
    "memory.swap.max",
    "memory.high",
    "memory.low",
    "pids.max",
    "io.max",
    "io.weight",
)
# Docker's HostConfig fields that limit a container (serving/host/cgroup_limits.py DOCKER_FIELDS, held equal by
# tests/unit/host/test_cgroup_limits.py): the plan's read of a container keeps them.
HOSTCONFIG_FIELDS = ("NanoCpus", "CpuQuota", "CpuPeriod", "CpuShares", "CpusetCpus", "CpusetMems", "Memory",
                     "MemorySwap", "MemoryReservation", "PidsLimit", "BlkioWeight", "BlkioWeightDevice",
                     "BlkioDeviceReadBps", "BlkioDeviceWriteBps", "BlkioDeviceReadIOps", "BlkioDeviceWriteIOps",
                     "RestartPolicy", "CgroupParent")  # fmt: skip
# A container has a few hundred threads at most; a runaway one must not make the reading unbounded.
MAX_THREADS = 4000


def _text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _chain(mount: Path, rel: str) -> list[Path]:
    """The cgroup directory at `rel` under `mount` and every ancestor up to the mount itself."""
    parts = [p for p in rel.split("/") if p]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def controller_paths(proc_cgroup: str) -> dict[str, str]:
    """{controller: path} from /proc/<pid>/cgroup ("4:cpu,cpuacct:/docker/ID" gives cpu and cpuacct), and
    {"": path} for the unified hierarchy ("0::/..."). A v1 line with a name= (systemd's) is not a controller."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            if not name.startswith("name="):
                out[name] = parts[2]
    return out


def limit_files(proc_cgroup: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Every limit file, container to root, of each controller the process is in: v1 where the v1 controllers are
    mounted (a hybrid host's unified tree holds no controllers), else v2."""
    paths = controller_paths(proc_cgroup)
    files: list[Path] = []
    v1 = [c for c in V1_FILES if c in paths]
    if v1:
        for controller in v1:
            for level in _chain(root / controller, paths[controller]):
                files.extend(level / f for f in V1_FILES[controller])
    elif "" in paths:
        for level in _chain(root, paths[""]):
            files.extend(level / f for f in V2_FILES)
    return files


def _ppid(pid: str, proc: Path) -> str:
    stat = _text(proc / pid / "stat") or ""
    fields = stat.rpartition(") ")[2].split()  # after the command, which may hold spaces: state, ppid, ... (proc(5))
    return fields[1] if len(fields) > 1 else ""


def under_init(pids: list[str], init: int, proc: Path = Path("/proc")) -> list[str]:
    """The pids that are `init` or descend from it. A cgroup also holds what `docker exec` starts there (the
    HEALTHCHECK's command every few seconds, runc's own `runc:[2:INIT]` before it becomes that command): the
    shim is its parent, not the container's PID 1, and a reading that caught it would differ from the next."""
    parent = {p: _ppid(p, proc) for p in pids}
    kept = []
    for p in pids:
        seen, q = set(), p
        while q and q != str(init) and q not in seen and q in parent:
            seen.add(q)
            q = parent[q]
        if q == str(init):
            kept.append(p)
    return kept


def tasks(procs_file: Path, proc: Path = Path("/proc"), init: int = 0) -> list[dict[str, object]]:
    """The processes listed in a cgroup's cgroup.procs (those under `init` where given: under_init), each thread
    with its name and Cpus_allowed_list."""
    out: list[dict[str, object]] = []
    seen = 0
    pids = (_text(procs_file) or "").split()
    for pid in under_init(pids, init, proc) if init > 0 else pids:
        base = proc / pid
        raw = (base / "cmdline").read_bytes() if (base / "cmdline").exists() else b""
        threads: list[list[object]] = []
        try:
            tids = sorted((t.name for t in (base / "task").iterdir()), key=int)
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            if seen >= MAX_THREADS:
                break
            status = _text(base / "task" / tid / "status") or ""
            comm = (_text(base / "task" / tid / "comm") or "").strip()
            allowed = next((ln.split(":", 1)[1].strip() for ln in status.splitlines()
                            if ln.startswith("Cpus_allowed_list:")), None)  # fmt: skip
            if allowed is not None:
                threads.append([int(tid), comm, allowed])
                seen += 1
        out.append({"pid": int(pid), "cmdline": raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200],
                    "threads": threads})  # fmt: skip
    return out


def container_cgroup(pid: int, cid: str, proc: Path = Path("/proc")) -> str | None:
    """The text of /proc/<pid>/cgroup where process `pid` is container `cid`'s (its ID is in the process's cgroup
    path: /docker/<ID> with cgroupfs, docker-<ID>.scope with systemd, under any --cgroup-parent); None otherwise.
    The PID Docker reports is in its engine's PID namespace: where this host's /proc is another namespace's (a
    host that shares another's engine, as the GPU test hosts do) the same number can be an unrelated process,
    whose limits and threads must not be read as the container's."""
    if not pid or not cid:
        return None
    text = _text(proc / str(pid) / "cgroup")
    return text if text is not None and cid in text else None


def read_limits(pid: int, cid: str, root: Path = CGROUP_ROOT, proc: Path = Path("/proc")) -> dict[str, object] | None:
    """The limits over process `pid` (container `cid`'s PID 1) at every level, and its cgroup's tasks; None where
    that process is not in this host's /proc (a container of another host's engine: container_cgroup)."""
    proc_cgroup = container_cgroup(pid, cid, proc)
    if proc_cgroup is None:
        return None
    files = {str(p): t for p in limit_files(proc_cgroup, root) if (t := _text(p)) is not None}
    paths = controller_paths(proc_cgroup)
    holder = root / "pids" if "pids" in paths else root / "cpu" if "cpu" in paths else root
    rel = paths.get("pids") or paths.get("cpu") or paths.get("", "/")
    return {
        "proc_cgroup": proc_cgroup,
        "files": files,
        "tasks": tasks(holder.joinpath(*[p for p in rel.split("/") if p]) / "cgroup.procs", proc, pid),
    }
