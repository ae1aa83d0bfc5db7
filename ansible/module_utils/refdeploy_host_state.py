"""What is on the managed host now, for the roles to act on: the `host_state` of refdeploy_host_readings (the fact
refdeploy_host; the module's docstring says what each key holds). Read only.

Split out of the module, which holds the plan's readings: this is the part a converged deploy, `make status` and
every other playbook wait on first, so its Docker Engine calls run side by side (each `docker` CLI call is a Go
binary's start and a round trip to the engine, ~50-100 ms here, and they do not depend on each other once the
engine answered), and it reads what lets a deploy skip the tasks that would find everything as it is: directories'
owner and mode (`dirs`), groups by name (`groups`), whether a tree is already root's and read-only to others
(`trees`), and the engine's /health over its unix socket (`health_socket`).
"""

from __future__ import annotations

import grp
import hashlib
import http.client
import json
import os
import socket
import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ansible.module_utils.refdeploy_cgroups import HOSTCONFIG_FIELDS, container_cgroup, read_limits


def docker(argv: list[str], timeout_s: int) -> tuple[int, str, str]:
    """rc, stdout, last stderr line of `docker ARGV`, bounded (127: no docker CLI, 124: no answer in time)."""
    try:
        cp = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return 127, "", "docker: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"docker {argv[0]}: no answer within {timeout_s} s"
    return cp.returncode, cp.stdout, (cp.stderr.strip().splitlines() or [""])[-1]


def launch_affinity(kept_dir: str, cid: object) -> object:
    """The processes' affinity the deploy that started container `cid` verified (<kept_dir>/<ID>.affinity)."""
    if not kept_dir or not isinstance(cid, str) or not cid.isalnum():
        return None
    try:
        return json.loads((Path(kept_dir) / f"{cid}.affinity").read_text())
    except (OSError, ValueError):
        return None


def decided_on(c: dict[str, object], kept_dir: str = "") -> dict[str, object]:
    """`docker container inspect` of one container cut to what a deploy decides on (never its environment)."""
    config = c.get("Config") if isinstance(c.get("Config"), dict) else {}
    kept = {k: c.get(k) for k in ("Id", "Name", "RestartCount", "State")}
    # Whether the container's PID 1 is in this host's /proc: not where the "host" shares another's engine (the GPU
    # test hosts), and then a collection cannot tell a dead engine by its PID (refdeploy_collect does not wait).
    state = c.get("State") if isinstance(c.get("State"), dict) else {}
    pid = state.get("Pid") if isinstance(state.get("Pid"), int) else 0
    cid = c.get("Id") if isinstance(c.get("Id"), str) else ""
    visible = container_cgroup(pid, cid) is not None
    host_config = c.get("HostConfig") if isinstance(c.get("HostConfig"), dict) else {}
    return {
        **kept,
        "Config": {"Image": config.get("Image"), "Labels": config.get("Labels") or {}},
        "PidVisible": visible,
        # The limits in force, Docker's and the kernel's at every cgroup level (module_utils/refdeploy_cgroups.py):
        # status and deploy judge drift from them (serving/host/cgroup_limits.py).
        "HostConfig": {k: host_config.get(k) for k in HOSTCONFIG_FIELDS},
        "Limits": read_limits(pid, cid) if visible and state.get("Running") else None,
        "LaunchAffinity": launch_affinity(kept_dir, c.get("Id")),
    }


def regular_file(path: str) -> dict[str, object] | None:
    """A regular file's sha256, mode, uid and gid; None where it is not one."""
    try:
        st = Path(path).stat()
        if not stat.S_ISREG(st.st_mode):
            return None
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
    return {"sha256": digest, "mode": f"{stat.S_IMODE(st.st_mode):04o}", "uid": st.st_uid, "gid": st.st_gid}


