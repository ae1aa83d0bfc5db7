"""A GPU host's plan, decided before anything on it changes: does it match its class, where does each
worker run, does the pinned host RAM fit, and the exact container that would start.

The host produces raw readings with its standard tools (nvidia-smi, sysfs, /proc, docker info); this
module interprets them. `plan_gpu_host` runs the checks in the order an operator fixes them, collects
every failure as one line, and renders the container spec only for a host that passes.

  readings = {
    "hostname": "gpu3090-a",
    "nvidia_smi_L": <nvidia-smi -L>, "query_gpu": <nvidia-smi --query-gpu=QUERY_GPU_FIELDS ...>,
    "topo": <nvidia-smi topo -m>,
    optional, whether the GPUs can talk (serving.host.pcie_peer): "p2p_read" <nvidia-smi topo -p2p r>, "pci_paths",
    "acs" <lspci -D -vvv of the GPUs' bridges>, "iommu"; "missing lspci" when pciutils is absent
    "sysfs": <one "PATH<TAB>CONTENT" line per file under /sys/devices/system/node and /sys/bus/pci/devices>,
    "meminfo": <cat /proc/meminfo>,
    "cgroup_fs": <stat -fc %T /sys/fs/cgroup: cgroup2fs on v2, tmpfs on v1 and hybrid>,
    "docker_runtimes": <docker info --format '{{json .Runtimes}}'>,
    "dockerd_limits": <cat /proc/$(pidof dockerd)/limits>: what `--ulimit memlock` can reach,
    optional, "nvidia_version": <cat /proc/driver/nvidia/version>: the kernel module's flavour (open, proprietary),
    optional, the data the server reads (serving.host.nvme): "data_paths" (one path per line),
    "findmnt:<path>" per path, "lsblk", "smart:<disk>" per NVMe disk; "missing nvme" when nvme-cli is absent
  }
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from serving.config.profile import Gpu, Profile
from serving.config.schema import StrictModel
from serving.errors import InputError
from serving.host import gpu_facts, limits, numa, nvidia_module, nvme, pcie_peer, pinned_ram
from serving.host.numa import NumaPlan
from serving.plan.render import PROFILE_LABEL, SPEC_LABEL, render_container_spec, spec_digest

SCHEMA_VERSION = 1
# The systemd slice every serving container runs under (Docker's --cgroup-parent, systemd cgroup driver).
SLICE_NAME = "refdeploy.slice"
REQUIRED_READINGS = (
    "hostname",
    "nvidia_smi_L",
    "query_gpu",
    "topo",
    "sysfs",
    "meminfo",
    "cgroup_fs",
    "docker_runtimes",
    "dockerd_limits",
)


class GpuPlanError(InputError):
    pass


@dataclass(frozen=True)
class GpuHostPlan:
    host: str
    failures: list[str]
    gpus: list[dict[str, Any]]
    numa: dict[str, Any] | None
    budget: dict[str, Any] | None
    budget_table: str
    container_spec: dict[str, Any] | None
    data: list[dict[str, Any]] | None = None
    slice_unit: dict[str, Any] | None = None
    placement: NumaPlan | None = None
    # The NVIDIA container toolkit is missing and the inventory lets the deploy install it (role nvidia_toolkit).
    toolkit_install: bool = False
    # What an operator should know that does not stop the deploy (persistence mode off, MIG on after a reset).
    notes: tuple[str, ...] = ()
    # The NVIDIA kernel module the host runs (/proc/driver/nvidia/version): flavour, version, arch; None: not read.
    kernel_module: dict[str, str] | None = None
    # Whether the planned GPUs can talk: P2P, ACS, IOMMU, with its warnings and notes (serving/host/pcie_peer.py).
    peer: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.failures


def class_spec_from(data: Mapping[str, Any]) -> gpu_facts.GpuClassSpec:
    """The inventory's `gpu_class` mapping -> the spec; a missing or mistyped key is an error naming it."""
    try:
        return gpu_facts.GpuClassSpec(
            name=str(data["name"]),
            gpu_count=int(data["gpu_count"]),
            model_substring=str(data["model_substring"]),
            min_driver=str(data["min_driver"]),
            min_memory_mib=int(data["min_memory_mib"]),
            compute_capability=str(data.get("compute_capability") or ""),
        )
    except KeyError as e:
        raise GpuPlanError(f"gpu_class: required key {e.args[0]!r} is missing") from None
    except (TypeError, ValueError) as e:
        raise GpuPlanError(f"gpu_class: {e}") from None


