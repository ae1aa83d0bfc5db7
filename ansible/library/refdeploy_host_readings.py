#!/usr/bin/python
"""Ansible module refdeploy_host_readings: what a plan needs to know about the managed host, read only.

  - name: Read the host for the plan          (the refdeploy_plan action plugin runs it)
    refdeploy_host_readings:
      mode: gpu                               # cpu: the served files (and the API key file); gpu: everything
      host: gpu3090-a
      served_dirs: [/srv/models/llama]
      api_key_file: /etc/refdeploy/api-key    # its owner, mode, size, type, length, charset; never its contents
      hf_token_file: /etc/refdeploy/hf-token  # its owner, mode, size and type; never its contents
      tls_key_file: /etc/ssl/refdeploy/key.pem  # the front door's operator key: its owner, mode, size and type
      cache_dir: /var/lib/refdeploy/cache     # the compile caches' root: its free space (df)
      query_gpu_fields: [index, name, ...]    # serving.host.gpu_facts.QUERY_GPU_FIELDS
      settings_fields: [index, ...]           # serving.host.host_tuning.SETTINGS_FIELDS (GPU mode: the GPUs' settings)
      read_docker: true                       # Docker Engine's state, see `host_state`
      docker_port: 8443                       # the containers that publish this port (0: none asked)
      images: [refdeploy/vllm, refdeploy/probes]   # references (a repository: all its tags)
      paths: [/var/lib/refdeploy/secrets/refdeploy-vllm.api-key]
      containers: [refdeploy-vllm, refdeploy-vllm-previous, refdeploy-vllm-samplers]
      files: [/var/lib/refdeploy/rendered/refdeploy-vllm.json]
      kept_dir: /var/lib/refdeploy/effective  # <container ID>.affinity: its processes' affinity verified at launch
      dirs: [/var/lib/refdeploy/api]          # each directory's mode, uid and gid
      dir_children: [/var/lib/refdeploy/cache/refdeploy-vllm/cpu-tiny]   # ... and of each directory in these
      groups: [refdeploy-api]                 # each group's gid
      trees: [/var/lib/refdeploy/models/tiny] # the entries that are not root's with u=rwX,go=rX
      health_socket: /var/lib/refdeploy/api/refdeploy-vllm/vllm.sock   # GET /health there
      wheelhouse_dir: /opt/wheels             # images_wheelhouse_dir, images_extra_ca_file: hashed, see build_files
      extra_ca_file: /etc/ssl/certs/ca-certificates.crt
      build_files_cache: /var/lib/refdeploy/build-files.json
      facts_cache: /var/lib/refdeploy/host-facts.json   # the host's facts as refdeploy_host_facts kept them
      engine: {container: refdeploy-vllm, socket: /run/refdeploy/api/vllm.sock, kept_dir: /var/lib/refdeploy/effective,
               inside_script: "...", inside_args: [/models/tiny]}   # a deploy's read: see `engine` below
    register: got                             # got.readings: {name: text}, as serving/plan/gpu_plan.py reads them;
                                              # got.host_state: what the roles act on, see below;
                                              # got.tuning: the host's tuning, for the manifest, see below

Readings (each the tool's own output, in its own format): hostname, served_files (`find -type f -printf
'%s\\t%p\\n'`), model_headers (JSON: each served config.json's text and each GGUF file's header as the format lays
it out, metadata and tensor table, never the weights), df (`df -B1 --output=target,avail,size` of the served
directories, Docker's data root and `cache_dir`, after a "<role>\\t<path>" line for each), api_key_file (`stat -c
'%u %a %s %F'`, or "missing"), api_key_shape (the key's length and whether it keeps to its charset, see key_shape),
hf_token_file and tls_key_file (as api_key_file); for a GPU host also nvidia_smi_L, query_gpu, topo, the GPUs' peer
readings p2p_read, pci_paths, acs and iommu (module_utils/refdeploy_pcie_peer.py), sysfs (node and PCI NUMA files as
"/sys/<path>\\t<value>"), meminfo, nvidia_version (/proc/driver/nvidia/version), cgroup_fs, docker_runtimes,
dockerd_limits, data_paths, lsblk, findmnt:<dir> and smart:<nvme disk>. `missing` lists the tools the host lacks,
`timeout` the commands that did not answer within timeout_s (a wedged driver, a dead NFS mount, a dockerd that does
not answer): the plan names each one. `host_facts` are the host's facts for the platform, the distribution, the
CPUs and the memory (ansible_hostname, ansible_distribution_version, ansible_processor_vcpus, ansible_memtotal_mb,
...) as refdeploy_host_facts collected them with the setup module's own collectors and kept them in `facts_cache`,
while what they are read from is unchanged (module_utils/refdeploy_facts_cache.py): empty, and `host_facts_cached`
false, where none are kept, they are stale, or no facts_cache was given. This module never imports the collectors
(~100 files to parse and compile on each run); a deploy runs refdeploy_host_facts where it found none.

`host_state` is what is on the host now, for the roles to act on (not for the plan, which must not vary with
it): `docker` (Docker Engine's `rc`, `version` and last `error` line of `docker version`, and `port_owners`, the
containers that publish docker_port, the front door's),
`images_present` (the repository:tag the engine has of `images`),
`containers` (`docker container inspect` of those of `containers` that exist, cut to what a deploy decides on:
Id, Name, RestartCount, State, Config.Image, Config.Labels and HostConfig's limits, and `Limits`, the kernel's
limits at every cgroup level over a running one's PID 1, and its threads' affinity (module_utils/refdeploy_cgroups.py),
and `LaunchAffinity`, its processes' affinity as the deploy that started it verified it (<kept_dir>/<ID>.affinity);
never their environment), `paths` (each of
`paths` as directory, file or missing) and `files` (each regular file of `files` as its sha256, mode, uid and
gid: a role skips writing a file the host has as it would write it), `dirs` (each directory of `dirs`, and of
those directly in `dir_children`, as its mode, uid and gid, or null), `groups` (each group's gid, or null),
`trees` (the first five entries of each tree that are not root:root with u=rwX,go=rX; null where it is not a
directory) and `health` (the HTTP status of GET /health on `health_socket`, or null and why; null where not asked).
One read for what preflight, images and serve would each ask again (module_utils/refdeploy_host_state.py, read
beside the readings).

`tuning` is the host's tuning as the manifest records it (serving/host/host_tuning.py parses it), each reading the
file's text or null where the file does not exist (no cpufreq on many VMs, no NUMA balancing on some kernels):
cmdline (/proc/cmdline), cpu_governors ("cpu<N>\t<governor>" per /sys/devices/system/cpu/cpu*/cpufreq/
scaling_governor), thp_enabled and thp_defrag (/sys/kernel/mm/transparent_hugepage/), swappiness
(/proc/sys/vm/swappiness), numa_balancing (/proc/sys/kernel/numa_balancing), and in GPU mode gpu_settings
(`nvidia-smi --query-gpu=<settings_fields> --format=csv,noheader,nounits`: persistence mode, application
clocks, power limits, ECC mode, PCIe links). Like the plan's readings it only reads; it is kept out of the plan
(a host's tuning is compared by `make verify`, not planned from). `replayed` names the replay directory where
there is one, so the manifest says the GPU settings were replayed.

`engine` (null unless asked) is the serving container's engine read now, as refdeploy_engine_readings reads it
once it answers (module_utils/refdeploy_engine_read.py), without waiting: `healthy` false and nothing read where
/health does not answer at once, `error` where a reading failed. A deploy asks (plan_engine_readings), and serve
keeps these readings for a container it keeps unchanged (roles/serve/tasks/kept.yml) instead of reading again.

`build_files` is what the images role copies into a build from the host (the wheelhouse's files by path and
sha256, the extra CA file's sha256, or extra_ca_missing): image tags hash them (serving/plan/images.py), so a
changed wheel or CA builds a new image rather than finding the old one.

The one replay seam (tests/replay/README.md; never set in production): where REFDEPLOY_REPLAY_DIR names a directory
of recorded readings, its sys/ stands for /sys and its host/ holds the host-level readings a test container cannot
have (meminfo.txt, proc-driver-nvidia-version.txt, cgroup-fs.txt, docker-runtimes.json, dockerd-limits.txt). The
tools a test host cannot have (nvidia-smi, lsblk, findmnt, nvme, lspci, systemctl) are stand-ins found first on its
PATH, which serve the same directory; this module runs tools by PATH like any other.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.refdeploy_engine_read import ReadError, engine_readings
from ansible.module_utils.refdeploy_facts_cache import cached
from ansible.module_utils.refdeploy_host_state import host_state
from ansible.module_utils.refdeploy_pcie_peer import bus_ids_of, peer_readings

# The NUMA topology: each node's CPUs, and each PCI device's node and local CPUs.
SYSFS = ("devices/system/node/node*/cpulist", "bus/pci/devices/*/numa_node", "bus/pci/devices/*/local_cpulist")
NVME_DISK = re.compile(r'"name": ?"(nvme[0-9]+n[0-9]+)"')


class Reader:
    def __init__(self, timeout_s: int) -> None:
        self.timeout_s = timeout_s
        self.missing: list[str] = []
        self.timeout: list[str] = []
        replay = os.environ.get("REFDEPLOY_REPLAY_DIR") or ""
        self.sys_root = f"{replay}/sys" if replay else "/sys"
        self.host_replay = f"{replay}/host" if replay else ""

    def which(self, tool: str) -> str | None:
        return shutil.which(tool)

    def run(self, argv: list[str], stderr: bool = False) -> str:
        """A command's stdout (and stderr, if asked), bounded; "" when it cannot run."""
        exe = self.which(argv[0])
        if exe is None:
            return ""
        try:
            cp = subprocess.run(
                [exe, *argv[1:]],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.timeout.append(f"{' '.join(argv)} (after {self.timeout_s} s)")
            return ""
        return cp.stdout.decode(errors="replace")

    def replayed(self, name: str) -> str | None:
        """A host-level reading a test host replays (REFDEPLOY_REPLAY_DIR/host), else None."""
        if not self.host_replay:
            return None
        f = Path(self.host_replay) / name
        return f.read_text() if f.is_file() else None


def docker_root() -> str:
    """Where Docker Engine keeps its images: daemon.json's data-root, else its default (a --data-root given on
    dockerd's command line instead is not seen here)."""
    try:
        root = json.loads(Path("/etc/docker/daemon.json").read_text()).get("data-root")
    except (OSError, ValueError, AttributeError):
        root = None
    return root if isinstance(root, str) and root.startswith("/") else "/var/lib/docker"


def _existing(paths: list[str]) -> list[str]:
    """Each path, or its nearest existing parent (df reads the filesystem a path would be created on)."""
    out = []
    for p in paths:
        q = Path(p)
        while not q.exists() and q != q.parent:
            q = q.parent
        out.append(str(q))
    return out


def _text(out: str) -> str:
    lines = out.splitlines()
    return "\n".join(lines) + "\n" if lines else ""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


# A model's own description of itself, read for the plan's servability and capacity (serving/plan/model_facts.py):
# each config.json (the model's, or its tokenizer directory's beside a GGUF) up to this size, and each GGUF file's
# header (its metadata and tensor table; never its weights) up to this many bytes of header.
CONFIG_MAX_BYTES = 1 << 20
GGUF_HEADER_MAX_BYTES = 256 << 20
# GGUF's metadata value types (ggml's gguf.h / the gguf package's GGUFValueType): struct format by type id; 8 is a
# string, 9 an array.
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# Numeric arrays up to this length are kept whole (per-layer head counts); longer ones, and string arrays (the
# tokenizer's vocabulary), as their type and length only.
_GGUF_ARRAY_KEPT = 512


class _Header:
    """A bounded little-endian reader over a GGUF file's header."""

    def __init__(self, f: Any, limit: int) -> None:
        self.f, self.left = f, limit

    def take(self, n: int) -> bytes:
        if n > self.left:
            raise ValueError(f"header larger than {GGUF_HEADER_MAX_BYTES} bytes")
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("file ends inside its header")
        self.left -= n
        return b

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _GGUF_SCALARS:
            return self.unpack(_GGUF_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, n = self.unpack("<I"), self.unpack("<Q")
            if itype in _GGUF_SCALARS and n <= _GGUF_ARRAY_KEPT:
                return [self.value(itype) for _ in range(n)]
            if itype in _GGUF_SCALARS:
                self.take(n * struct.calcsize(_GGUF_SCALARS[itype]))
            else:
                for _ in range(n):
                    self.value(itype)
            return {"array_of": itype, "length": n}
        raise ValueError(f"unknown metadata value type {vtype}")


def gguf_header(path: str) -> dict[str, Any]:
    """A GGUF file's header as the format lays it out (version, metadata, each tensor's name, dims and ggml type),
    or {"error": ...}. Standard library only: the module runs on the host, with no virtualenv (the controller reads
    the result with the gguf package's tables; tests/unit/ansible/test_model_headers.py checks it against the gguf
    package's own reader)."""
    try:
        with Path(path).open("rb") as f:
            h = _Header(f, GGUF_HEADER_MAX_BYTES)
            if h.take(4) != b"GGUF":
                return {"error": "not a GGUF file (no GGUF magic)"}
            version = h.unpack("<I")
            if version not in (2, 3):
                return {"error": f"GGUF version {version} (big-endian, or newer than 3): not read"}
            n_tensors, n_kv = h.unpack("<Q"), h.unpack("<Q")
            kv: dict[str, Any] = {}
            for _ in range(n_kv):
                key = h.string()
                kv[key] = h.value(h.unpack("<I"))
            tensors = []
            for _ in range(n_tensors):
                name = h.string()
                dims = [h.unpack("<Q") for _ in range(h.unpack("<I"))]
                ggml_type = h.unpack("<I")
                h.unpack("<Q")  # the data's offset: not needed
                tensors.append([name, dims, ggml_type])
    except (OSError, ValueError, struct.error) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"version": version, "metadata": kv, "tensors": tensors}


def model_headers(served_files: str) -> str:
    """JSON: {"configs": {path: text}, "gguf": {path: header}} for the config.json and .gguf files of the listing."""
    configs: dict[str, str] = {}
    ggufs: dict[str, Any] = {}
    for line in served_files.splitlines():
        size, _, path = line.partition("\t")
        if path.endswith("/config.json") and size.isdigit() and int(size) <= CONFIG_MAX_BYTES:
            configs[path] = _read(path) or ""
        elif path.endswith(".gguf"):
            ggufs[path] = gguf_header(path)
    return json.dumps({"configs": configs, "gguf": ggufs}, sort_keys=True)


# What an API key may hold (serving/plan/frontdoor.py KEY_CHARSET): the host judges it, the controller never sees it.
KEY_CHARS = re.compile(rb"[A-Za-z0-9._~+/=-]*")


def key_shape(path: str) -> str:
    """ "<length> <ok|other>": the API key's length and whether it keeps to KEY_CHARS, as the serve role reads it
    (trailing newlines dropped, as the shell's $(cat) does); "unreadable" where it cannot be read. Never the key."""
    try:
        with Path(path).open("rb") as f:
            key = f.read(4096).rstrip(b"\n")
    except OSError:
        return "unreadable\n"
    return f"{len(key)} {'ok' if KEY_CHARS.fullmatch(key) else 'other'}\n"


def host_addresses(proc_net: str = "/proc/net") -> str:
    """The host's own addresses, one a line: IPv4 from the kernel's local routes (/proc/net/fib_trie, "/32 host
    LOCAL"), IPv6 from /proc/net/if_inet6 but link-local ones. The front door lets them read /health and /metrics."""
    proc = Path(proc_net)
    found: list[str] = []
    last = ""
    text = _read(str(proc / "fib_trie")) or ""
    for line in text.splitlines():
        if "|-- " in line:
            last = line.split("|-- ", 1)[1].strip()
        elif line.strip() == "/32 host LOCAL" and last not in found:
            found.append(last)
    for line in (_read(str(proc / "if_inet6")) or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and len(fields[0]) == 32 and fields[3] != "20":  # 20: link scope
            six = ":".join(fields[0][i : i + 4] for i in range(0, 32, 4))
            found.append(str(ipaddress.ip_address(six)))
    return "".join(f"{a}\n" for a in found)


def readings(
    mode: str,
    host: str,
    dirs: list[str],
    key_file: str,
    fields: list[str],
    r: Reader,
    cache_dir: str = "",
    hf_token_file: str = "",
    tls_key_file: str = "",
) -> dict[str, str]:
    out: dict[str, str] = {"hostname": host + "\n"}
    out["served_files"] = r.run(["find", *dirs, "-type", "f", "-printf", "%s\\t%p\\n"]) if dirs else ""
    out["model_headers"] = model_headers(out["served_files"])
    # Free space where the model, Docker's images and the compile caches live (serving/plan/capacity.py), each
    # path given as "<role>\t<path>" before df's own table.
    places = {"docker_root": docker_root(), "cache_dir": cache_dir} if cache_dir else {"docker_root": docker_root()}
    places.update({f"served:{d}": d for d in dirs})
    found = dict(zip(places, _existing(list(places.values())), strict=True))
    table = r.run(["df", "-B1", "--output=target,avail,size", *found.values()])
    out["df"] = "".join(f"{role}\t{path}\n" for role, path in found.items()) + "\n" + table
    if key_file:
        out["api_key_file"] = r.run(["stat", "-c", "%u %a %s %F", "--", key_file]) or "missing\n"
        out["api_key_shape"] = key_shape(key_file)
    out["host_addresses"] = host_addresses()
    if tls_key_file:
        out["tls_key_file"] = r.run(["stat", "-c", "%u %a %s %F", "--", tls_key_file]) or "missing\n"
    if hf_token_file:
        out["hf_token_file"] = r.run(["stat", "-c", "%u %a %s %F", "--", hf_token_file]) or "missing\n"
    if mode != "gpu":
        return out
    if r.which("nvidia-smi"):
        out["nvidia_smi_L"] = r.run(["nvidia-smi", "-L"])
        out["query_gpu"] = r.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        out["topo"] = r.run(["nvidia-smi", "topo", "-m"])
        # Whether the GPUs can reach each other: P2P, the ACS of their bridges, their IOMMU groups.
        out.update(peer_readings(bus_ids_of(out["query_gpu"], fields), r.run, r.sys_root))
        if not r.which("lspci"):
            r.missing.append("lspci")
    else:
        r.missing.append("nvidia-smi")
    # The NVIDIA container toolkit's runtime, which daemon.json's nvidia runtime names: Docker lists a runtime
    # whose binary is gone, and a container that asks for the GPUs then fails at its start.
    if not r.which("nvidia-container-runtime"):
        r.missing.append("nvidia-container-runtime")
    sysfs = []
    for pattern in SYSFS:
        for f in sorted(str(x) for x in Path(r.sys_root).glob(pattern)):
            value = _read(f)
            if value is not None:
                sysfs.append(f"/sys{f[len(r.sys_root.rstrip('/')) :]}\t{value.rstrip(chr(10))}")
    out["sysfs"] = "\n".join(sysfs)
    out["meminfo"] = r.replayed("meminfo.txt") or _read("/proc/meminfo") or ""
    # The loaded NVIDIA kernel module's flavour (open or proprietary) and version: serving/host/nvidia_module.py.
    out["nvidia_version"] = r.replayed("proc-driver-nvidia-version.txt") or _read("/proc/driver/nvidia/version") or ""
    out["cgroup_fs"] = r.replayed("cgroup-fs.txt") or r.run(["stat", "-fc", "%T", "/sys/fs/cgroup"])
    runtimes = r.replayed("docker-runtimes.json")
    out["docker_runtimes"] = (
        runtimes if runtimes is not None else r.run(["docker", "info", "--format", "{{json .Runtimes}}"], stderr=True)
    )
    limits = r.replayed("dockerd-limits.txt")
    if limits is None:
        pids = r.run(["pidof", "dockerd"]).split()
        limits = (_read(f"/proc/{pids[0]}/limits") or "") if pids else ""
    out["dockerd_limits"] = limits
    out["data_paths"] = "".join(f"{d}\n" for d in dirs)
    blocks = r.run(["lsblk", "-J", "-o", "NAME,PKNAME,TYPE,TRAN,MODEL"])
    out["lsblk"] = blocks
    for d in dirs:
        out[f"findmnt:{d}"] = r.run(["findmnt", "-J", "-o", "SOURCE,TARGET", "--target", d])
    if r.which("nvme"):
        for disk in sorted(set(NVME_DISK.findall(blocks))):
            out[f"smart:{disk}"] = r.run(["nvme", "smart-log", "-o", "json", f"/dev/{disk}"])
    else:
        r.missing.append("nvme")
    return out


def tuning(mode: str, settings_fields: list[str], r: Reader) -> dict[str, str | None]:
    """The host's tuning, for the manifest (serving/host/host_tuning.py): each file's text, None where it is absent."""
    sys_root = Path(r.sys_root)
    governors = []
    for f in sorted(sys_root.glob("devices/system/cpu/cpu*/cpufreq/scaling_governor"), key=lambda p: p.parts[-3]):
        value = _read(str(f))
        cpu = f.parts[-3]
        if value is not None and cpu[3:].isdigit():
            governors.append((int(cpu[3:]), value.strip()))
    out: dict[str, str | None] = {
        "cmdline": _read("/proc/cmdline"),
        "cpu_governors": "".join(f"cpu{n}\t{g}\n" for n, g in sorted(governors)) or None,
        "thp_enabled": _read(str(sys_root / "kernel/mm/transparent_hugepage/enabled")),
        "thp_defrag": _read(str(sys_root / "kernel/mm/transparent_hugepage/defrag")),
        "swappiness": _read("/proc/sys/vm/swappiness"),
        "numa_balancing": _read("/proc/sys/kernel/numa_balancing"),
    }
    if mode == "gpu":
        # nvidia-smi's absence is already in `missing` (the plan's readings name it): None here.
        fields = ",".join(settings_fields)
        has_smi = r.which("nvidia-smi") is not None
        query = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
        out["gpu_settings"] = r.run(query) if has_smi and settings_fields else None
    replay = os.environ.get("REFDEPLOY_REPLAY_DIR") or ""
    if replay:
        out["replayed"] = replay
    return out


def _children(parents: list[str]) -> list[str]:
    """The directories directly in each of `parents` (none where a parent does not exist)."""
    return sorted(str(c) for p in parents if Path(p).is_dir() for c in Path(p).iterdir() if c.is_dir())


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_files(wheelhouse_dir: str, extra_ca_file: str, cache: str, write_cache: bool) -> dict[str, object]:
    """What the images role would copy into a build, as content hashes (serving/plan/images.py BuildFiles): each
    file under wheelhouse_dir by its path there, and extra_ca_file. A wheel is hashed again only when its size or
    mtime changed since the cache (a JSON file of path -> [size, mtime_ns, sha256]) recorded it: hashing the
    183 MB torch wheel took 0.5 s here, a full mirror would take minutes on every playbook."""
    wheelhouse: dict[str, str] = {}
    root = Path(wheelhouse_dir) if wheelhouse_dir else None
    if root is not None and root.is_dir():
        try:
            known = json.loads(Path(cache).read_text()) if cache else {}
        except (OSError, ValueError):
            known = {}
        seen: dict[str, list[object]] = {}
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            st = path.stat()
            hit = known.get(str(path)) if isinstance(known, dict) else None
            if isinstance(hit, list) and hit[:2] == [st.st_size, st.st_mtime_ns]:
                sha = str(hit[2])
            else:
                sha = _sha256_file(path)
            seen[str(path)] = [st.st_size, st.st_mtime_ns, sha]
            wheelhouse[path.relative_to(root).as_posix()] = sha
        if write_cache and cache and seen != known:
            try:
                Path(cache).parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(cache + ".tmp")
                tmp.write_text(json.dumps(seen, sort_keys=True))
                tmp.replace(cache)
            except OSError:
                pass  # a cache: the next read hashes again
    result: dict[str, object] = {"wheelhouse": wheelhouse, "extra_ca_sha256": None, "extra_ca_missing": False}
    if extra_ca_file:
        ca = Path(extra_ca_file)
        if ca.is_file():
            result["extra_ca_sha256"] = _sha256_file(ca)
        else:
            result["extra_ca_missing"] = True
    return result


def _engine(asked: dict[str, Any], timeout_s: int) -> dict[str, Any]:
    """The serving container's readings now (module_utils/refdeploy_engine_read.py), with no wait: healthy false
    where it does not answer /health at once, or `error` where a reading failed. The deploy uses them only for a
    container it keeps unchanged, and runs refdeploy_engine_readings itself otherwise."""
    try:
        # One poll (health_timeout_s 0), whatever its restart count (the deploy compares the container's ID and
        # count with the ones it keeps).
        return engine_readings(
            str(asked["container"]), str(asked["socket"]), str(asked["kept_dir"]), timeout_s, 0, 0.0, sys.maxsize,
            True, asked.get("inside_script"), [str(a) for a in asked.get("inside_args") or []],
        )  # fmt: skip
    except (ReadError, subprocess.TimeoutExpired, KeyError, OSError) as e:
        return {"healthy": False, "error": str(e)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["cpu", "gpu"], "required": True},
            "host": {"type": "str", "required": True},
            "served_dirs": {"type": "list", "elements": "str", "default": []},
            "api_key_file": {"type": "str", "default": ""},
            "hf_token_file": {"type": "str", "default": ""},
            "tls_key_file": {"type": "str", "default": ""},
            "query_gpu_fields": {"type": "list", "elements": "str", "default": []},
            "settings_fields": {"type": "list", "elements": "str", "default": []},
            "timeout_s": {"type": "int", "default": 30},
            "read_docker": {"type": "bool", "default": False},
            "docker_port": {"type": "int", "default": 0},
            "images": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "str", "default": []},
            "containers": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "str", "default": []},
            "wheelhouse_dir": {"type": "str", "default": ""},
            "extra_ca_file": {"type": "str", "default": ""},
            "build_files_cache": {"type": "str", "default": ""},
            "cache_dir": {"type": "str", "default": ""},
            "kept_dir": {"type": "str", "default": ""},
            "dirs": {"type": "list", "elements": "str", "default": []},
            "dir_children": {"type": "list", "elements": "str", "default": []},
            "groups": {"type": "list", "elements": "str", "default": []},
            "trees": {"type": "list", "elements": "str", "default": []},
            "health_socket": {"type": "str", "default": ""},
            # A deploy's read: the serving container's readings as refdeploy_engine_readings gives them once it
            # answers, read now with no wait (container, socket, kept_dir, inside_script, inside_args).
            "engine": {"type": "dict"},
            # The host's facts as refdeploy_host_facts kept them (module_utils/refdeploy_facts_cache.py).
            "facts_cache": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    r = Reader(p["timeout_s"])
    # What is on the host now (module_utils/refdeploy_host_state.py) is read beside the plan's readings: mostly
    # Docker Engine's answers, which wait on the engine, not on this process.
    with ThreadPoolExecutor(max_workers=2) as pool:
        engine = pool.submit(_engine, p["engine"], p["timeout_s"]) if p["engine"] else None
        on_host = pool.submit(
            host_state, p["read_docker"], p["docker_port"], p["images"], p["containers"], p["paths"], p["files"],
            p["timeout_s"], p["kept_dir"], p["dirs"] + _children(p["dir_children"]), p["groups"], p["trees"],
            p["health_socket"],
        )  # fmt: skip
        got = readings(p["mode"], p["host"], p["served_dirs"], p["api_key_file"], p["query_gpu_fields"], r,
                       p["cache_dir"], p["hf_token_file"], p["tls_key_file"])  # fmt: skip
        state = on_host.result()
        engine_read = engine.result() if engine is not None else None
    result = {k: _text(v) for k, v in got.items()}
    if r.missing:
        result["missing"] = _text("\n".join(r.missing))
    if r.timeout:
        result["timeout"] = _text("\n".join(r.timeout))
    tuned = tuning(p["mode"], p["settings_fields"], r)
    files = build_files(p["wheelhouse_dir"], p["extra_ca_file"], p["build_files_cache"], not module.check_mode)
    facts = cached(p["facts_cache"]) if p["facts_cache"] else None
    module.exit_json(changed=False, readings=result, host_facts=facts or {}, host_state=state, tuning=tuned,
                     build_files=files, engine=engine_read,
                     host_facts_cached=facts is not None)  # fmt: skip


if __name__ == "__main__":
    main()
