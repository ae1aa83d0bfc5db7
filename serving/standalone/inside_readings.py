"""What only the serving container can see, read inside it and printed as one JSON object.

Run by the manifest and placement roles as `docker exec NAME python3 -c "<this file>" MODEL_DIR` (the runtime
image's own Python; standard library only, so it runs in any image). Every value is the kernel's or the
image's own text, unparsed: serving/record/manifest.py and serving/plan/plan.py interpret them. Read-only.

  {"proc_limits": <the engine's /proc/1/limits>, "patches": <the image's patch record>, "removed": ...,
   "model_sums": <MODEL_DIR/SHA256SUMS or null>, "cgroup": {<file>: <text>},
   "workers": [{"pid", "title", "cpus_allowed", "mems_allowed", "anon_node_bytes"}]}
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


def anon_node_bytes(numa_maps: str | None) -> dict[str, int] | None:
    """Bytes of anonymous memory per NUMA node ({"N0": ...}) from /proc/<pid>/numa_maps: the N<node>=pages
    counts of the anonymous mappings (anon=, no file=: heap, stacks, the allocators' arenas, the weights), in
    each mapping's page size. File-backed mappings are left out, their copied-on-write pages too (numa_maps
    gives a mapping's nodes for all its pages, not for its anonymous ones): a shared library's pages sit where
    the page cache first put them, whatever the binding. The general parser is probes/readers/procfs.py parse_numa_maps;
    this file runs alone inside the container, so it carries its own few lines (tests/unit/host/test_numa.py holds the
    two to the same sums)."""
    if numa_maps is None:
        return None
    out: dict[str, int] = {}
    for line in numa_maps.splitlines():
        kv = dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)
        if "anon" not in kv or "file" in kv:
            continue
        page = int(kv.get("kernelpagesize_kB", "4")) * 1024
        for key, value in kv.items():
            if key[:1] == "N" and key[1:].isdigit() and value.isdigit():
                out[key] = out.get(key, 0) + int(value) * page
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
                "anon_node_bytes": anon_node_bytes(_text(entry / "numa_maps")),
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