def topology_from_listing(listing: str) -> numa.Topology:
    """sysfs files sent as "PATH<TAB>CONTENT" lines (paths under /sys) -> the topology, via a scratch tree."""
    with tempfile.TemporaryDirectory(prefix="refdeploy-sysfs-") as tmp:
        root = Path(tmp)
        for line in listing.splitlines():
            if not line.strip():
                continue
            path, _, content = line.partition("\t")
            rel = path.strip().removeprefix("/sys/")
            if not rel or rel.startswith("/") or ".." in Path(rel).parts:
                raise GpuPlanError(f"sysfs listing: {path!r} is not a path under /sys")
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content + "\n")
        return numa.read_topology(root)


def listing_from_tree(sys_root: Path) -> str:
    """The "PATH<TAB>CONTENT" listing a host sends, made from a sysfs tree (a test fixture, or /sys itself)."""
    lines = []
    patterns = ("devices/system/node/node*/cpulist", "bus/pci/devices/*/numa_node", "bus/pci/devices/*/local_cpulist")
    for pattern in patterns:
        for f in sorted(sys_root.glob(pattern)):
            lines.append(f"/sys/{f.relative_to(sys_root)}\t{f.read_text().strip()}")
    return "\n".join(lines) + "\n"


def docker_size_bytes(size: str) -> int:
    """Docker's memory notation (8g, 512m, 1024) -> bytes; bad notation names the value."""
    try:
        return limits.docker_size_bytes(size)
    except ValueError:
        raise GpuPlanError(f"container size {size!r}: expected Docker notation such as 110g") from None


def _memlock(limits_text: str) -> tuple[int | None, int | None]:
    entry = limits.parse_proc_limits(limits_text).get("Max locked memory")
    if entry is None:
        raise GpuPlanError("dockerd_limits: no 'Max locked memory' line (expected /proc/<dockerd pid>/limits)")
    soft, hard = entry
    return (None if soft == limits.UNLIMITED else soft), (None if hard == limits.UNLIMITED else hard)


def systemd_memlock(value: str) -> str:
    """pinned_ram_engine_memlock as systemd's LimitMEMLOCK takes it: `infinity` (also for unlimited and -1, which
    systemd refuses) or a size in bytes."""
    soft, _hard = _planned_memlock(value)
    return "infinity" if soft is None else str(soft)


def _planned_memlock(value: str) -> tuple[int | None, int | None]:
    if value.strip().lower() in ("infinity", "unlimited", "-1"):
        return None, None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 1:
        raise GpuPlanError(f"pinned_ram_engine_memlock {value!r}: expected infinity or a size in bytes") from None
    return n, n


def _mem_total(meminfo: str) -> int:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise GpuPlanError("meminfo: no MemTotal line (expected /proc/meminfo)")


def budget_inputs(profile: Profile, mem_total: int, memlock: tuple[int | None, int | None]) -> pinned_ram.BudgetInputs:
    hm = profile.host_memory
    if hm is None:
        raise GpuPlanError(f"profile {profile.name}: a GPU profile needs a host_memory section (the RAM budget)")
    buffers = (
        [
            pinned_ram.PinnedBuffer.from_gib(
                "host KV offload",
                hm.kv_offload_buffers,
                hm.kv_offload_gib_each,
                hm.kv_offload_path,
                hm.observed_overhead_factor,
            )
        ]
        if hm.kv_offload_buffers and hm.kv_offload_gib_each
        else []
    )
    return pinned_ram.BudgetInputs(
        pinned_buffers=buffers,
        other_pinned_bytes=pinned_ram.gib_to_bytes(hm.other_pinned_gib),
        pytorch_cuda_alloc_conf=profile.env.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        shm_bytes=docker_size_bytes(profile.container.shm_size),
        page_cache_resident_bytes=pinned_ram.gib_to_bytes(hm.page_cache_resident_gib),
        os_reserve_bytes=pinned_ram.gib_to_bytes(hm.os_reserve_gib),
        mem_total_bytes=mem_total,
        cgroup_memory_limit_bytes=docker_size_bytes(profile.container.memory) if profile.container.memory else None,
        memlock_soft_bytes=memlock[0],
        memlock_hard_bytes=memlock[1],
    )


