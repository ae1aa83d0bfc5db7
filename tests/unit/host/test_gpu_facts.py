from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from serving.host.gpu_facts import (
    QUERY_GPU_ARGV,
    GpuClassSpec,
    GpuFactsError,
    GpuInfo,
    GpuListing,
    check_class,
    normalise_bus_id,
    parse_nvidia_smi_L,
    parse_query_gpu,
    parse_topo_matrix,
)

HOSTS = Path(__file__).resolve().parent.parent.parent / "fixtures" / "gpu-hosts"
RTX3090 = HOSTS / "rtx3090-3gpu"
PRO6000 = HOSTS / "rtxpro6000-8gpu"

SPEC_3090 = GpuClassSpec(
    name="rtx3090-pp3", gpu_count=3, model_substring="RTX 3090", min_driver="550.54", min_memory_mib=24000
)


def _read(host: Path, name: str) -> str:
    return (host / name).read_text()


def test_listing_of_both_hosts() -> None:
    gpus = parse_nvidia_smi_L(_read(RTX3090, "nvidia-smi-L.txt"))
    assert [(g.index, g.name) for g in gpus] == [(i, "NVIDIA GeForce RTX 3090") for i in range(3)]
    assert gpus[0].uuid == "GPU-5d2a9c41-7e0b-4b8e-a1f3-3c9e0d6b2a17"
    pro = parse_nvidia_smi_L(_read(PRO6000, "nvidia-smi-L.txt"))
    assert [g.index for g in pro] == list(range(8))
    assert {g.name for g in pro} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}


