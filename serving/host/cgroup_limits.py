"""Every limit a running serving container is under, as the kernel and Docker hold them now, against the plan.

Seed 000 §5: cgroup quotas and cpusets, at every level, are part of the environment. A `docker update --cpus 0.6`
on a live container, or a quota written by hand on its parent cgroup, changes what a request gets without
changing the spec the container was started from; so the limits are read from the kernel at every level
(ansible/module_utils/refdeploy_cgroups.py reads them) and from Docker's HostConfig, and judged here:

- `parse_levels` names each level: "container" (its own cgroup), each ancestor by its path ("/docker",
  "/system.slice"), "/" the root; each value by the kernel file's own name, in the kernel's terms (a quota of -1
  is none; a v1 memory limit of 2^63 rounded to pages is written "max", as v2 writes it).
- `planned_levels` / `planned_docker` are what the plan's spec makes them: Docker's mapping of its flags to the
  cgroup files at the container's level, and no limit at its parent (Docker's /docker, systemd's system.slice),
  except where the parent is the serving slice a GPU plan puts there (its CPU quota and memory ceiling,
  serving/plan/gpu_plan.py serving_slice). The levels above the parent are the platform's (a VM's slice, a test
  host's own container): the manifest records them and make verify compares them, but no deploy judges or writes
  them.
- `limit_drift` compares the two and decides how a deploy restores the plan: `docker update` where Docker can set
  the planned value exactly, a replacement of the container where it cannot (measured on Docker 20.10.24:
  `docker update --cpus 0` leaves NanoCpus as it was, and `--cpu-quota -1` clears the kernel's quota but leaves
  NanoCpus set, to come back at the next restart), a write of the file itself at an ancestor cgroupfs level
  that Docker does not own; and a refusal, with the command, for a level systemd owns (a write there is undone
  by systemd's next reload of that unit: `systemctl set-property` is the way).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from serving.host.limits import docker_size_bytes

# At or above this, a v1 memory limit means none (LONG_MAX rounded down to the page size).
_V1_NO_LIMIT = 1 << 62
_THROTTLES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
              "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device", "io.max")  # fmt: skip
# The files that bound a container from an ancestor, and their value where nothing is set there.
_UNLIMITED_ABOVE: dict[int, dict[str, Any]] = {
    1: {"cpu.cfs_quota_us": -1, "memory.limit_in_bytes": "max", "memory.memsw.limit_in_bytes": "max",
        "pids.max": "max", **{t: [] for t in _THROTTLES[:4]}},
    2: {"cpu.max": "max", "memory.max": "max", "memory.swap.max": "max", "memory.high": "max", "pids.max": "max",
        "io.max": []},
}  # fmt: skip
V1_PERIOD_US = 100_000  # Docker's --cpus period (the kernel's default)
# HostConfig fields that limit the container, and what Docker holds where nothing is set.
DOCKER_FIELDS = ("NanoCpus", "CpuQuota", "CpuPeriod", "CpuShares", "CpusetCpus", "CpusetMems", "Memory",
                 "MemorySwap", "MemoryReservation", "PidsLimit", "BlkioWeight", "BlkioWeightDevice",
                 "BlkioDeviceReadBps", "BlkioDeviceWriteBps", "BlkioDeviceReadIOps", "BlkioDeviceWriteIOps",
                 "RestartPolicy", "CgroupParent")  # fmt: skip
# `docker update` flags for the fields it can set to a planned value (a planned "unset" it cannot: see above).
_UPDATE_FLAGS = {"NanoCpus": "--cpus", "CpuShares": "--cpu-shares", "CpusetCpus": "--cpuset-cpus",
                 "CpusetMems": "--cpuset-mems", "Memory": "--memory", "MemorySwap": "--memory-swap",
                 "MemoryReservation": "--memory-reservation", "PidsLimit": "--pids-limit",
                 "BlkioWeight": "--blkio-weight", "RestartPolicy": "--restart", "CpuQuota": "--cpu-quota",
                 "CpuPeriod": "--cpu-period"}  # fmt: skip


def _value(name: str, text: str) -> Any:
    """A limit file's text in the kernel's terms: an int, "max", a cpulist, or a throttle file's lines."""
    text = text.strip()
    if name in _THROTTLES:
        return sorted(ln for ln in text.splitlines() if ln.strip())
    if name == "cpu.max":
        quota, _, period = text.partition(" ")
        return quota if quota == "max" else f"{quota} {period}"
    if name.startswith("cpuset."):
        return text
    if text.lstrip("-").isdigit():
        n = int(text)
        return "max" if name.startswith("memory.") and n >= _V1_NO_LIMIT else n
    return text