def render_gpu_container_spec(profile: Profile, image: str, plan: numa.NumaPlan) -> dict[str, Any]:
    """The serving container on a GPU host: the CPU spec plus GPUs, NUMA placement and data mounts.

    GPUs are requested as Docker's `--gpus '"device=0,1,2"'` (device_requests in docker_container), in the
    profile's rank order; the NUMA plan gives the cpuset and vLLM's --numa-bind* flags.
    """
    assert profile.gpu is not None
    spec = render_container_spec(profile, image)
    spec.pop("labels")
    spec["command"] = [*spec["command"], *plan.vllm_args]
    spec["env"] = dict(sorted({**spec["env"], **plan.env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}.items()))
    spec["device_requests"] = [
        {"driver": "nvidia", "device_ids": [str(d) for d in profile.gpu.devices], "capabilities": [["gpu"]]}
    ]
    spec["cpuset_cpus"] = plan.cpuset_cpus
    spec["cpuset_mems"] = plan.cpuset_mems
    spec["volumes"] = [*spec["volumes"], *(f"{p}:{p}:ro" for p in profile.gpu.data_paths)]
    spec["cgroup_parent"] = SLICE_NAME
    if "--numa-bind" in plan.vllm_args:
        # vLLM binds a worker by starting it under numactl, whose --membind is set_mempolicy(2). Docker's default
        # seccomp profile allows set_mempolicy, mbind and get_mempolicy only with CAP_SYS_NICE: without it all
        # three returned EPERM in a container here (Docker 20.10.24; with --cap-add SYS_NICE, MPOL_BIND held).
        spec["capabilities"] = ["SYS_NICE"]
    spec["labels"] = {PROFILE_LABEL: profile.name, SPEC_LABEL: spec_digest(spec)}
    return spec


def serving_slice(profile: Profile, plan: numa.NumaPlan) -> dict[str, Any]:
    """The serving slice's limits and its systemd unit: the NUMA plan's CPUs and memory node(s), a CPU
    quota of those CPUs and no more, and the container's memory limit, so the slice is the ancestor whose
    limits bound everything serving runs (the container's own limits sit inside it)."""
    cpus = numa.parse_cpulist(plan.cpuset_cpus)
    memory_max = docker_size_bytes(profile.container.memory) if profile.container.memory else None
    lines = [
        "# Managed by refdeploy (ansible/roles/serving_slice): the parent cgroup of the serving containers.",
        "# Rendered by serving/plan/gpu_plan.py from the NUMA plan and the profile; edits are overwritten.",
        "[Unit]",
        f"Description=refdeploy serving slice (profile {profile.name})",
        "Before=slices.target",
        "",
        "[Slice]",
        "CPUAccounting=yes",
        "MemoryAccounting=yes",
        f"AllowedCPUs={plan.cpuset_cpus}",
        f"AllowedMemoryNodes={plan.cpuset_mems}",
        f"CPUQuota={100 * len(cpus)}%",
    ]
    if memory_max is not None:
        lines.append(f"MemoryMax={memory_max}")
    return {
        "name": SLICE_NAME,
        "allowed_cpus": plan.cpuset_cpus,
        "allowed_memory_nodes": plan.cpuset_mems,
        "cpu_quota_pct": 100 * len(cpus),
        "memory_max_bytes": memory_max,
        "unit": "\n".join(lines) + "\n",
    }


