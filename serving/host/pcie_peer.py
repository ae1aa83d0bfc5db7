"""Whether the planned GPUs can talk to each other: peer-to-peer access, PCIe ACS and the IOMMU, as the host
reported them (ansible/module_utils/refdeploy_pcie_peer.py), and what that means for the plan.

A TP or PP engine whose GPUs cannot talk hangs at its first collective. Three things on the host decide how the
GPUs' traffic goes:

- `nvidia-smi topo -p2p r`: whether the driver lets each GPU pair read the other's memory over PCIe. Where it
  does not (GeForce boards on NVIDIA's driver: 8x RTX 3090 "CANNOT Access Peer", NVIDIA/nccl#1127; 2x RTX 5090
  GNS, noonghunna/club-3090#1229; 8x RTX 4090 CNS, tinygrad/open-gpu-kernel-modules#23), NCCL moves the data
  through host memory instead (its SHM transport): slower, not a hang. The smoke test's collectives run either way.
- PCIe Access Control Services on the bridges above each GPU (`lspci -vvv`'s ACSCtl): P2P Request Redirect and
  Completion Redirect send peer traffic up to the root complex. NCCL's troubleshooting guide ("PCI Access Control
  Services (ACS)") names this as a cause of GPU Direct failing, performing poorly or hanging even where
  `topo -p2p` reads OK, and says to disable ACS (`setpci -s <bdf> ECAP_ACS+0x6.w=0000`, until the next boot; or
  in the BIOS, by turning off IO virtualization / VT-d).
- The IOMMU (/sys/kernel/iommu_groups): none means it is off; each group's `type` (sysfs ABI, Linux 5.11+) says
  how it translates the devices' DMA: DMA or DMA-FQ (translated), identity (passed through, iommu=pt).

`peer_section` turns the four readings into the manifest's peer section and its lines: a P2P that is not OK between
GPUs that talk is a note (a performance fact), ACS redirect on their path while their P2P reads OK is a warning
naming the bridges and the fix. Neither refuses the deploy: the smoke test's collectives, run on the GPUs before
the old engine is touched, decide that (serving/plan/gpu_smoke.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.errors import InputError

SCHEMA_VERSION = 1
# `nvidia-smi topo -p2p`'s legend, as the tool prints it under the matrix (noonghunna/club-3090#1229).
LEGEND = {
    "X": "Self",
    "OK": "Status Ok",
    "CNS": "Chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "Topology not supported",
    "NS": "Not supported",
    "DR": "Disabled by regkey",
    "U": "Unknown",
}
# The ACS control bits lspci prints (ACSCap: and ACSCtl:, in this order), and the two that redirect peer traffic
# to the root complex (Linux's pci_p2pdma checks the same pair, PCI_ACS_RR | PCI_ACS_CR).
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
REDIRECT_BITS = ("ReqRedir", "CmpltRedir")
NCCL_ACS_GUIDE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"

_GPU = re.compile(r"^GPU(\d+)$")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ACS_LINE = re.compile(r"^\s+(ACSCap|ACSCtl):\s*(.*)$")
_BIT = re.compile(r"^([A-Za-z]+)([+-])$")


class PeerReadingError(InputError):
    """A peer reading that cannot be read; the message names the reading and the line."""


def parse_p2p(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -p2p <r|w|n|a|p>`'s matrix: {(row GPU, column GPU): code}, the self cells left out.

    The tool writes a header of GPU names and rows that start with a space, tab-separated with a trailing tab;
    cells are split on whitespace, which also reads copies that turned the tabs into spaces. The legend after the
    first blank line is not read: the codes are LEGEND's."""
    lines = [line for line in text.splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        raise PeerReadingError("nvidia-smi topo -p2p r: no output")
    columns = [int(m.group(1)) for tok in lines[0].split() if (m := _GPU.match(tok))]
    if not columns or len(columns) != len(lines[0].split()):
        raise PeerReadingError(f"nvidia-smi topo -p2p r: expected a header of GPU0 GPU1 ..., got {lines[0]!r}")
    matrix: dict[tuple[int, int], str] = {}
    for line in lines[1:]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        cells = line.split()
        m = _GPU.match(cells[0])
        if not m or len(cells) != 1 + len(columns):
            raise PeerReadingError(
                f"nvidia-smi topo -p2p r: row {line.strip()!r} does not have a GPU label and {len(columns)} cells"
            )
        row = int(m.group(1))
        for col, code in zip(columns, cells[1:], strict=True):
            if code not in LEGEND:
                raise PeerReadingError(
                    f"nvidia-smi topo -p2p r: row GPU{row}, column GPU{col} reads {code!r}, not a code of the "
                    f"tool's legend ({' '.join(LEGEND)}): a newer driver? record its output and extend LEGEND"
                )
            if row != col:
                matrix[(row, col)] = code
    return matrix


def parse_paths(text: str) -> dict[str, list[str]]:
    """Lines of "<bdf>\\t<sysfs path>" -> {GPU bdf: the bridges above it, root port first}."""
    paths: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        bdf, _, path = line.partition("\t")
        parts = [p for p in path.strip().split("/") if _BDF.match(p)]
        if not _BDF.match(bdf) or not parts or parts[-1] != bdf:
            raise PeerReadingError(f"pci_paths line {number}: expected '<bdf>\\t/sys/devices/.../<bdf>', got {line!r}")
        paths[bdf] = parts[:-1]
    return paths


def _bits(text: str) -> dict[str, bool]:
    bits = {}
    for token in text.split():
        m = _BIT.match(token)
        if m and m.group(1) in ACS_BITS:
            bits[m.group(1)] = m.group(2) == "+"
    return bits


@dataclass(frozen=True)
class Bridge:
    bdf: str
    name: str  # lspci's description of the device, after its address
    acs_cap: dict[str, bool] | None  # None: no ACS capability printed (none, or lspci could not read it)
    acs_ctl: dict[str, bool] | None

    @property
    def redirects(self) -> list[str]:
        return [b for b in REDIRECT_BITS if (self.acs_ctl or {}).get(b)]


def parse_acs(text: str) -> dict[str, Bridge]:
    """`lspci -D -vvv -s <bdf>` blocks -> each bridge's ACS capability and control bits. A block starts with a line
    at column 0 ("0000:00:01.1 PCI bridge: ..."); every other line of it is indented. Only the ACSCap:/ACSCtl: lines
    are read (the AER lines' "ACSViol" is another thing)."""
    bridges: dict[str, Bridge] = {}
    bdf = name = ""
    cap: dict[str, bool] | None = None
    ctl: dict[str, bool] | None = None

    def close() -> None:
        if bdf:
            bridges[bdf] = Bridge(bdf=bdf, name=name, acs_cap=cap, acs_ctl=ctl)

    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if not line[0].isspace():
            close()
            head, _, name = line.partition(" ")
            if not _BDF.match(head):
                raise PeerReadingError(
                    f"lspci -D -vvv line {number}: expected a block starting with a domain:bus:device.function "
                    f"address, got {line!r}: was it run without -D?"
                )
            bdf, cap, ctl = head, None, None
            continue
        m = _ACS_LINE.match(line)
        if m and m.group(1) == "ACSCap":
            cap = _bits(m.group(2))
        elif m:
            ctl = _bits(m.group(2))
    close()
    return bridges


@dataclass(frozen=True)
class Iommu:
    groups_total: int
    gpu_groups: dict[str, dict[str, Any]]  # GPU bdf -> {"group", "type", "devices"}

    @property
    def enabled(self) -> bool:
        return self.groups_total > 0

    @property
    def mode(self) -> str:
        """off, or the GPUs' groups' types (DMA, DMA-FQ, identity, ...) as the kernel names them."""
        if not self.enabled:
            return "off"
        types = sorted({str(g["type"]) for g in self.gpu_groups.values() if g.get("type")})
        return ",".join(types) or "on"


def parse_iommu(text: str) -> Iommu:
    total = 0
    by_group: dict[str, dict[str, Any]] = {}
    gpus: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        path, _, value = line.partition("\t")
        parts = path.strip().split("/")
        try:
            if path == "/sys/kernel/iommu_groups":
                total = int(value)
            elif path.endswith("/iommu_group") and len(parts) == 7:
                gpus[parts[5]] = value.strip()
            elif path.startswith("/sys/kernel/iommu_groups/") and parts[-1] in ("type", "devices"):
                group = by_group.setdefault(parts[4], {"group": int(parts[4]), "type": "", "devices": []})
                group[parts[-1]] = value.split() if parts[-1] == "devices" else value.strip()
            else:
                raise ValueError(path)
        except (ValueError, IndexError):
            raise PeerReadingError(f"iommu line {number}: {line!r} is not a reading this parser knows") from None
    return Iommu(groups_total=total, gpu_groups={bdf: by_group.get(g, {"group": int(g)}) for bdf, g in gpus.items()})


def talking_pairs(devices: Sequence[int], tp: int, pp: int) -> list[tuple[int, int, str]]:
    """The GPU pairs whose ranks exchange data: every pair within a TP group (its all-reduces), and each rank with
    the same rank of the next stage (PP's sends): (GPU, GPU, why)."""
    groups = [list(devices[s * tp : (s + 1) * tp]) for s in range(pp)]
    pairs = [(a, b, f"TP group {s}") for s, g in enumerate(groups) for i, a in enumerate(g) for b in g[i + 1 :]]
    for s in range(pp - 1):
        pairs += [(a, b, f"PP stages {s}-{s + 1}") for a, b in zip(groups[s], groups[s + 1], strict=True)]
    return pairs


def _read_or_note(notes: list[str], parse: Any, text: str) -> Any:
    try:
        return parse(text)
    except PeerReadingError as exc:
        notes.append(f"{exc}: that part of the peer section is left empty")
        return None


def _pair_list(pairs: Sequence[tuple[int, int, str]]) -> str:
    return ", ".join(f"{a}-{b} ({why})" for a, b, why in pairs)


def peer_section(
    readings: Mapping[str, str],
    gpu_bdfs: Mapping[int, str],
    devices: Sequence[int],
    tp: int,
    pp: int,
    host: str,
) -> dict[str, Any] | None:
    """The manifest's peer section of a GPU host: what the host reported (P2P by GPU pair, ACS per bridge above the
    planned GPUs, the IOMMU and each planned GPU's group), the pairs the plan makes talk, and its lines (`warnings`,
    `notes`). gpu_bdfs: nvidia-smi index -> PCI address in sysfs form. None where the host was not asked (a host
    read from before these readings)."""
    if "p2p_read" not in readings:
        return None
    notes: list[str] = []
    warnings: list[str] = []
    missing = readings.get("missing", "").split()
    matrix = _read_or_note(notes, parse_p2p, readings["p2p_read"]) if readings["p2p_read"].strip() else None
    if matrix is None and not readings["p2p_read"].strip():
        notes.append(f"nvidia-smi topo -p2p r printed nothing on {host}: the GPUs' peer access was not read")
    paths = _read_or_note(notes, parse_paths, readings.get("pci_paths", "")) or {}
    acs = _read_or_note(notes, parse_acs, readings.get("acs", "")) or {}
    iommu = _read_or_note(notes, parse_iommu, readings.get("iommu", ""))
    index_of = {bdf: i for i, bdf in gpu_bdfs.items()}
    planned = [d for d in devices if d in gpu_bdfs]
    if planned and not any(gpu_bdfs[d] in paths for d in planned):
        notes.append(f"the planned GPUs' PCI paths were not read on {host} (/sys/bus/pci/devices): ACS not judged")
    elif "lspci" in missing:
        notes.append(f"lspci not found on {host}: the ACS of the GPUs' bridges was not read; install pciutils")

    pairs = talking_pairs(devices, tp, pp)
    code = {pair: (matrix or {}).get(pair[:2]) for pair in pairs}
    no_p2p: dict[str, list[tuple[int, int, str]]] = {}
    for pair, got in code.items():
        if got is not None and got != "OK":
            no_p2p.setdefault(got, []).append(pair)
    for got, which in sorted(no_p2p.items()):
        notes.append(
            f"no peer-to-peer access between GPUs {_pair_list(which)} on {host} (nvidia-smi topo -p2p r: {got}, "
            f"{LEGEND[got]}): NCCL moves their data through host memory, slower than P2P but no hang; the smoke "
            "test's collectives check that it works before the deploy goes on"
        )
    p2p_ok = [pair for pair, got in code.items() if got == "OK"]
    ok_gpus = sorted({g for a, b, _ in p2p_ok for g in (a, b)})
    above: dict[str, list[int]] = {}
    for gpu in sorted(set(planned)):
        for bridge in paths.get(gpu_bdfs[gpu], []):
            above.setdefault(bridge, []).append(gpu)
    redirecting = [b for b in above if b in acs and acs[b].redirects and set(above[b]) & set(ok_gpus)]
    if redirecting:
        iommu_said = f"the IOMMU {iommu.mode}" if iommu is not None else "the IOMMU not read"
        where = ", ".join(
            f"{b} ({' '.join(f'{r}+' for r in acs[b].redirects)}, above GPU {', '.join(map(str, above[b]))})"
            for b in redirecting
        )
        warnings.append(
            f"ACS redirects peer traffic to the root complex at {where} on {host}, {iommu_said}, while P2P reads OK "
            f"for {len(p2p_ok)} of the plan's {len(pairs)} GPU pairs that talk (GPUs {', '.join(map(str, ok_gpus))}): "
            f"NCCL's troubleshooting guide names this as a cause of collectives that fail, crawl or hang "
            f"({NCCL_ACS_GUIDE}, PCI Access Control Services): disable ACS on those bridges (`setpci -s <bdf> "
            "ECAP_ACS+0x6.w=0000` for each, until the next boot) or in the BIOS (IO virtualization, VT-d / AMD-Vi), "
            "or set NCCL_P2P_DISABLE=1 in the profile's env to send the traffic through host memory"
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "p2p_read": None if matrix is None else {f"{a}-{b}": c for (a, b), c in sorted(matrix.items())},
        "talking": [{"gpus": f"{a}-{b}", "why": why, "p2p_read": code[(a, b, why)]} for a, b, why in pairs],
        "paths": {str(index_of[bdf]): bridges for bdf, bridges in sorted(paths.items()) if bdf in index_of},
        "acs": {
            b: {
                "name": acs[b].name,
                "above_gpus": above.get(b, []),
                "acs_ctl": acs[b].acs_ctl,
                "redirects": acs[b].redirects,
            }
            for b in sorted(acs)
        },
        "iommu": None
        if iommu is None
        else {
            "enabled": iommu.enabled,
            "mode": iommu.mode,
            "groups_total": iommu.groups_total,
            "gpus": {str(index_of[bdf]): g for bdf, g in sorted(iommu.gpu_groups.items()) if bdf in index_of},
        },
        "warnings": warnings,
        "notes": notes,
    }