def test_listing_skips_mig_lines_and_rejects_garbage() -> None:
    text = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"
        "  MIG 1g.5gb      Device  0: (UUID: MIG-66666666-7777-8888-9999-000000000000)\n"
    )
    assert [g.name for g in parse_nvidia_smi_L(text)] == ["NVIDIA A100-SXM4-40GB"]
    assert parse_nvidia_smi_L("No devices were found\n") == []
    with pytest.raises(GpuFactsError, match="line 1"):
        parse_nvidia_smi_L("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


def test_query_gpu_of_the_3090_host() -> None:
    assert QUERY_GPU_ARGV[1] == (
        "--query-gpu=index,name,driver_version,memory.total,persistence_mode,pci.bus_id,"
        "pcie.link.gen.gpucurrent,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
        "mig.mode.current,mig.mode.pending"
    )
    gpus = parse_query_gpu(_read(RTX3090, "nvidia-smi-query-gpu.csv"))
    assert [g.pci_bus_id for g in gpus] == ["0000:01:00.0", "0000:21:00.0", "0000:4b:00.0"]
    first = gpus[0]
    assert (first.index, first.name, first.driver_version, first.memory_total_mib) == (
        0,
        "NVIDIA GeForce RTX 3090",
        "580.95.05",
        24576,
    )
    assert first.persistence_mode is True
    assert (first.pcie_link_gen_current, first.pcie_link_gen_max) == (1, 4)
    assert (first.pcie_link_width_current, first.pcie_link_width_max) == (16, 16)
    # "[N/A]" reads as None, the rest of the row as usual.
    assert gpus[2].pcie_link_width_current is None
    assert gpus[2].pcie_link_width_max == 16
    # GeForce has no MIG: [N/A] in both modes.
    assert {(g.mig_mode_current, g.mig_mode_pending) for g in gpus} == {(None, None)}


def test_query_gpu_of_the_pro6000_host() -> None:
    gpus = parse_query_gpu(_read(PRO6000, "nvidia-smi-query-gpu.csv"))
    assert len(gpus) == 8
    assert gpus[7].pci_bus_id == "0000:db:00.0"
    assert {(g.memory_total_mib, g.driver_version, g.pcie_link_gen_max) for g in gpus} == {(97887, "580.95.05", 5)}
    assert {(g.mig_mode_current, g.mig_mode_pending) for g in gpus} == {(False, False)}


def test_query_gpu_persistence_disabled_and_bad_rows() -> None:
    row = "0, NVIDIA GeForce RTX 3090, 570.195.03, [N/A], Disabled, 00000000:01:00.0, 1, 4, 16, 16, [N/A], [N/A]\n"
    gpu = parse_query_gpu(row)[0]
    assert gpu.persistence_mode is False
    assert gpu.memory_total_mib is None
    with pytest.raises(GpuFactsError, match="line 1: 3 fields, expected 12"):
        parse_query_gpu("0, NVIDIA GeForce RTX 3090, 570.195.03\n")
    with pytest.raises(GpuFactsError, match=r"memory\.total is '24 GiB', not an integer"):
        parse_query_gpu(row.replace("[N/A]", "24 GiB"))


def test_bus_id_normalises_to_sysfs_form() -> None:
    assert normalise_bus_id("00000000:4B:00.0") == "0000:4b:00.0"
    assert normalise_bus_id("00010000:01:00.1") == "10000:01:00.1"
    with pytest.raises(GpuFactsError, match=r"DOMAIN:BUS:DEVICE\.FUNCTION"):
        normalise_bus_id("4B:00")


def test_topo_matrix_of_the_3090_host_with_ansi_header() -> None:
    text = _read(RTX3090, "nvidia-smi-topo-m.txt")
    assert "\x1b[4m" in text
    topo = parse_topo_matrix(text)
    assert topo.columns == ("GPU0", "GPU1", "GPU2")
    assert sorted(topo.gpus) == [0, 1, 2]
    assert dict(topo.gpus[0].links) == {1: "PHB", 2: "NODE"}
    assert dict(topo.gpus[2].links) == {0: "NODE", 1: "NODE"}
    for gpu in topo.gpus.values():
        assert gpu.cpu_affinity == frozenset(range(32))
        assert gpu.numa_affinity == 0
        assert gpu.gpu_numa_id is None
        assert dict(gpu.nic_links) == {}


def test_topo_matrix_of_the_pro6000_host_with_nic_rows() -> None:
    topo = parse_topo_matrix(_read(PRO6000, "nvidia-smi-topo-m.txt"))
    assert topo.columns == (*(f"GPU{i}" for i in range(8)), "NIC0", "NIC1")
    # NIC rows are links only: no GPU entry for them.
    assert sorted(topo.gpus) == list(range(8))
    socket0 = frozenset([*range(56), *range(112, 168)])
    socket1 = frozenset([*range(56, 112), *range(168, 224)])
    assert [topo.gpus[i].numa_affinity for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(topo.gpus[i].cpu_affinity == socket0 for i in range(4))
    assert all(topo.gpus[i].cpu_affinity == socket1 for i in range(4, 8))
    assert dict(topo.gpus[0].links) == {i: "SYS" for i in range(1, 8)}
    assert dict(topo.gpus[6].nic_links) == {"NIC0": "PHB", "NIC1": "PHB"}
    assert dict(topo.gpus[0].nic_links) == {"NIC0": "SYS", "NIC1": "SYS"}


def test_topo_matrix_read_from_spaces_and_with_na_affinity() -> None:
    text = (
        "        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
        "GPU0     X      NV4     0-15,32-47      N/A             N/A\n"
        "GPU1    NV4      X      N/A             N/A             N/A\n"
    )
    topo = parse_topo_matrix(text)
    assert topo.gpus[0].links == {1: "NV4"}
    assert topo.gpus[0].cpu_affinity == frozenset([*range(16), *range(32, 48)])
    assert topo.gpus[0].numa_affinity is None
    assert topo.gpus[1].cpu_affinity is None


def test_topo_matrix_rejects_what_is_not_one() -> None:
    with pytest.raises(GpuFactsError, match="expected a header of GPU0 GPU1"):
        parse_topo_matrix("Failed to initialize NVML: Driver/library version mismatch\n")
    with pytest.raises(GpuFactsError, match="CPU Affinity"):
        parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-x\t0\n")


def _good_3090() -> tuple[list[GpuInfo], list[GpuListing]]:
    return (
        parse_query_gpu(_read(RTX3090, "nvidia-smi-query-gpu.csv")),
        parse_nvidia_smi_L(_read(RTX3090, "nvidia-smi-L.txt")),
    )


def test_a_good_host_has_no_violations() -> None:
    gpus, listing = _good_3090()
    assert check_class(SPEC_3090, gpus, "gpu3090-a", listing) == []
    pro = GpuClassSpec(
        name="rtxpro6000-tp8",
        gpu_count=8,
        model_substring="RTX PRO 6000",
        min_driver="575.51.03",
        min_memory_mib=96000,
    )
    assert check_class(pro, parse_query_gpu(_read(PRO6000, "nvidia-smi-query-gpu.csv")), "gpupro-a") == []


def test_two_gpus_instead_of_three() -> None:
    gpus, listing = _good_3090()
    assert check_class(SPEC_3090, gpus[:2], "gpu3090-a", listing[:2]) == [
        "expected 3 GPUs of model RTX 3090 on gpu3090-a, found 2 (nvidia-smi -L): check the inventory or the host"
    ]
    assert check_class(SPEC_3090, gpus[:2], "gpu3090-a") == [
        "expected 3 GPUs of model RTX 3090 on gpu3090-a, found 2 (nvidia-smi --query-gpu): "
        "check the inventory or the host"
    ]


def test_wrong_model() -> None:
    gpus, listing = _good_3090()
    gpus[1] = replace(gpus[1], name="NVIDIA RTX A5000")
    assert check_class(SPEC_3090, gpus, "gpu3090-a", listing) == ["GPU 1 is NVIDIA RTX A5000, expected RTX 3090"]


def test_driver_too_old_compares_numerically() -> None:
    gpus, listing = _good_3090()
    old = [replace(g, driver_version="535.104.05") for g in gpus]
    assert check_class(SPEC_3090, old, "gpu3090-a", listing) == [
        "driver 535.104.05 on gpu3090-a is older than the class minimum 550.54"
    ]
    # 550.100 is newer than 550.54 although it sorts before it as text.
    newer = [replace(g, driver_version="550.100") for g in gpus]
    assert check_class(SPEC_3090, newer, "gpu3090-a", listing) == []


def test_memory_below_the_class_minimum_and_missing() -> None:
    gpus, listing = _good_3090()
    gpus[0] = replace(gpus[0], memory_total_mib=12288)
    gpus[2] = replace(gpus[2], memory_total_mib=None)
    assert check_class(SPEC_3090, gpus, "gpu3090-a", listing) == [
        "GPU 0 on gpu3090-a has 12288 MiB, less than the class minimum 24000 MiB",
        "GPU 2 on gpu3090-a reports no memory.total: check the driver (nvidia-smi -q)",
    ]