def _check_runtime(readings: Mapping[str, str], host: str, install_toolkit: bool = False) -> list[str]:
    """What the container runtime needs of the host: cgroup v2 for the serving slice, the NVIDIA container
    toolkit's runtime on the host (or the inventory's leave to install it: role nvidia_toolkit), and Docker's
    nvidia runtime (which, once the toolkit is installed, the runtime role writes into daemon.json)."""
    failures: list[str] = []
    missing_runtime = "nvidia-container-runtime" in readings.get("missing", "").split()
    if missing_runtime and not install_toolkit:
        failures.append(
            f"nvidia-container-runtime not found on {host}: the NVIDIA container toolkit is not installed; install "
            "nvidia-container-toolkit from NVIDIA's package repository, then run `nvidia-ctk runtime configure "
            "--runtime=docker`, or set preflight_install_nvidia_toolkit: true in the inventory for the deploy to"
            " install it"
        )
    if readings["cgroup_fs"].strip() != "cgroup2fs":
        failures.append(
            f"{host} runs cgroup v1 ({readings['cgroup_fs'].strip()} at /sys/fs/cgroup): the serving slice needs "
            "cgroup v2 (memory.max, cpu.max, pressure); boot with systemd.unified_cgroup_hierarchy=1"
        )
    if "nvidia" not in readings["docker_runtimes"] and not (missing_runtime and install_toolkit):
        failures.append(
            f"Docker on {host} has no nvidia runtime (docker info: {readings['docker_runtimes'].strip()[:120]}): "
            "install the NVIDIA container toolkit and run `nvidia-ctk runtime configure --runtime=docker`"
        )
    return failures


def _place_workers(
    profile: Profile, gpu: Gpu, gpus: Sequence[gpu_facts.GpuInfo], sysfs: str
) -> tuple[numa.NumaPlan | None, list[str]]:
    """The NUMA plan for the profile's GPUs, one group of TP GPUs per pipeline stage: (the plan, failure lines).

    `gpus` are the host's (nvidia-smi), all of the profile's devices among them; `sysfs` the host's listing.
    """
    bus = {g.index: g.pci_bus_id for g in gpus}
    topology = topology_from_listing(sysfs)
    pp = profile.vllm.pipeline_parallel_size or 1
    tp = profile.vllm.tensor_parallel_size or 1
    devices = gpu.devices
    if pp * tp != len(devices):
        return None, [f"profile {profile.name}: PP {pp} x TP {tp} needs {pp * tp} GPUs, devices lists {devices}"]
    groups = [devices[i * tp : (i + 1) * tp] for i in range(pp)]
    try:
        plan = numa.plan_placement(
            topology,
            [bus[i] or "" for i in sorted(bus)],
            [[sorted(bus).index(d) for d in g] for g in groups],
            gpu.reserve_client_cpus,
            gpu.reserve_probe_cpus,
        )
    except numa.NumaError as e:
        return None, [str(e)]
    return plan, []