def directory(path: str) -> dict[str, object] | None:
    """A directory's mode (setgid and sticky bits included, as `file` sets them: "02750"), uid and gid; None where it
    is not one (a symlink to a directory counts: `file` follows it too)."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return {"mode": f"{stat.S_IMODE(st.st_mode):05o}", "uid": st.st_uid, "gid": st.st_gid}


def group_gid(name: str) -> int | None:
    """The gid of the group `name` on this host (the group database, as `groupadd` writes it); None where none."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def tree_drift(path: str, limit: int = 5) -> list[str] | None:
    """The entries under `path` (itself included) that are not root:root with `u=rwX,go=rX` (directories 0755,
    files 0644, or 0755 where any execute bit was set: what `file: recurse, mode: u=rwX,go=rX` leaves), up to
    `limit` of them; None where `path` is not a directory. Symlinks are not followed, as `file` does not."""
    if directory(path) is None:
        return None
    drift: list[str] = []
    # os.walk: Path.walk is Python 3.12's, and a managed host may run 3.11.
    for top, _dirs, files in os.walk(path):
        # Each directory is judged as the root of its own step of the walk, each file here.
        root = Path(top)
        for p in [root, *(root / f for f in files)]:
            try:
                st = p.lstat()
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            mode = stat.S_IMODE(st.st_mode)
            want = 0o755 if stat.S_ISDIR(st.st_mode) or mode & 0o111 else 0o644
            if (st.st_uid, st.st_gid, mode) != (0, 0, want):
                drift.append(str(p))
                if len(drift) >= limit:
                    return drift
    return drift


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (the standard library's client speaks it once the socket is connected)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def health(socket_path: str, timeout_s: float = 5.0) -> dict[str, object]:
    """GET /health on the engine's unix socket: {"status": <HTTP status>} or {"status": None, "error": why}."""
    conn = _UnixHTTPConnection(socket_path, timeout_s)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        resp.read()
        return {"status": resp.status, "error": ""}
    except (OSError, http.client.HTTPException) as e:
        return {"status": None, "error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        conn.close()


def _online_cpus() -> str:
    try:
        return Path("/sys/devices/system/cpu/online").read_text().strip()
    except OSError:
        return ""


def host_state(
    read_docker: bool,
    port: int,
    images: list[str],
    containers: list[str],
    paths: list[str],
    files: list[str],
    timeout_s: int,
    kept_dir: str = "",
    dirs: list[str] | tuple[str, ...] = (),
    groups: list[str] | tuple[str, ...] = (),
    trees: list[str] | tuple[str, ...] = (),
    health_socket: str = "",
) -> dict[str, object]:
    kinds = {p: "directory" if Path(p).is_dir() else "file" if Path(p).exists() else "missing" for p in paths}
    state: dict[str, object] = {
        "docker": None,
        "images_present": [],
        "containers": [],
        "paths": kinds,
        "files": {p: f for p in files if (f := regular_file(p)) is not None},
        "dirs": {d: directory(d) for d in dirs},
        "groups": {g: group_gid(g) for g in groups},
        "trees": {t: tree_drift(t) for t in trees},
        "health": health(health_socket) if health_socket else None,
        # The CPUs the kernel has online ("0-1"): the bench plans its client's CPUs from them.
        "online_cpus": _online_cpus(),
    }
    if not read_docker:
        return state
    rc, out, err = docker(["version", "--format", "{{.Server.Version}}"], timeout_s)
    engine: dict[str, object] = {"rc": rc, "version": out.strip(), "error": err, "port_owners": []}
    state["docker"] = engine
    if rc != 0:
        return state
    # The engine answered: the three reads below are independent, so they run side by side.
    calls: dict[str, list[str]] = {}
    if port:
        calls["ps"] = ["ps", "--filter", f"publish={port}", "--format", "{{.Names}}"]
    if images:
        refs = [a for tag in images for a in ("--filter", f"reference={tag}")]
        calls["images"] = ["image", "ls", "--format", "{{.Repository}}:{{.Tag}}", *refs]
    if containers:
        # Exit status 1 when one of them does not exist: the output still holds those that do.
        calls["inspect"] = ["container", "inspect", *containers]
    with ThreadPoolExecutor(max_workers=max(1, len(calls))) as pool:
        got = {k: f.result()[1] for k, f in [(k, pool.submit(docker, argv, timeout_s)) for k, argv in calls.items()]}
    if "ps" in got:
        engine["port_owners"] = got["ps"].split()
    if "images" in got:
        state["images_present"] = sorted(set(got["images"].split()))
    if "inspect" in got:
        try:
            found = json.loads(got["inspect"] or "[]")
        except ValueError:
            found = []
        state["containers"] = [decided_on(c, kept_dir) for c in found if isinstance(c, dict)]
    return state
