"""The parsers and the pinned-RAM model on a real GPU's output (tests/fixtures/recorded-h200, RECORDED on one
NVIDIA H200, driver 580.159.04, 2026-12-04; its README says how and what each file is).

The H200 is no hardware class of ours: these tests check that what the code reads from nvidia-smi, sysfs-free
--query-gpu rows, a sampler stream under a known load and patch 0003's log lines is read as a real driver and a
real torch write them, and that the budget's rounding model predicts what a real pinned buffer cost."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from probes.readers import sampler_logs
from serving.config.alloc_conf import REGISTERED_PATH, TORCH_PATH, parse_alloc_conf, pinned_allocation_bytes
from serving.host import gpu_facts, host_tuning
from serving.record import memory_phases

H200 = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "recorded-h200"
GIB = 1 << 30


def _text(name: str) -> str:
    return (H200 / name).read_text()


def _json(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(_text(name))
    return out


def _fields() -> list[str]:
    return _text("fields-query-gpu.txt").strip().split(",")


def test_the_fields_recorded_are_the_ones_the_code_asks_for() -> None:
    # Recorded before the MIG modes were asked for: the fields every recording must have, read by name.
    assert _text("fields-query-gpu.txt").strip() == ",".join(gpu_facts.REQUIRED_QUERY_GPU_FIELDS)
    assert _text("fields-settings.txt").strip() == ",".join(host_tuning.SETTINGS_FIELDS)
    assert _text("fields-sampled.txt").strip() == ",".join(sampler_logs.NVIDIA_SMI_FIELDS)


def test_preflight_reads_the_real_listing_query_and_topology() -> None:
    listing = gpu_facts.parse_nvidia_smi_L(_text("nvidia-smi-L.txt"))
    assert [(g.index, g.name, g.uuid) for g in listing] == [
        (0, "NVIDIA H200", "GPU-929a31b5-77ed-1db6-5647-9ce1f6eea952")
    ]
    (gpu,) = gpu_facts.parse_query_gpu(_text("nvidia-smi-query-gpu.csv"), _fields())
    assert (gpu.name, gpu.driver_version, gpu.memory_total_mib, gpu.pci_bus_id) == (
        "NVIDIA H200",
        "580.159.04",
        143771,
        "0000:00:06.0",
    )
    assert (gpu.persistence_mode, gpu.pcie_link_gen_current, gpu.pcie_link_gen_max) == (True, 5, 5)
    topo = gpu_facts.parse_topo_matrix(_text("nvidia-smi-topo-m.txt"))
    assert topo.columns == ("GPU0",)
    # The real matrix has a "GPU NUMA ID" column (N/A here) that the constructed class fixtures lack.
    assert "GPU NUMA ID" in _text("nvidia-smi-topo-m.txt")
    assert (topo.gpus[0].cpu_affinity, topo.gpus[0].numa_affinity) == (frozenset(range(16)), 0)


def test_a_real_h200_is_refused_by_a_class_it_is_not() -> None:
    spec = gpu_facts.GpuClassSpec("rtx3090-pp3", 3, "RTX 3090", "570.86", 24000)
    gpus = gpu_facts.parse_query_gpu(_text("nvidia-smi-query-gpu.csv"), _fields())
    listing = gpu_facts.parse_nvidia_smi_L(_text("nvidia-smi-L.txt"))
    assert gpu_facts.check_class(spec, gpus, "h200", listing, "13.0") == [
        "expected 3 GPUs of model RTX 3090 on h200, found 1 (nvidia-smi -L): check the inventory or the host",
        "GPU 0 is NVIDIA H200, expected RTX 3090",
    ]


def test_the_manifest_reads_the_real_gpu_settings() -> None:
    (row,) = host_tuning.parse_gpu_settings(_text("nvidia-smi-settings.csv"))
    assert row["persistence_mode"] == "Enabled"
    assert row["application_clocks_mhz"] == {"graphics": 1980, "memory": 3201}
    assert (row["power_limit_w"], row["power_default_limit_w"]) == (700, 700)
    assert row["ecc_mode"] == {"current": "Enabled", "pending": "Enabled"}
    assert row["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}


def _phases(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _text(name).splitlines()]


def test_the_sampler_stream_shows_the_load_where_it_ran() -> None:
    """The second run's stream against its load's phases (wall clock): the parser must see 99-100% and the power
    cap during the products, 0% and the idle reason before the first CUDA context."""
    lines = _text("nvidia-smi-sampled-2.csv").splitlines()
    parsed = sampler_logs.parse_nvidia_smi(
        [sampler_logs.Line(float(i), ln.split(",")[0], ln) for i, ln in enumerate(lines)]
    )
    assert len(parsed) == len(lines) > 100

    def wall(sample_text: str) -> float:
        stamp = datetime.strptime(sample_text.split(",")[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
        return stamp.timestamp()

    matmul = next(p for p in _phases("load-phases-2.jsonl") if p["phase"].startswith("matmul"))
    lo, hi = matmul["wall"]
    during = [s for s, ln in zip(parsed, lines, strict=True) if lo + 1 <= wall(ln) <= hi - 0.5]
    assert during and all(s.values["utilization.gpu"] >= 99 for s in during)
    assert all(
        sampler_logs.clock_event_names(s.values["clocks_event_reasons.active"]) == ["sw_power_cap"] for s in during
    )
    assert all(600 < s.values["power.draw"] <= 700 for s in during)
    first = parsed[0]
    assert first.values["utilization.gpu"] == 0 and sampler_logs.clock_event_names(
        first.values["clocks_event_reasons.active"]
    ) == ["gpu_idle"]
    assert (first.values["pcie.link.gen.gpucurrent"], first.values["pcie.link.width.current"]) == (5, 16)


def _delta(reading: dict[str, Any], before: dict[str, Any], key: str) -> int:
    return int(reading["status"][key]) - int(before["status"][key])


def test_the_budgets_rounding_predicts_what_a_real_pinned_buffer_cost() -> None:
    default = _json("pinned-torch-default.json")
    registered = _json("pinned-registered.json")
    request = default["request_bytes"]
    assert request == round(4.239 * GIB)
    model_torch = pinned_allocation_bytes(request, parse_alloc_conf(""), TORCH_PATH)
    model_registered = pinned_allocation_bytes(request, parse_alloc_conf(""), REGISTERED_PATH)
    assert model_torch == 8 * GIB
    r = default["readings"]
    assert r["allocated"]["host_memory_stats"]["allocated_bytes.current"] == model_torch
    # RSS grew by the model's figure within 0.1% (the CUDA context's own pages move a little).
    for d, model in ((default, model_torch), (registered, model_registered)):
        grew = _delta(d["readings"]["written"], d["readings"]["before"], "VmRSS")
        assert abs(grew - model) < 0.001 * model, (d["mode"], grew, model)


def test_patch_0003s_lines_from_a_real_cuda_worker_parse() -> None:
    rows = memory_phases.parse(_text("worker-memory.log"))
    assert [r["phase"] for r in rows] == list(memory_phases.PHASES)
    by = {r["phase"]: r for r in rows}
    assert by["weights_loaded"]["allocated"] == 2 * GIB  # 64 bf16 4096² tensors
    assert by["memory_profiled"]["reserved_peak"] - by["weights_loaded"]["reserved"] == 3 * GIB
    assert by["kv_cache_allocated"]["allocated"] == 10 * GIB
    assert by["kv_cache_allocated"]["pinned_host_allocated"] == 256 << 20
    # The 256 MiB pinned staging buffer is shared memory to the kernel, not locked memory.
    grew = by["kv_cache_allocated"]["pss_shmem"] - by["memory_profiled"]["pss_shmem"]
    assert abs(grew - (256 << 20)) < 1 << 20 and by["kv_cache_allocated"]["locked"] == 0
    assert all(r["pinned_host_reserved"] is None for r in rows)  # torch 2.11 keeps no reserved_bytes
