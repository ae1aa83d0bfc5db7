"""What nvidia-smi says about a GPU host, and whether the host matches its hardware class.

The host runs three read-only commands and hands back their output verbatim:
`nvidia-smi -L`, `nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits` and
`nvidia-smi topo -m` (REFERENCE §7). This module parses them and checks them against a class spec,
with one line per violation that tells the operator what to look at.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from serving.errors import InputError
from serving.host import cuda_driver
from serving.host.numa import NumaError, parse_cpulist

# The --query-gpu fields, in the order parse_query_gpu reads them. pcie.link.gen.gpucurrent replaces
# the deprecated gen.current; PCIe links drop at idle, so read them under load (REFERENCE §7).
QUERY_GPU_FIELDS = (
    "index",
    "name",
    "driver_version",
    "memory.total",
    "persistence_mode",
    "pci.bus_id",
    "pcie.link.gen.gpucurrent",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    # MIG mode now and after the GPU's next reset: "Enabled", "Disabled", or "[N/A]" on a GPU without MIG (GeForce).
    "mig.mode.current",
    "mig.mode.pending",
)
# The fields a recording must hold at least; the MIG modes were added after tests/fixtures/recorded-h200 was made.
REQUIRED_QUERY_GPU_FIELDS = QUERY_GPU_FIELDS[:10]
QUERY_GPU_ARGV = (
    "nvidia-smi",
    "--query-gpu=" + ",".join(QUERY_GPU_FIELDS),
    "--format=csv,noheader,nounits",
)
# What nvidia-smi prints where a field has no value on this GPU or driver.
NOT_AVAILABLE = frozenset({"[N/A]", "[Not Supported]"})

_LISTING_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[0-9A-Fa-f-]+)\)$")
_BUS_ID_RE = re.compile(
    r"^(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})\.(?P<fn>[0-7])$"
)
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DEVICE_COLUMN_RE = re.compile(r"^(GPU|NIC)(\d+)$")
_TOPO_NAMED_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


class GpuFactsError(InputError):
    """nvidia-smi output that cannot be read; the message names the line."""


@dataclass(frozen=True)
class GpuListing:
    index: int
    name: str
    uuid: str


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    driver_version: str
    memory_total_mib: int | None
    persistence_mode: bool | None
    pci_bus_id: str  # sysfs form: 0000:01:00.0
    pcie_link_gen_current: int | None
    pcie_link_gen_max: int | None
    pcie_link_width_current: int | None
    pcie_link_width_max: int | None
    # MIG mode (mig.mode.current, mig.mode.pending): None where nvidia-smi prints [N/A] (a GPU without MIG) or a
    # recording did not ask.
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None


@dataclass(frozen=True)
class TopoGpu:
    index: int
    links: Mapping[int, str]  # other GPU index -> link type (SYS, NODE, PHB, PXB, PIX, NV#)
    nic_links: Mapping[str, str]  # NIC column name -> link type
    cpu_affinity: frozenset[int] | None  # None where nvidia-smi prints N/A
    numa_affinity: int | None
    gpu_numa_id: int | None


@dataclass(frozen=True)
class TopoMatrix:
    columns: tuple[str, ...]  # the device columns, in order: GPU0 ... NIC0 ...
    gpus: Mapping[int, TopoGpu]


def parse_nvidia_smi_L(text: str) -> list[GpuListing]:
    """The GPUs `nvidia-smi -L` lists; MIG device lines (indented) are left out."""
    gpus: list[GpuListing] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line[0].isspace() or line.strip() == "No devices were found":
            continue
        m = _LISTING_RE.match(line.rstrip())
        if not m:
            raise GpuFactsError(f"nvidia-smi -L line {number}: expected 'GPU N: NAME (UUID: GPU-...)', got {line!r}")
        gpus.append(GpuListing(index=int(m.group("index")), name=m.group("name"), uuid=m.group("uuid")))
    return gpus


def normalise_bus_id(bus_id: str) -> str:
    """nvidia-smi's 00000000:4B:00.0 in the sysfs form 0000:4b:00.0."""
    m = _BUS_ID_RE.match(bus_id.strip())
    if not m:
        raise GpuFactsError(f"PCI bus id {bus_id!r}: expected DOMAIN:BUS:DEVICE.FUNCTION such as 00000000:01:00.0")
    domain = int(m.group("domain"), 16)
    return f"{domain:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn')}"


def _optional(value: str) -> str | None:
    return None if value in NOT_AVAILABLE else value


def _int(value: str, field: str, number: int) -> int | None:
    text = _optional(value)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise GpuFactsError(f"nvidia-smi --query-gpu line {number}: {field} is {value!r}, not an integer") from None


def _mode(value: str | None, field: str, number: int) -> bool | None:
    """nvidia-smi's Enabled/Disabled as True/False; None for [N/A] or a field not asked for."""
    text = None if value is None else _optional(value)
    if text not in (None, "Enabled", "Disabled"):
        raise GpuFactsError(
            f"nvidia-smi --query-gpu line {number}: {field} is {text!r}, expected Enabled, Disabled or [N/A]"
        )
    return None if text is None else text == "Enabled"


