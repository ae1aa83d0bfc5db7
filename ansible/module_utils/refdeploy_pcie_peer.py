"""Whether a GPU host's GPUs can reach each other, read raw on the host: the plan's host read uses it.

  peer_readings(bus_ids, run, sys_root) -> {
    "p2p_read":  <`nvidia-smi topo -p2p r`>: the driver's peer read capability, GPU pair by pair,
    "pci_paths": "<bdf>\\t/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0\\n" per GPU: where
                 /sys/bus/pci/devices/<bdf> leads, every bridge from the host bridge down to the GPU,
    "acs":       <`lspci -D -vvv -s <bdf>`> of each bridge on those paths, one block after another,
    "iommu":     "/sys/kernel/iommu_groups\\t<how many groups>\\n", then per GPU
                 "/sys/bus/pci/devices/<bdf>/iommu_group\\t<group>", "/sys/kernel/iommu_groups/<group>/type\\t<type>"
                 and "/sys/kernel/iommu_groups/<group>/devices\\t<bdf> <bdf> ...",
  }

Every value is the tool's or the kernel's own text (serving/host/pcie_peer.py interprets them). bus_ids are the
GPUs' PCI addresses as nvidia-smi prints them (00000000:01:00.0); `run` runs a command and gives its stdout ("" when
the tool is missing: the caller records that); sys_root is /sys, or a test host's replayed tree. lspci reads the
ACS capability from extended config space, which only root can read: the plan's read runs as root. Read-only;
standard library only (it runs on the managed host, where Ansible ships it with the module).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

_BUS_ID = re.compile(r"^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def sysfs_bdf(bus_id: str) -> str | None:
    """nvidia-smi's 00000000:4B:00.0 as sysfs names it, 0000:4b:00.0; None for anything else."""
    m = _BUS_ID.match(bus_id.strip())
    if not m:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def bus_ids_of(query_gpu: str, fields: Sequence[str]) -> list[str]:
    """The pci.bus_id column of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` (which GPUs to read
    about; the controller parses the rest)."""
    if "pci.bus_id" not in fields:
        return []
    column = list(fields).index("pci.bus_id")
    cells = [line.split(",") for line in query_gpu.splitlines() if line.strip()]
    return [row[column].strip() for row in cells if len(row) > column]


def _display(path: str, sys_root: str) -> str:
    """A resolved path under the (replayed) sysfs root, as it reads on a real host: /sys/..."""
    root = os.path.realpath(sys_root)
    return "/sys" + path[len(root) :] if path == root or path.startswith(root + "/") else path


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def peer_readings(bus_ids: Sequence[str], run: Callable[[list[str]], str], sys_root: str) -> dict[str, str]:
    out = {"p2p_read": run(["nvidia-smi", "topo", "-p2p", "r"])}
    devices = Path(sys_root) / "bus" / "pci" / "devices"
    groups_dir = Path(sys_root) / "kernel" / "iommu_groups"
    paths: list[str] = []
    bridges: list[str] = []
    iommu = [f"/sys/kernel/iommu_groups\t{len(list(groups_dir.glob('*/devices')))}"]
    for bus_id in bus_ids:
        bdf = sysfs_bdf(bus_id)
        if bdf is None or not (devices / bdf).exists():
            continue
        real = _display(os.path.realpath(devices / bdf), sys_root)
        paths.append(f"{bdf}\t{real}")
        for part in real.split("/")[:-1]:
            if _BDF.match(part) and part not in bridges:
                bridges.append(part)
        link = devices / bdf / "iommu_group"
        if link.is_symlink():
            group = link.readlink().name
            members = sorted(p.name for p in (groups_dir / group / "devices").glob("*"))
            iommu.append(f"/sys/bus/pci/devices/{bdf}/iommu_group\t{group}")
            iommu.append(f"/sys/kernel/iommu_groups/{group}/type\t{_read(groups_dir / group / 'type') or ''}")
            iommu.append(f"/sys/kernel/iommu_groups/{group}/devices\t{' '.join(members)}")
    out["pci_paths"] = "".join(f"{p}\n" for p in paths)
    out["acs"] = "".join(run(["lspci", "-D", "-vvv", "-s", b]) for b in bridges)
    out["iommu"] = "".join(f"{line}\n" for line in iommu)
    return out
