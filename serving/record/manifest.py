"""The deploy manifest: what is running, read back from the host, checked against the plan.

The manifest role collects raw readings on the host (docker inspect, the
engine's /proc/1/limits, cgroup files, the image's own patch record, the host's
tuning); this module turns them into runs/<host>/<timestamp>/manifest.json and
checks that the container runs the planned spec, and that the limits in force
and the applied patches are the ones the plan asked for. `make verify` builds
the same manifest in memory from the same readings (serving/record/verify.py).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serving.errors import InputError
from serving.host import cgroup_limits
from serving.host.host_tuning import host_tuning
from serving.host.limits import (
    LIMIT_ROWS,
    UNLIMITED,
    docker_size_bytes,
    parse_cgroup_limits,
    parse_proc_limits,
)
from serving.host.numa import parse_cpulist
from serving.plan.images import PATCH_LABEL_PREFIX
from serving.plan.render import PROFILE_LABEL, SPEC_LABEL

# 2: the repo's commit, the host's tuning, and the running container's spec digest, profile and argv read back.
# 3: every limit at every cgroup level, Docker's HostConfig limits and each thread's affinity (limits_in_force).
# 4: the GPUs' peer section (gpu.peer): P2P by GPU pair, ACS of their bridges, the IOMMU and their groups; the
#    kernel module (gpu.kernel_module) and each GPU's persistence and MIG modes.
SCHEMA_VERSION = 4
# What `make verify` accepts as a reference: the manifests of a deploy (running, or rendered only).
DEPLOY_KINDS = ("deploy", "deploy-rendered")


def repo_state(root: Path) -> dict[str, Any]:
    """The controller checkout's commit and whether its tree was dirty (`git rev-parse HEAD`, `git status
    --porcelain`): the playbooks, roles and patch series a deploy ran from. {"commit": None, "error": why}
    where `root` is not a git checkout (a copy without .git) or git is missing."""

    def git(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=30, check=False)

    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=normal") if head.returncode == 0 else head
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"commit": None, "dirty": None, "error": f"git: {e}"}
    if head.returncode != 0 or status.returncode != 0:
        said = ((head.stderr if head.returncode else status.stderr).strip().splitlines() or ["no output"])[-1]
        return {"commit": None, "dirty": None, "error": f"{root}: {said}"}
    changed = status.stdout.splitlines()
    # The first lines name what was dirty; the count says how much.
    return {
        "commit": head.stdout.strip(),
        "dirty": bool(changed),
        "changed": changed[:20],
        "changed_count": len(changed),
    }


def new_run_dir(runs_dir: Path, host: str) -> Path:
    """runs/<host>/<UTC timestamp>/, created private (0700: a run holds the host's readings); a suffix keeps two
    runs in one second apart."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (runs_dir.resolve() / host).mkdir(parents=True, exist_ok=True, mode=0o700)
    for n in range(100):
        path = runs_dir.resolve() / host / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{runs_dir / host}: cannot create a run directory for {stamp}")


def discard_run_dir(runs_dir: Path, host: str, path: Path) -> bool:
    """Remove a refused run's directory again, so that a refusal leaves no empty runs/<host>/<ts>/ behind: only a run
    directory of this host (runs/<host>/<id> itself, the path new_run_dir gave this run), and only while it is empty
    (whatever is in it is a record, kept). True when it was removed."""
    if Path(path).parent != runs_dir.resolve() / host:
        raise InputError(f"{path}: not a run directory of {host} under {runs_dir}: nothing removed")
    try:
        Path(path).rmdir()
    except OSError:  # not empty, or already gone
        return False
    return True


def _check(checks: list[dict[str, Any]], name: str, expected: Any, actual: Any) -> None:
    checks.append({"check": name, "expected": expected, "actual": actual, "ok": expected == actual})


def parse_sha256_list(text: str) -> dict[str, str]:
    """`sha256sum` output -> {file name: hex digest}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[1].lstrip("*")] = parts[0]
    return out


def engine_startup_s(started_at: str | None, server_started_log_ts: str | None) -> float | None:
    """Seconds from the container's start to vLLM's "Starting vLLM server" line (1 s resolution).

    The log line carries month-day and time only, on the container's clock (UTC);
    the year comes from Docker's StartedAt.
    """
    if not started_at or not server_started_log_ts:
        return None
    start = datetime.fromisoformat(started_at[:26].rstrip("Z") + "+00:00")
    start = start.replace(microsecond=0)
    logged = datetime.strptime(f"{start.year}-{server_started_log_ts}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return (logged - start).total_seconds()


def _utc(text: str | None) -> datetime | None:
    """Docker's and Ansible's UTC timestamps (nanoseconds allowed) as aware datetimes."""
    if not text:
        return None
    return datetime.fromisoformat(text[:26].rstrip("Z") + "+00:00")


def deploy_timing(raw: dict[str, Any], engine_s: float | None) -> dict[str, Any]:
    """When this deploy started, when it saw the new container healthy, and what of that was vLLM's own start-up."""
    timing = raw.get("timing") or {}
    started = _utc(timing.get("deploy_started_utc"))
    healthy = _utc(timing.get("healthy_observed_utc"))
    to_healthy = (healthy - started).total_seconds() if started and healthy else None
    return {
        "deploy_started_utc": timing.get("deploy_started_utc"),
        "healthy_observed_utc": timing.get("healthy_observed_utc"),
        "time_to_healthy_s": round(to_healthy, 2) if to_healthy is not None else None,
        "engine_startup_s": engine_s,
        "overhead_to_healthy_s": round(to_healthy - engine_s, 2) if to_healthy is not None and engine_s else None,
    }


def slice_limits(readings: Mapping[str, Any] | None) -> tuple[dict[str, str] | None, str | None]:
    """The serving slice's limits read back (the cgroups role's refdeploy_read_files): {file: value}, its
    ancestors' as "root:<file>"; or (None, why) while the slice's cgroup does not exist yet."""
    if not readings:
        return None, None
    slice_dir, root = str(readings["slice_dir"]), str(readings["root"])
    files: Mapping[str, Any] = readings.get("files") or {}
    if (files.get(slice_dir) or {}).get("kind") != "directory":
        return None, f"{slice_dir} does not exist yet (systemd creates it with its first unit)"
    limits: dict[str, str] = {}
    for path, got in files.items():
        if got.get("kind") != "file":
            continue
        parent, name = path.rsplit("/", 1)
        key = name if parent == slice_dir else f"root:{name}" if parent == root else None
        if key:
            limits[key] = str(got["content"]).strip()
    return limits or None, None


def _check_image(
    checks: list[dict[str, Any]],
    spec: Mapping[str, Any],
    images: Mapping[str, Any],
    image: Mapping[str, Any],
    container: Mapping[str, Any],
    inside: Mapping[str, Any],
) -> dict[str, str]:
    """The container runs the planned image, which carries the planned patches: {patch: sha256} planned."""
    labels = image.get("Config", {}).get("Labels") or {}
    config = container.get("Config", {})
    _check(checks, "container runs the planned image", image["Id"], container.get("Image"))
    _check(checks, "container runs the planned image tag", spec["image"], config.get("Image"))
    # What it was started from, as Docker holds it: the digest of its spec (the serve role's decision,
    # serving.plan.plan.running_state) and the vLLM argv.
    planned_digest = (spec.get("labels") or {}).get(SPEC_LABEL)
    _check(
        checks,
        "container was started from the planned spec",
        planned_digest,
        (config.get("Labels") or {}).get(SPEC_LABEL),
    )
    _check(checks, "container runs the planned vLLM argv", spec["command"], config.get("Cmd"))
    planned = {p["name"]: p["sha256"] for p in images["patches"]}
    labelled = {
        k[len(PATCH_LABEL_PREFIX) :]: v.removeprefix("sha256:")
        for k, v in labels.items()
        if k.startswith(PATCH_LABEL_PREFIX)
    }
    applied = parse_sha256_list(inside.get("patches") or "")
    _check(checks, "image labels carry the planned patch hashes", planned, labelled)
    _check(checks, "patches applied in the image are the planned ones", planned, applied)
    return planned


def _check_limits(
    checks: list[dict[str, Any]],
    spec: Mapping[str, Any],
    host_config: Mapping[str, Any],
    cgroup: Mapping[str, Any],
    proc: Mapping[str, tuple[int, int]],
) -> dict[str, list[int]]:
    """The limits in force, in Docker's view, the cgroup's and the kernel's: Docker's ulimits, as it holds them."""
    if "cpuset_cpus" in spec:
        _check(checks, "cpuset (docker)", spec["cpuset_cpus"], host_config.get("CpusetCpus"))
        want_cpus = parse_cpulist(spec["cpuset_cpus"])
        _check(checks, "cpuset (cgroup)", want_cpus, parse_cpulist(str(cgroup["cpuset_cpus"] or "")))
    if "cpuset_mems" in spec:
        _check(checks, "cpuset mems (docker)", spec["cpuset_mems"], host_config.get("CpusetMems"))
    if "memory" in spec:
        want = docker_size_bytes(spec["memory"])
        _check(checks, "memory limit (docker)", want, host_config.get("Memory"))
        _check(checks, "memory limit (cgroup)", want, cgroup["memory_limit_bytes"])
    _check(checks, "shm size (docker)", docker_size_bytes(spec["shm_size"]), host_config.get("ShmSize"))
    docker_ulimits = {u["Name"]: [u["Soft"], u["Hard"]] for u in host_config.get("Ulimits") or []}
    for entry in spec["ulimits"]:
        name, soft, hard = entry.split(":")
        _check(checks, f"ulimit {name} (docker)", [int(soft), int(hard)], docker_ulimits.get(name))
        row = LIMIT_ROWS.get(name)
        if row:
            got = proc.get(row)
            want_limits = [int(soft), int(hard)]
            _check(checks, f"ulimit {name} (/proc/1/limits of the engine)", want_limits, list(got) if got else None)
    return docker_ulimits


def _caps(names: Any) -> list[str]:
    """Capability names as Docker may hold them (SYS_NICE, or CAP_SYS_NICE from 20.10 on), without the prefix."""
    return sorted(str(n).upper().removeprefix("CAP_") for n in names or [])


def _check_privileges(checks: list[dict[str, Any]], spec: Mapping[str, Any], host_config: Mapping[str, Any]) -> None:
    """The capabilities, no-new-privileges, pids limit and network in force, in Docker's view (render.py
    least_privilege); only what the spec sets, so a plan from before they were planned reads back."""
    if "cap_drop" in spec:
        _check(checks, "capabilities dropped (docker)", _caps(spec["cap_drop"]), _caps(host_config.get("CapDrop")))
        _check(checks, "capabilities added (docker)", _caps(spec.get("capabilities")),
               _caps(host_config.get("CapAdd")))  # fmt: skip
    if "security_opts" in spec:
        # Docker keeps the option as given; `no-new-privileges:true` is the same option.
        held = [str(o).removesuffix(":true") for o in host_config.get("SecurityOpt") or []]
        _check(checks, "security options (docker)", sorted(spec["security_opts"]), sorted(held))
    if "pids_limit" in spec:
        _check(checks, "pids limit (docker)", spec["pids_limit"], host_config.get("PidsLimit"))
    if "network_mode" in spec:
        _check(checks, "network (docker)", spec["network_mode"], host_config.get("NetworkMode"))


def _check_ports(checks: list[dict[str, Any]], spec: Mapping[str, Any], container: Mapping[str, Any]) -> None:
    """What Docker publishes (host ip:port:container port, as the spec writes it: nothing, for vLLM, which listens
    on a unix socket, render.py API_SOCKET_DIR), and a network address the spec fixes (an earlier deploy's)."""
    bindings = (container.get("HostConfig") or {}).get("PortBindings") or {}
    published = sorted(
        f"{b.get('HostIp', '')}:{b.get('HostPort', '')}:{port.split('/')[0]}"
        for port, held in bindings.items() for b in held or []
    )  # fmt: skip
    _check(checks, "published ports (docker)", sorted(spec.get("published_ports") or []), published)
    networks = (container.get("NetworkSettings") or {}).get("Networks") or {}
    for want in spec.get("networks") or []:
        got = (networks.get(want["name"]) or {}).get("IPAddress")
        _check(checks, f"address on {want['name']} (docker)", want.get("ipv4_address"), got or None)


def build_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a running deploy. `raw` holds the run's plan (serving/plan/plan.py), Docker's inspection of
    the container and its image, what the container itself reports (serving/standalone/inside_readings.py), the
    effective config and the placement verified by the serve and placement roles, and the host's facts."""
    plan = raw["plan"]
    launch = plan["launch"]
    inside = raw.get("inside") or {}
    cgroup_files = dict(inside.get("cgroup") or {})
    spec = launch["spec"]
    images = launch["images"]
    image = raw["image_inspect"]
    container = raw["container_inspect"]
    labels = image.get("Config", {}).get("Labels") or {}
    host_config = container.get("HostConfig", {})
    checks: list[dict[str, Any]] = []
    planned = _check_image(checks, spec, images, image, container, inside)
    placement = raw.get("placement")
    if placement is not None:
        _check(checks, "every worker rank runs where the plan binds it", [], placement.get("problems"))
    cgroup = parse_cgroup_limits(cgroup_files)
    proc = parse_proc_limits(inside.get("proc_limits") or "")
    docker_ulimits = _check_limits(checks, spec, host_config, cgroup, proc)
    _check_privileges(checks, spec, host_config)
    _check_ports(checks, spec, container)
    # Every limit at every cgroup level, and Docker's own, against the plan (the same judgement as make status's).
    host_limits = raw.get("host_limits")
    slice_plan = (plan.get("gpu") or {}).get("slice")
    drift = cgroup_limits.limit_drift(spec, {"HostConfig": host_config, "Limits": host_limits}, slice_plan)
    _check(checks, "limits at every cgroup level and in Docker are the plan's", [], drift["lines"])
    levels = cgroup_limits.parse_levels(host_limits)

    effective = raw.get("effective", {})
    engine_s = engine_startup_s(container.get("State", {}).get("StartedAt"), effective.get("server_started_log_ts"))
    container_labels = container.get("Config", {}).get("Labels") or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "deploy",
        "host": raw["host"],
        "run_id": raw["run_id"],
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "repo": raw.get("repo"),
        "host_facts": raw.get("facts", {}),
        "host_tuning": host_tuning(raw.get("host_tuning")),
        "stand_in": launch.get("stand_in"),
        "image": {
            "id": image["Id"],
            "tag": images["runtime_tag"],
            "repo_digests": image.get("RepoDigests") or [],
            "labels": labels,
            "vllm": {
                "distribution": images["distribution"],
                "version": images["version"],
                "engine_reports": effective.get("vllm_version"),
            },
            "patches": [{"name": n, "sha256": h} for n, h in planned.items()],
            "removed_packages": (inside.get("removed") or "").split(),
            "base": {"tag": images["base_tag"], "suite": images["base_suite"], "mirror": images["base_mirror"]},
        },
        "model": {
            "host_path": launch["model"]["host_path"],
            "files_sha256": parse_sha256_list(inside.get("model_sums") or ""),
            # What the plan read of it before the deploy (serving/plan/model_facts.py): architecture, sizes.
            "facts": plan.get("model"),
        },
        "vllm_argv": spec["command"],
        "container_spec": spec,
        "container": {
            "id": container.get("Id"),
            "name": container.get("Name", "").lstrip("/"),
            "started_at": container.get("State", {}).get("StartedAt"),
            # Read back from Docker: what it was started from (the plan's are container_spec and vllm_argv).
            "profile": container_labels.get(PROFILE_LABEL),
            "spec_sha256": container_labels.get(SPEC_LABEL),
            "cmd": container.get("Config", {}).get("Cmd"),
            "replaced_by_this_deploy": bool(raw.get("replaced")),
            "engine_startup_s": engine_s,
        },
        "deploy_timing": deploy_timing(raw, engine_s if raw.get("replaced") else None),
        "effective_config": effective,
        # Per rank, host (and on CUDA device) memory at each phase boundary, logged inside the workers.
        "memory_by_phase": raw.get("memory_phases"),
        # What clients beyond loopback reach (serving/plan/frontdoor.py), None where vLLM is on loopback only.
        "front_door": raw.get("front_door"),
        "placement": placement,
        "limits_in_force": {
            "cgroup_version": cgroup["cgroup_version"],
            "cpuset_cpus": cgroup["cpuset_cpus"],
            "cpuset_mems": cgroup["cpuset_mems"],
            "memory_limit_bytes": cgroup["memory_limit_bytes"],
            "docker_ulimits": docker_ulimits,
            "proc_limits": {k: ["unlimited" if x == UNLIMITED else x for x in v] for k, v in proc.items()},
            # The kernel's, at the container's cgroup ("container") and each ancestor by its path, up to the root
            # ("/"), by file name (serving/host/cgroup_limits.py); where each level is (its path has the container's
            # ID), Docker's own HostConfig values, and each process's threads' affinity (no pids: by process title
            # and thread name).
            "cgroup": levels["levels"] if levels else None,
            "cgroup_paths": levels["paths"] if levels else None,
            "docker": cgroup_limits.docker_limits(host_config),
            "affinity": cgroup_limits.affinity(host_limits),
        },
        "gpu": gpu_section(plan.get("gpu"), raw.get("gpu_host")),
        "plan": plan,
        "verification": checks,
        "verified": all(c["ok"] for c in checks),
    }


def gpu_section(gpu: dict[str, Any] | None, host: dict[str, Any] | None) -> dict[str, Any] | None:
    """A GPU host's part of the manifest: the plan's facts and decisions (GPUs, NUMA plan, RAM budget with its
    table, the data's drive and its SMART health), the serving slice with the limits read back from its cgroup
    (absent until systemd has created it), and what the host roles changed (`host`)."""
    if not gpu:
        return None
    host = host or {}
    limits, absent = slice_limits(host.get("slice_readings"))
    return {
        "gpus": gpu.get("gpus"),
        "kernel_module": gpu.get("kernel_module"),
        "numa_plan": gpu.get("numa_plan"),
        "ram_budget": gpu.get("ram_budget"),
        "ram_budget_table": (gpu.get("ram_budget_table") or "").splitlines(),
        "data": gpu.get("data"),
        # Whether the GPUs can talk (serving/host/pcie_peer.py), as the plan read the host, with its lines.
        "peer": gpu.get("peer"),
        "slice": {
            **(gpu.get("slice") or {}),
            "limits_read_back": limits,
            "absent": absent,
        },
        "host_settings": host.get("host_settings"),
    }


def build_rendered_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a deploy that rendered the serving container without starting it (serve_launch:
    false: the GPU test hosts, which have no GPUs). Everything before the start is recorded as for a real
    deploy; the spec written on the host must be the plan's."""
    plan = raw["plan"]
    launch = plan["launch"]
    spec = launch["spec"]
    images = launch["images"]
    image = raw.get("image_inspect") or {}
    text = raw["rendered_text"]
    try:
        on_host = json.loads(text)
    except json.JSONDecodeError as e:
        on_host = f"not JSON: {e}"
    checks: list[dict[str, Any]] = []
    _check(checks, "rendered container spec on the host is the plan's", spec, on_host)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "deploy-rendered",
        "launched": False,
        "host": raw["host"],
        "run_id": raw["run_id"],
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "repo": raw.get("repo"),
        "host_facts": raw.get("facts", {}),
        "host_tuning": host_tuning(raw.get("host_tuning")),
        "stand_in": launch.get("stand_in"),
        "image": {
            "tag": images["runtime_tag"],
            "present_on_host": bool(image),
            "id": image.get("Id"),
            "vllm": {"distribution": images["distribution"], "version": images["version"]},
            "patches": [{"name": p["name"], "sha256": p["sha256"]} for p in images["patches"]],
        },
        "model": {"host_path": launch["model"]["host_path"]},
        "vllm_argv": spec["command"],
        "container_spec": spec,
        "rendered_spec": {"path": raw["rendered_path"], "sha256": hashlib.sha256(text.encode()).hexdigest()},
        "gpu": gpu_section(plan.get("gpu"), raw.get("gpu_host")),
        "plan": plan,
        "verification": checks,
        "verified": all(c["ok"] for c in checks),
    }


def failed_checks(manifest: dict[str, Any]) -> list[str]:
    return [
        f"{c['check']}: expected {c['expected']!r}, found {c['actual']!r}"
        for c in manifest["verification"]
        if not c["ok"]
    ]


def record_deploy(raw: dict[str, Any], runs_dir: Path) -> dict[str, Any]:
    """Write a deploy's raw readings and manifest to a new run directory and verify it: {"path", "error"}.

    Redacted on arrival (serving/config/redact.py): the raw readings (the full docker inspect), the plan and the
    manifest all come from them. `error` is the one line when the container (or the rendered spec) differs
    from the plan; the files are written either way, as the evidence."""
    from serving.config.redact import redact

    raw = redact(raw)
    run_dir = new_run_dir(runs_dir, raw["host"])
    raw["run_id"] = run_dir.name
    (run_dir / "raw-readings.json").write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    manifest = build_rendered_manifest(raw) if raw.get("launched") is False else build_manifest(raw)
    out = run_dir / "manifest.json"
    out.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    bad = failed_checks(manifest)
    what = "the rendered container" if manifest["kind"] == "deploy-rendered" else "the running container"
    error = f"manifest {out}: {what} differs from the plan: " + "; ".join(bad) if bad else None
    return {"path": str(out), "run_id": run_dir.name, "error": error}