def plan_gpu_host(
    profile: Profile,
    class_spec: gpu_facts.GpuClassSpec,
    readings: Mapping[str, str],
    image: str,
    *,
    data_disk: str | None = None,
    engine_memlock: str | None = None,
    cuda_runtime: str | None = None,
    install_toolkit: bool = False,
) -> GpuHostPlan:
    """engine_memlock: the LimitMEMLOCK the deploy will give the engine (runtime role), instead of the
    limit dockerd runs with now; "infinity" or a size in bytes. cuda_runtime: the image's CUDA runtime ("13.0"),
    which sets the host's oldest driver (serving/host/cuda_driver.py). install_toolkit: the inventory lets this run
    install the NVIDIA container toolkit where it is missing (preflight_install_nvidia_toolkit, deploys only)."""
    missing = [k for k in REQUIRED_READINGS if k not in readings]
    if missing:
        raise GpuPlanError(f"host readings lack {', '.join(missing)}")
    if profile.gpu is None:
        raise GpuPlanError(f"profile {profile.name} has no gpu section: it is not a GPU profile")
    host = readings["hostname"].strip()
    failures: list[str] = []
    missing_tools = readings.get("missing", "").split()
    if "nvidia-smi" in missing_tools:
        # Nothing GPU-shaped can be checked: say so once, and what else is wrong with the host.
        failures.append(
            f"nvidia-smi not found on {host}: this is not an NVIDIA GPU host, or its driver is not installed"
        )
        readings = {**readings, "nvidia_smi_L": "", "query_gpu": "", "topo": ""}
    if profile.gpu.hardware_class != class_spec.name:
        failures.append(
            f"profile {profile.name} is for hardware class {profile.gpu.hardware_class}, but {host} is in class "
            f"{class_spec.name}: pick the profile of the host's class (PROFILE=) or fix the inventory"
        )
    listing = gpu_facts.parse_nvidia_smi_L(readings["nvidia_smi_L"])
    gpus = gpu_facts.parse_query_gpu(readings["query_gpu"])
    failures += gpu_facts.check_class(class_spec, gpus, host, listing, cuda_runtime)
    mode_failures, notes = gpu_facts.check_modes(gpus, profile.gpu.devices, host)
    failures += mode_failures
    module: nvidia_module.KernelModule | None = None
    if "nvidia-smi" not in missing_tools:
        module, module_failures = nvidia_module.check_module(
            readings.get("nvidia_version", ""), class_spec.compute_capability, host
        )
        failures += module_failures
    failures += _check_runtime(readings, host, install_toolkit)
    toolkit_install = install_toolkit and "nvidia-container-runtime" in readings.get("missing", "").split()
    known = {g.index for g in gpus}
    absent = [d for d in profile.gpu.devices if d not in known]
    if absent and gpus:
        failures.append(f"profile {profile.name} uses GPU(s) {absent} that {host} does not have (nvidia-smi)")

    plan: numa.NumaPlan | None = None
    if not absent and gpus:
        plan, placement_failures = _place_workers(profile, profile.gpu, gpus, readings["sysfs"])
        failures += placement_failures

    memlock = _planned_memlock(engine_memlock) if engine_memlock else _memlock(readings["dockerd_limits"])
    budget = pinned_ram.compute_budget(budget_inputs(profile, _mem_total(readings["meminfo"]), memlock))
    failures += budget.failures
    _check_kv_size(profile, failures)
    data, data_failures = check_data(readings, host, data_disk)
    failures += data_failures
    spec = render_gpu_container_spec(profile, image, plan) if plan is not None and not failures else None
    peer = pcie_peer.peer_section(
        readings, {g.index: g.pci_bus_id for g in gpus}, profile.gpu.devices,
        profile.vllm.tensor_parallel_size or 1, profile.vllm.pipeline_parallel_size or 1, host,
    )  # fmt: skip
    return GpuHostPlan(
        host=host,
        failures=failures,
        gpus=[asdict(g) for g in gpus],
        numa=numa.plan_to_json(plan) if plan is not None else None,
        budget=pinned_ram.budget_to_json(budget),
        budget_table=pinned_ram.format_budget_table(budget),
        container_spec=spec,
        data=data,
        slice_unit=serving_slice(profile, plan) if plan is not None else None,
        placement=plan,
        toolkit_install=toolkit_install,
        notes=tuple(notes),
        kernel_module=asdict(module) if module is not None else None,
        peer=peer,
    )