def parse_query_gpu(text: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> list[GpuInfo]:
    """Rows of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`: QUERY_GPU_FIELDS, or a recording's
    own list that holds REQUIRED_QUERY_GPU_FIELDS (what it lacks reads as None)."""
    lacking = [f for f in REQUIRED_QUERY_GPU_FIELDS if f not in fields]
    if lacking:
        raise GpuFactsError(f"nvidia-smi --query-gpu fields {','.join(fields)} lack {','.join(lacking)}")
    gpus: list[GpuInfo] = []
    for number, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), start=1):
        if not row:
            continue
        if len(row) != len(fields):
            raise GpuFactsError(
                f"nvidia-smi --query-gpu line {number}: {len(row)} fields, expected {len(fields)} "
                f"({','.join(fields)}); was it run with other fields?"
            )
        v = dict(zip(fields, (cell.strip() for cell in row), strict=True))
        index = _int(v["index"], "index", number)
        if index is None:
            raise GpuFactsError(f"nvidia-smi --query-gpu line {number}: no GPU index")
        gpus.append(
            GpuInfo(
                index=index,
                name=v["name"],
                driver_version=v["driver_version"],
                memory_total_mib=_int(v["memory.total"], "memory.total", number),
                persistence_mode=_mode(v["persistence_mode"], "persistence_mode", number),
                pci_bus_id=normalise_bus_id(v["pci.bus_id"]),
                pcie_link_gen_current=_int(v["pcie.link.gen.gpucurrent"], "pcie.link.gen.gpucurrent", number),
                pcie_link_gen_max=_int(v["pcie.link.gen.max"], "pcie.link.gen.max", number),
                pcie_link_width_current=_int(v["pcie.link.width.current"], "pcie.link.width.current", number),
                pcie_link_width_max=_int(v["pcie.link.width.max"], "pcie.link.width.max", number),
                mig_mode_current=_mode(v.get("mig.mode.current"), "mig.mode.current", number),
                mig_mode_pending=_mode(v.get("mig.mode.pending"), "mig.mode.pending", number),
            )
        )
    return gpus


def _topo_int(value: str | None, column: str, label: str) -> int | None:
    if value is None or value == "N/A":
        return None
    try:
        return int(value)
    except ValueError:
        raise GpuFactsError(f"nvidia-smi topo -m row {label}: {column} is {value!r}, not an integer or N/A") from None


