"""What only the serving container can see, read inside it and printed as one JSON object.

Run by the manifest and placement roles as `docker exec NAME python3 -c "<this file>" MODEL_DIR` (the runtime
image's own Python; standard library only, so it runs in any image). Every value is the kernel's or the
image's own text, unparsed: serving/record/manifest.py and serving/plan/plan.py interpret them. Read-only.

  {"proc_limits": <the engine's /proc/1/limits>, "patches": <the image's patch record>, "removed": ...,
   "model_sums": <MODEL_DIR/SHA256SUMS or null>, "cgroup": {<file>: <text>},
   "workers": [{"pid", "title", "cpus_allowed", "mems_allowed", "node_bytes"}]}
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CGROUP_FILES = (
    "cpuset.cpus.effective",
    "cpuset.mems.effective",
    "memory.max",
    "cpuset/cpuset.effective_cpus",
    "cpuset/cpuset.effective_mems",
    "cpuset/cpuset.cpus",
    "cpuset/cpuset.mems",
    "memory/memory.limit_in_bytes",
)
PATCH_RECORD = "/opt/vllm/refdeploy-patches.sha256"
REMOVED_RECORD = "/opt/vllm/refdeploy-removed.txt"


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


# Where a process's own shared memory lives (numa_maps names a shared mapping by its file): the NVIDIA device files,
# through which cudaHostAlloc maps its pinned pages (an engine's maps show them as `rw-s ... /dev/nvidiactl`, and the
# pages count as Shmem: tests/fixtures/recorded-h200/README.md, +8.000 GiB for an 8 GiB pinned buffer), /dev/shm's
# POSIX segments, /dev/zero's shared anonymous mappings, memfd and System V segments.
SHARED_MEMORY_FILES = ("/dev/", "/memfd:", "/SYSV")


def _node_pages(kv: dict[str, str]) -> dict[str, int]:
    page = int(kv.get("kernelpagesize_kB", "4")) * 1024
    return {k: int(v) * page for k, v in kv.items() if k[:1] == "N" and k[1:].isdigit() and v.isdigit()}


def node_bytes(numa_maps: str | None) -> dict[str, dict[str, int]] | None:
    """Bytes per NUMA node ({"N0": ...}) of a process's own memory from /proc/<pid>/numa_maps (a line is `ADDRESS
    POLICY [file=PATH|heap|stack] key=value ...`, N<node>=pages in the mapping's kernelpagesize_kB: the kernel's
    Documentation/admin-guide/mm/numa_memory_policy.rst and proc(5)), in two parts:

    - "anon": the anonymous mappings (anon=, no file=: heap, stacks, the allocators' arenas, the weights);
    - "shared": its shared-memory mappings (file= under SHARED_MEMORY_FILES) that no other process maps (no mapmax
      above 1): where pinned host memory is (cudaHostAlloc's, so the KV offload and torch's pinned buffers).
      A segment another process maps too (vLLM's shm broadcast queues, NCCL's) sits where its first user put it.

    Other file-backed mappings are left out, their copied-on-write pages too (numa_maps gives a mapping's nodes for
    all its pages, not for its anonymous ones): a shared library's or a model file's pages sit where the page cache
    first put them, whatever the binding. The general parser is probes/readers/procfs.py parse_numa_maps; this file
    runs alone inside the container, so it carries its own few lines (tests/unit/host/test_numa.py holds the two to
    the same sums)."""
    if numa_maps is None:
        return None
    out: dict[str, dict[str, int]] = {"anon": {}, "shared": {}}
    for line in numa_maps.splitlines():
        kv = dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)
        path = kv.get("file")
        if path is None and "anon" in kv:
            part = out["anon"]
        elif path is not None and path.startswith(SHARED_MEMORY_FILES) and int(kv.get("mapmax", "1") or 1) <= 1:
            part = out["shared"]
        else:
            continue
        for node, b in _node_pages(kv).items():
            part[node] = part.get(node, 0) + b
    return out


def workers(proc: Path = Path("/proc")) -> list[dict[str, object]]:
    """Every VLLM::Worker process with the CPUs and memory nodes it may run on (its main thread's status)."""
    out: list[dict[str, object]] = []
    for entry in sorted(proc.iterdir(), key=lambda p: (len(p.name), p.name)):
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if not title.startswith("VLLM::Worker"):
                continue
            status = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
        except OSError:  # gone, or not ours to read
            continue
        out.append(
            {
                "pid": int(entry.name),
                "title": title[:200],
                "cpus_allowed": status.get("Cpus_allowed_list", "").strip() or None,
                "mems_allowed": status.get("Mems_allowed_list", "").strip() or None,
                # Where its memory is (after the weights load: the engine answered before this read).
                "node_bytes": node_bytes(_text(entry / "numa_maps")),
            }
        )
    return out


def read(model_dir: str, root: Path = Path("/")) -> dict[str, object]:
    cgroup = root / "sys" / "fs" / "cgroup"
    return {
        "proc_limits": _text(root / "proc" / "1" / "limits"),
        "patches": _text(root / PATCH_RECORD.lstrip("/")),
        "removed": _text(root / REMOVED_RECORD.lstrip("/")),
        "model_sums": _text(root / model_dir.lstrip("/") / "SHA256SUMS") if model_dir else None,
        "cgroup": {f: t for f in CGROUP_FILES if (t := _text(cgroup / f)) is not None},
        "workers": workers(root / "proc"),
    }


if __name__ == "__main__":
    json.dump(read(sys.argv[1] if len(sys.argv) > 1 else "", Path(os.environ.get("INSIDE_ROOT", "/"))), sys.stdout)
    sys.stdout.write("\n")