def _level_name(rel_dir: str, container_dir: str) -> str:
    return "container" if rel_dir == container_dir else (rel_dir or "/")


def parse_levels(raw: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """{"cgroup_version", "paths": {level: the controller-relative directory}, "levels": {level: {file: value}}}
    from read_limits' raw readings; None where none were read (a container of another host's engine)."""
    if not raw:
        return None
    from_proc: dict[str, str] = {}
    for line in str(raw.get("proc_cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                from_proc[name] = parts[2]
    version = 1 if any(f"/sys/fs/cgroup/{c}/" in p for p in raw.get("files") or {} for c in ("cpu", "memory")) else 2
    levels: dict[str, dict[str, Any]] = {}
    paths: dict[str, str] = {}
    for path, text in sorted((raw.get("files") or {}).items()):
        parent, name = path.rsplit("/", 1)
        rel = parent.removeprefix("/sys/fs/cgroup")
        controller = ""
        if version == 1:
            controller, _, rel = rel.lstrip("/").partition("/")
            rel = "/" + rel
        container_dir = from_proc.get(controller, from_proc.get("", ""))
        level = _level_name(rel.rstrip("/") or "/", container_dir.rstrip("/") or "/")
        paths[level] = rel.rstrip("/") or "/"
        levels.setdefault(level, {})[name] = _value(name, str(text))
    return {"cgroup_version": version, "paths": paths, "levels": levels}


def _process_key(cmdline: str) -> str:
    """A process as it is named across deploys: a vLLM process by its title (VLLM::Worker_TP0), another by its
    program and first arguments' base names (pids, paths and file descriptors differ from start to start)."""
    tokens = cmdline.split()
    if not tokens:
        return "?"
    if tokens[0].startswith("VLLM::"):
        return tokens[0]
    return " ".join(PurePosixPath(t).name for t in tokens[:3])


def affinity(raw: Mapping[str, Any] | None) -> dict[str, dict[str, list[str]]] | None:
    """{process: {thread name: [the distinct CPU lists its threads of that name may run on]}}: each thread's own
    affinity (Cpus_allowed_list), comparable from one deploy to the next (no pids, no tids)."""
    if not raw or raw.get("tasks") is None:
        return None
    out: dict[str, dict[str, set[str]]] = {}
    for proc in raw["tasks"]:
        threads = out.setdefault(_process_key(str(proc.get("cmdline") or "")), {})
        for _tid, comm, allowed in proc.get("threads") or []:
            threads.setdefault(str(comm), set()).add(str(allowed))
    return {p: {t: sorted(c) for t, c in sorted(th.items())} for p, th in sorted(out.items())}


def main_affinity(raw: Mapping[str, Any] | None) -> dict[str, list[str]] | None:
    """{process: [the CPU lists its main threads may run on]}: what `taskset -p` changes and what vLLM's CPU worker
    binds itself to at start. Kept at launch (<ID>.affinity) as the value a later reading is judged against: the
    plan leaves a CPU worker's binding to vLLM within the cpuset, so only the launch says what it chose. Threads
    started later (ZMQ, gloo, a request's first pool) are left out: they come and go with the work."""
    if not raw or raw.get("tasks") is None:
        return None
    out: dict[str, list[str]] = {}
    for proc in raw["tasks"]:
        main = next((str(a) for tid, _c, a in proc.get("threads") or [] if tid == proc.get("pid")), None)
        if main is not None:
            out.setdefault(_process_key(str(proc.get("cmdline") or "")), []).append(main)
    return {p: sorted(c) for p, c in sorted(out.items())}


def _bytes(size: Any) -> int | None:
    return docker_size_bytes(str(size)) if size not in (None, "") else None


def planned_levels(spec: Mapping[str, Any], version: int, slice_plan: Mapping[str, Any] | None = None,
                   slice_level: str | None = None) -> dict[str, dict[str, Any]]:  # fmt: skip
    """What the spec makes the container's own level (Docker's mapping of its flags), and "*": what every level
    above it must be (no limit), with the serving slice's own planned limits at `slice_level`."""
    memory, swap = _bytes(spec.get("memory")), _bytes(spec.get("memory_swap"))
    cpus = spec.get("cpus")
    pids = spec.get("pids_limit")
    own: dict[str, Any]
    if version == 1:
        own = {
            "cpu.cfs_quota_us": int(float(cpus) * V1_PERIOD_US) if cpus else -1,
            "cpu.cfs_period_us": V1_PERIOD_US,
            "cpu.shares": int(spec.get("cpu_shares") or 1024),
            "memory.limit_in_bytes": memory if memory else "max",
            "memory.soft_limit_in_bytes": "max",
            "pids.max": int(pids) if pids and int(pids) > 0 else "max",
            **{t: [] for t in _THROTTLES[:4]},
        }
        if memory:
            own["memory.memsw.limit_in_bytes"] = swap if swap and swap > 0 else "max" if swap == -1 else 2 * memory
    else:
        own = {
            "cpu.max": f"{int(float(cpus) * V1_PERIOD_US)} {V1_PERIOD_US}" if cpus else "max",
            "cpu.weight": 100,
            "memory.max": memory if memory else "max",
            "memory.low": 0,
            "memory.high": "max",
            "pids.max": int(pids) if pids and int(pids) > 0 else "max",
            "io.max": [],
        }
        if memory:
            own["memory.swap.max"] = (swap - memory) if swap and swap > 0 else "max" if swap == -1 else memory
    if spec.get("cpuset_cpus"):
        own["cpuset.cpus"] = spec["cpuset_cpus"]
    if spec.get("cpuset_mems"):
        own["cpuset.mems"] = spec["cpuset_mems"]
    out: dict[str, dict[str, Any]] = {"container": own, "*": dict(_UNLIMITED_ABOVE[version])}
    if slice_plan and slice_level:
        pct = slice_plan.get("cpu_quota_pct")
        out[slice_level] = {**out["*"], "cpu.max": f"{int(pct) * 1000} {V1_PERIOD_US}" if pct else "max",
                            "memory.max": slice_plan.get("memory_max_bytes") or "max"}  # fmt: skip
    return out


def planned_docker(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The HostConfig values the spec's start sets (Docker holds 0, "" or null for what is not set)."""
    memory = _bytes(spec.get("memory")) or 0
    return {
        "NanoCpus": int(float(spec["cpus"]) * 1e9) if spec.get("cpus") else 0,
        "CpuQuota": 0,
        "CpuPeriod": 0,
        "CpuShares": int(spec.get("cpu_shares") or 0),
        "CpusetCpus": spec.get("cpuset_cpus") or "",
        "CpusetMems": spec.get("cpuset_mems") or "",
        "Memory": memory,
        "MemorySwap": (_bytes(spec.get("memory_swap")) or 0) if memory else 0,
        "MemoryReservation": 0,
        "PidsLimit": int(spec["pids_limit"]) if spec.get("pids_limit") else 0,
        "BlkioWeight": 0,
        "BlkioWeightDevice": [],
        "BlkioDeviceReadBps": [],
        "BlkioDeviceWriteBps": [],
        "BlkioDeviceReadIOps": [],
        "BlkioDeviceWriteIOps": [],
        "RestartPolicy": {"Name": spec.get("restart_policy") or "no", "MaximumRetryCount": 0},
        "CgroupParent": spec.get("cgroup_parent") or "",
    }


def docker_limits(host_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """HostConfig's limit fields as Docker holds them, with its equivalent spellings of "unset" made one (a null
    device list is an empty one; a CPU quota or pids limit of -1 is 0, none)."""
    hc = dict(host_config or {})
    out: dict[str, Any] = {}
    for field in DOCKER_FIELDS:
        v = hc.get(field)
        if field.startswith("Blkio") and field != "BlkioWeight":
            v = v or []
        elif field in ("CpuQuota", "PidsLimit"):
            v = 0 if v in (None, -1) else v
        elif field == "RestartPolicy":
            v = {"Name": (v or {}).get("Name") or "no", "MaximumRetryCount": (v or {}).get("MaximumRetryCount", 0)}
        elif field in ("CpusetCpus", "CpusetMems", "CgroupParent"):
            v = v or ""
        else:
            v = v or 0
        out[field] = v
    return out


def _systemd_owned(level: str) -> bool:
    return level.rsplit("/", 1)[-1].endswith((".slice", ".scope", ".service"))


def _restore_writes(version: int, name: str, planned: Any, live: Any) -> list[str]:
    """The text(s) to write into a limit file to give it the planned value."""
    if name in _THROTTLES:
        devices = {ln.split()[0] for ln in live or []}
        clear = "rbps=max wbps=max riops=max wiops=max" if version == 2 else "0"
        return [f"{d} {clear}" for d in sorted(devices)] + list(planned or [])
    if planned == "max" and version == 1:
        return ["-1"]
    return [str(planned)]


def limit_drift(spec: Mapping[str, Any] | None, container: Mapping[str, Any] | None,
                slice_plan: Mapping[str, Any] | None = None, ours: bool = True) -> dict[str, Any]:  # fmt: skip
    """The running container's limits against the plan's, and how a deploy restores them.

    `container` is the plan's read of it (refdeploy_host_readings: HostConfig's limit fields and `Limits`, the
    kernel's readings). {"lines": one per drifted value, naming its level; "docker_update": `docker update` flags;
    "cgroup_writes": [{"path", "values", "line"}] for cgroup files; "replace_why": why it must be replaced, or "";
    "refuse": what the deploy will not change itself}.

    `ours`: the container was started from the planned spec (serving/plan/plan.py running_state). When it was not
    (another profile, an older spec), a deploy replaces it and the new one starts with the plan's values: its own
    Docker fields, level and affinity are not drift, and only its parent's levels, which bound the new container
    too, are judged. (Judged against the new plan, a profile change from an 8g container to a 10g one wrote
    10g into the old container's memory.limit_in_bytes, which the kernel refused above its memsw limit.)"""
    out: dict[str, Any] = {"lines": [], "docker_update": [], "cgroup_writes": [], "replace_why": "", "refuse": []}
    if not spec or not container:
        return out
    if not ours:
        return _level_drift(out, spec, container, slice_plan)
    planned_hc = planned_docker(spec)
    live_hc = docker_limits(container.get("HostConfig"))
    unsettable: list[str] = []
    for field, want in planned_hc.items():
        have = live_hc.get(field)
        if have == want:
            continue
        out["lines"].append(f"docker {field}: {have} (the plan: {want})")
        flag = _UPDATE_FLAGS.get(field)
        if flag is None or want in (0, "", []) or field == "CgroupParent":
            unsettable.append(field)
        elif field == "RestartPolicy":
            out["docker_update"] += [flag, want["Name"]]
        else:
            out["docker_update"] += [flag, str(want / 1e9 if field == "NanoCpus" else want)]
    reasons = [f"docker update cannot set {', '.join(unsettable)} back to unset"] if unsettable else []
    launched = container.get("LaunchAffinity")
    now = main_affinity(container.get("Limits"))
    # Judged once the engine is healthy, and on vLLM's own processes (the engine core, the workers): while it starts
    # (a deploy right after Docker restarted it) a worker runs as "python3 -c from multiprocessing..." before it
    # takes its title and binds itself (measured: a spawn helper on CPUs 0 and 0-1 at 14.6 s, the worker bound to
    # CPU 0 at 21.8 s of a restart).
    healthy = ((container.get("State") or {}).get("Health") or {}).get("Status") == "healthy"
    if isinstance(launched, dict) and now is not None and healthy:
        judged = sorted(p for p in set(now) & set(launched) if p.startswith("VLLM::"))
        moved = [f"{p} runs on CPUs {','.join(now[p])} (at launch: {','.join(launched[p])})"
                 for p in judged if now[p] != launched[p]]  # fmt: skip
        out["lines"] += [f"affinity: {m}" for m in moved]
        if moved:
            reasons.append("a process's CPU affinity changed since launch: only a new start gives vLLM's binding back")
    if reasons:
        out["replace_why"] = "; ".join(reasons)
    return _level_drift(out, spec, container, slice_plan, own_level=True)


def _level_drift(out: dict[str, Any], spec: Mapping[str, Any], container: Mapping[str, Any],
                  slice_plan: Mapping[str, Any] | None, own_level: bool = False) -> dict[str, Any]:  # fmt: skip
    """limit_drift at the cgroup levels: the container's own (where `own_level`) and its parent's."""
    levels = parse_levels(container.get("Limits"))
    if levels is None:
        return out
    version = levels["cgroup_version"]
    slice_level = f"/{spec['cgroup_parent']}" if spec.get("cgroup_parent") else None
    planned = planned_levels(spec, version, slice_plan, slice_level)
    container_dir = levels["paths"].get("container", "")
    parent = container_dir.rsplit("/", 1)[0] or "/"
    for level, values in levels["levels"].items():
        if level not in ("container", parent) or level == "/" or (level == "container" and not own_level):
            # Judged: the container's level and its parent, the one the deployment owns (Docker's /docker, the
            # plan's slice, systemd's system.slice). Above it the levels are the platform's (a VM's slice, a test
            # host's own container): recorded in the manifest, compared by make verify, never written by a deploy.
            continue
        want_here = planned.get(level, planned["*"])
        for name, want in want_here.items():
            if name not in values or values[name] == want:
                continue
            line = f"{level} {name}: {values[name]} (the plan: {want})"
            out["lines"].append(line)
            path = f"/sys/fs/cgroup{'/' + _controller(name) if version == 1 else ''}{levels['paths'][level]}/{name}"
            path = path.replace("//", "/")
            if level == "container":
                if out["replace_why"]:
                    continue  # the new container starts with it
                # Written after any docker update too: docker update writes only the flags it is given (measured:
                # a quota written by hand stayed through `docker update --pids-limit`), and the same value again
                # changes nothing.
                out["cgroup_writes"].append({"path": path, "values": _restore_writes(version, name, want, values[name]),
                                      "line": line})  # fmt: skip
            elif _systemd_owned(level):
                unit = level.rsplit("/", 1)[-1]
                out["refuse"].append(f"{line}: systemd owns {level}; restore it with systemctl set-property "
                                     f"--runtime {unit} (or its unit file), then deploy again")  # fmt: skip
            else:
                out["cgroup_writes"].append({"path": path, "values": _restore_writes(version, name, want, values[name]),
                                      "line": line})  # fmt: skip
    return out


def _controller(name: str) -> str:
    return name.split(".", 1)[0]


def describe_drift(drift: Mapping[str, Any]) -> str:
    """One line for make status and make deploy: what drifted, at which level, and what a deploy does about it."""
    lines = list(drift.get("lines") or [])
    if not lines:
        return "limits: as planned, in Docker and at every cgroup level"
    if drift.get("refuse"):
        how = "make deploy stops before changing anything: " + "; ".join(drift["refuse"])
    elif drift.get("replace_why"):
        how = f"make deploy replaces the container ({drift['replace_why']})"
    else:
        how = "make deploy restores " + " and ".join(
            w
            for w, on in (("them with docker update", drift.get("docker_update")),
                          ("the cgroup files", drift.get("cgroup_writes")))
            if on
        )  # fmt: skip
    return f"limits: {len(lines)} not as planned: " + "; ".join(lines) + f" ({how})"