def check_data(
    readings: Mapping[str, str], host: str, expected_disk: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Where each data path sits and how healthy that drive is: (one record per path, failure lines).

    No "lsblk" reading means the host was not asked (an older role): nothing is checked, and the
    record says so. nvme-cli missing on the host is a failure: the SMART health cannot be read.
    """
    if "lsblk" not in readings:
        return [], []
    records: list[dict[str, Any]] = []
    failures: list[str] = []
    smart_checked: set[str] = set()
    for path in [p.strip() for p in readings.get("data_paths", "").splitlines() if p.strip()]:
        try:
            dev = nvme.data_device(path, readings.get(f"findmnt:{path}", ""), readings["lsblk"])
        except nvme.NvmeError as e:
            failures.append(f"cannot tell which drive holds {path} on {host}: {e}: does the path exist?")
            continue
        record: dict[str, Any] = asdict(dev)
        failures += nvme.check_data_device(dev, host, expected_disk)
        smart = readings.get(f"smart:{dev.disk}")
        if smart is not None:
            try:
                log = nvme.parse_smart_log(f"/dev/{dev.disk}", smart)
            except nvme.NvmeError as e:
                failures.append(f"{host}: {e}")
            else:
                record["smart"] = asdict(log)
                if dev.disk not in smart_checked:
                    failures += nvme.check_smart_log(log, host)
                    smart_checked.add(dev.disk)
        elif dev.disk.startswith("nvme"):
            why = "nvme-cli is not installed" if "nvme" in readings.get("missing", "").split() else "no reading"
            failures.append(
                f"the SMART health of /dev/{dev.disk} under {path} on {host} was not read ({why}): "
                "install nvme-cli on the host"
            )
        records.append(record)
    return records, failures


def _check_kv_size(profile: Profile, failures: list[str]) -> None:
    """--kv-offloading-size and the budget's buffers describe the same memory: they must agree (1%)."""
    hm, size = profile.host_memory, profile.vllm.kv_offloading_size
    if hm is None or size is None:
        return
    budgeted = hm.kv_offload_buffers * hm.kv_offload_gib_each
    if abs(budgeted - size) > 0.01 * max(size, budgeted):
        failures.append(
            f"profile {profile.name}: vllm.kv_offloading_size is {size:g} GiB but host_memory budgets "
            f"{hm.kv_offload_buffers} x {hm.kv_offload_gib_each:g} = {budgeted:.3f} GiB: make them agree"
        )


def to_json(plan: GpuHostPlan) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "host": plan.host,
        "ok": plan.ok,
        "failures": plan.failures,
        "gpus": plan.gpus,
        "numa_plan": plan.numa,
        "ram_budget": plan.budget,
        "ram_budget_table": plan.budget_table,
        "container_spec": plan.container_spec,
        "data": plan.data,
        "slice": plan.slice_unit,
        "toolkit_install": plan.toolkit_install,
        "notes": list(plan.notes),
        "kernel_module": plan.kernel_module,
        "peer": plan.peer,
    }


class GpuFacts(StrictModel):
    """A GPU host's facts and decisions as the deployment plan holds them (Plan.gpu): to_json's, less what the plan
    holds in its own fields (the container spec, the host, ok, failures), and the memlock limit the runtime role
    writes. Its JSON is to_json's field for field: manifests and `make verify` compare it so."""

    # Read back from JSON (serving/plan/plan.py parse_plan), each GpuInfo arrives as an object, which strict
    # validation refuses (as Launch's dataclasses, serving/plan/launch.py).
    model_config = ConfigDict(strict=False)

    schema_version: int
    gpus: list[gpu_facts.GpuInfo]
    numa_plan: dict[str, Any] | None
    ram_budget: dict[str, Any] | None
    ram_budget_table: str
    data: list[dict[str, Any]] | None
    slice: dict[str, Any] | None
    toolkit_install: bool
    notes: list[str] = Field(default_factory=list)
    kernel_module: dict[str, str] | None = None
    # Whether the planned GPUs can talk (serving/host/pcie_peer.py); None where the host was not asked.
    peer: dict[str, Any] | None = None
    # What the runtime role writes as LimitMEMLOCK, in the form systemd accepts ("" when it writes nothing).
    engine_memlock: str


def facts_of(plan: GpuHostPlan, engine_memlock: str | None) -> GpuFacts:
    """The plan's GpuFacts of a host's GPU plan, with the inventory's memlock limit for the engine (or None)."""
    own = {k: v for k, v in to_json(plan).items() if k not in ("container_spec", "host", "ok", "failures")}
    return GpuFacts(**own, engine_memlock=systemd_memlock(engine_memlock) if engine_memlock else "")


def dumps(plan: GpuHostPlan) -> str:
    return json.dumps(to_json(plan), indent=2, sort_keys=True, default=str) + "\n"