def parse_topo_matrix(text: str) -> TopoMatrix:
    """The matrix of `nvidia-smi topo -m`: each GPU's links, CPU affinity and NUMA affinity.

    Cells are split on whitespace, which reads both the tool's tabs and copies that turned them into
    spaces: no link type, cpulist or node number contains a space. The legend after the first blank
    line that follows the matrix is not read.
    """
    lines = [_ANSI_RE.sub("", line).rstrip() for line in text.splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        raise GpuFactsError("nvidia-smi topo -m: no output")
    header = lines[0]
    columns = tuple(token for token in header.split() if _DEVICE_COLUMN_RE.match(token))
    if not columns or not columns[0].startswith("GPU"):
        raise GpuFactsError(f"nvidia-smi topo -m: expected a header of GPU0 GPU1 ... columns, got {header!r}")
    named = sorted((name for name in _TOPO_NAMED_COLUMNS if name in header), key=header.index)

    gpus: dict[int, TopoGpu] = {}
    for line in lines[1:]:
        if not line.strip():
            break
        cells = line.split()
        label = cells[0]
        m = _DEVICE_COLUMN_RE.match(label)
        if not m or len(cells) < 1 + len(columns):
            raise GpuFactsError(
                f"nvidia-smi topo -m: row {line!r} does not have a label and {len(columns)} link columns"
            )
        if m.group(1) == "NIC":
            continue
        index = int(m.group(2))
        links = dict(zip(columns, cells[1 : 1 + len(columns)], strict=True))
        rest = dict(zip(named, cells[1 + len(columns) :], strict=False))
        cpu_text = rest.get("CPU Affinity")
        try:
            cpu_affinity = None if cpu_text in (None, "N/A") else frozenset(parse_cpulist(cpu_text or ""))
        except NumaError as exc:
            raise GpuFactsError(f"nvidia-smi topo -m row {label}: CPU Affinity: {exc}") from None
        gpus[index] = TopoGpu(
            index=index,
            links={int(col[3:]): link for col, link in links.items() if col.startswith("GPU") and col != f"GPU{index}"},
            nic_links={col: link for col, link in links.items() if col.startswith("NIC")},
            cpu_affinity=cpu_affinity,
            numa_affinity=_topo_int(rest.get("NUMA Affinity"), "NUMA Affinity", label),
            gpu_numa_id=_topo_int(rest.get("GPU NUMA ID"), "GPU NUMA ID", label),
        )
    return TopoMatrix(columns=columns, gpus=gpus)


@dataclass(frozen=True)
class GpuClassSpec:
    """What every host of a hardware class must have."""

    name: str  # e.g. rtx3090-pp3
    gpu_count: int
    model_substring: str  # must occur in each GPU's name, e.g. "RTX 3090"
    min_driver: str  # dotted, e.g. 550.54
    min_memory_mib: int  # per GPU, as memory.total reports it
    compute_capability: str = ""  # e.g. 12.0: which kernel module flavour the GPUs need (serving/host/nvidia_module.py)


def check_class(
    spec: GpuClassSpec,
    gpus: Sequence[GpuInfo],
    host: str,
    listing: Sequence[GpuListing] | None = None,
    cuda_runtime: str | None = None,
) -> list[str]:
    """One line per way the host differs from its class; [] when it matches.

    The GPU count comes from `nvidia-smi -L` when its listing is given, else from --query-gpu. cuda_runtime: the
    runtime image's CUDA runtime ("13.0"), whose driver floor the class's min_driver can only raise
    (serving/host/cuda_driver.py).
    """
    problems: list[str] = []
    count, source = (len(listing), "nvidia-smi -L") if listing is not None else (len(gpus), "nvidia-smi --query-gpu")
    if count != spec.gpu_count:
        problems.append(
            f"expected {spec.gpu_count} GPUs of model {spec.model_substring} on {host}, found {count} ({source}): "
            "check the inventory or the host"
        )
    for gpu in gpus:
        if spec.model_substring not in gpu.name:
            problems.append(f"GPU {gpu.index} is {gpu.name}, expected {spec.model_substring}")
        if gpu.memory_total_mib is None:
            problems.append(f"GPU {gpu.index} on {host} reports no memory.total: check the driver (nvidia-smi -q)")
        elif gpu.memory_total_mib < spec.min_memory_mib:
            problems.append(
                f"GPU {gpu.index} on {host} has {gpu.memory_total_mib} MiB, "
                f"less than the class minimum {spec.min_memory_mib} MiB"
            )
    floor = cuda_driver.driver_floor(cuda_runtime, spec.min_driver)
    for driver in sorted({gpu.driver_version for gpu in gpus}):
        try:
            refusal = floor.refusal(driver, host)
        except cuda_driver.CudaDriverError as exc:
            problems.append(f"driver on {host}: {exc}")
            continue
        if refusal is not None:
            problems.append(refusal)
    return problems


# NVIDIA's persistence daemon keeps the driver's state loaded while no client holds a GPU ("NVIDIA encourages
# customers to shift to this daemon approach", https://docs.nvidia.com/deploy/driver-persistence/persistence-daemon.html).
PERSISTENCE_DOC = "https://docs.nvidia.com/deploy/driver-persistence/"


def check_modes(gpus: Sequence[GpuInfo], devices: Sequence[int], host: str) -> tuple[list[str], list[str]]:
    """The planned GPUs' MIG and persistence modes: (failure lines, notes).

    MIG enabled on a planned GPU is a failure: the GPU then offers CUDA only its MIG instances, separate devices that
    the profile's whole-GPU indices do not name and that vLLM cannot join into one tensor- or pipeline-parallel
    engine. MIG pending Enabled (after the next reset) and persistence mode off are notes: the deploy works now.
    """
    failures: list[str] = []
    notes: list[str] = []
    for gpu in (g for g in gpus if g.index in devices):
        i = gpu.index
        if gpu.mig_mode_current:
            reset = (
                f"MIG is already Disabled pending: reset the GPU (`nvidia-smi -i {i} -r`, nothing running on it)"
                if gpu.mig_mode_pending is False
                else f"turn it off with `nvidia-smi -i {i} -mig 0`, then reset the GPU (`nvidia-smi -i {i} -r`, "
                "nothing running on it) or reboot"
            )
            failures.append(
                f"GPU {i} on {host} has MIG mode Enabled (nvidia-smi mig.mode.current): CUDA sees only its MIG "
                f"instances, which the profile's whole GPUs do not name and vLLM cannot span with tensor or pipeline "
                f"parallelism; {reset}"
            )
        elif gpu.mig_mode_pending:
            notes.append(
                f"GPU {i} on {host} turns MIG mode on at its next reset (mig.mode.pending Enabled), and this plan "
                f"would then fail: `nvidia-smi -i {i} -mig 0` keeps it off"
            )
        if gpu.persistence_mode is False:
            notes.append(
                f"GPU {i} on {host} has persistence mode off: the driver unloads its state whenever no client holds "
                f"the GPU, and every start and nvidia-smi reading pays for loading it again; NVIDIA recommends its "
                f"persistence daemon ({PERSISTENCE_DOC}): `systemctl enable --now nvidia-persistenced`"
            )
    return failures, notes
