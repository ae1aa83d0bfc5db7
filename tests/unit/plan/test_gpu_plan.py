"""GPU host plans from recorded/constructed host readings: class checks, NUMA, RAM budget, container spec.

The container specs are compared with reviewed golden files; regenerate them with
REFDEPLOY_UPDATE_GOLDEN=1 and review the diff before committing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from serving.config.profile import load_profile, parse_profile
from serving.plan import gpu_plan
from tests.helpers.gpu_hosts import FIX, HOSTS, IMAGE, UNLIMITED_MEMLOCK
from tests.helpers.gpu_hosts import class_spec as _class
from tests.helpers.gpu_hosts import host_readings as _readings

MEMLOCK_8MIB = UNLIMITED_MEMLOCK.replace("unlimited            unlimited ", "8388608              8388608   ")
# Each class's own profile has container-spec.golden.json; a variant on the same host has
# container-spec.<variant>.golden.json.
GOLDEN = {"rtxpro6000-tp8-gguf": "container-spec.gguf.golden.json"}


def _plan(profile: str, **override: str) -> gpu_plan.GpuHostPlan:
    return gpu_plan.plan_gpu_host(load_profile(profile), _class(profile), _readings(profile, **override), IMAGE)


@pytest.mark.parametrize("profile", sorted(HOSTS))
def test_a_host_that_matches_its_class_gets_the_reviewed_container_spec(profile: str) -> None:
    plan = _plan(profile)
    assert plan.failures == []
    golden = FIX / HOSTS[profile][0] / GOLDEN.get(profile, "container-spec.golden.json")
    rendered = json.dumps(plan.container_spec, indent=2, sort_keys=True) + "\n"
    if os.environ.get("REFDEPLOY_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"rendered spec differs from {golden}: review, then regenerate"


def test_3090_spec_binds_three_stages_and_requests_the_gpus_in_rank_order() -> None:
    spec = _plan("rtx3090-pp3").container_spec
    assert spec is not None
    assert spec["device_requests"][0]["device_ids"] == ["0", "1", "2"]
    assert spec["cpuset_mems"] == "0"
    cmd = spec["command"]
    assert cmd[cmd.index("--pipeline-parallel-size") + 1] == "3"
    assert "--numa-bind" in cmd
    assert spec["env"]["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert spec["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert spec["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True,pinned_max_round_threshold_mb:4096"
    assert "memlock:-1:-1" in spec["ulimits"]


def test_the_gguf_variant_serves_the_first_shard_with_the_tokenizer_directory() -> None:
    spec, plain = _plan("rtxpro6000-tp8-gguf").container_spec, _plan("rtxpro6000-tp8").container_spec
    assert spec is not None and plain is not None
    cmd = spec["command"]
    assert cmd[:3] == ["vllm", "serve", "/models/moe-q4k/moe-Q4_K_M-00001-of-00008.gguf"]
    assert cmd[cmd.index("--tokenizer") + 1] == "/models/moe-q4k/tokenizer"
    assert "/srv/models/moe-q4k:/models/moe-q4k:ro" in spec["volumes"]
    # Everything else is the class's: placement, devices, limits.
    assert {k: v for k, v in spec.items() if k not in ("command", "volumes", "labels")} == {
        k: v for k, v in plain.items() if k not in ("command", "volumes", "labels")
    }


def test_pro6000_spec_spans_both_sockets_rank_by_rank() -> None:
    plan = _plan("rtxpro6000-tp8")
    assert plan.container_spec is not None and plan.numa is not None
    assert plan.container_spec["cpuset_mems"] == "0-1"
    nodes = [r["node"] for g in plan.numa["groups"] for r in g["ranks"]]
    assert nodes == [0, 0, 0, 0, 1, 1, 1, 1]


def _drop_gpu(text: str, index: int) -> str:
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith((f"{index},", f"GPU {index}:")))


BadHost = Callable[[dict[str, str]], dict[str, str]]


@pytest.mark.parametrize(
    ("name", "change", "line"),
    [
        (
            "2 GPUs instead of 3",
            lambda r: {"nvidia_smi_L": _drop_gpu(r["nvidia_smi_L"], 2), "query_gpu": _drop_gpu(r["query_gpu"], 2)},
            "expected 3 GPUs of model RTX 3090 on gpu3090-a, found 2 (nvidia-smi -L): check the inventory or the host",
        ),
        (
            "wrong GPU model",
            lambda r: {"query_gpu": r["query_gpu"].replace("GeForce RTX 3090", "RTX A5000", 1)},
            "GPU 0 is NVIDIA RTX A5000, expected RTX 3090",
        ),
        (
            "driver too old",
            lambda r: {"query_gpu": r["query_gpu"].replace("580.95.05", "535.104.05")},
            "driver 535.104.05 on gpu3090-a is older than the class minimum 570.86",
        ),
        (
            "no container toolkit",
            lambda r: {"missing": "nvidia-container-runtime"},
            "nvidia-container-runtime not found on gpu3090-a: the NVIDIA container toolkit is not installed; install "
            "nvidia-container-toolkit from NVIDIA's package repository, then run `nvidia-ctk runtime configure "
            "--runtime=docker`, or set preflight_install_nvidia_toolkit: true in the inventory for the deploy to "
            "install it",
        ),
        (
            "memlock too low for the budget",
            lambda r: {"dockerd_limits": MEMLOCK_8MIB},
            "pinned memory 50.87 GiB exceeds RLIMIT_MEMLOCK 8.00 MiB",
        ),
        (
            "budget larger than RAM",
            lambda r: {"meminfo": "MemTotal:       50331648 kB\n"},
            "exceeds MemTotal 48.00 GiB",
        ),
        (
            "cgroup v1",
            lambda r: {"cgroup_fs": "tmpfs\n"},
            "gpu3090-a runs cgroup v1 (tmpfs at /sys/fs/cgroup): the serving slice needs cgroup v2",
        ),
        (
            "no NVIDIA container toolkit",
            lambda r: {"docker_runtimes": '{"runc":{"path":"runc"}}'},
            "Docker on gpu3090-a has no nvidia runtime",
        ),
    ],
)
def test_each_bad_host_fails_with_one_clear_line_and_no_spec(name: str, change: BadHost, line: str) -> None:
    base = _readings("rtx3090-pp3")
    plan = gpu_plan.plan_gpu_host(load_profile("rtx3090-pp3"), _class("rtx3090-pp3"), base | change(base), IMAGE)
    assert plan.container_spec is None, name
    assert any(line in f for f in plan.failures), (name, plan.failures)
    assert len([f for f in plan.failures if line in f]) == 1


def test_a_host_without_the_toolkit_is_planned_with_its_install_where_the_inventory_allows_it() -> None:
    # The toolkit missing, so Docker has no nvidia runtime either: the nvidia_toolkit role installs the one, the
    # runtime role then writes the other into daemon.json.
    base = _readings("rtx3090-pp3")
    bare = base | {"missing": "nvidia-container-runtime", "docker_runtimes": '{"runc":{"path":"runc"}}'}
    args = (load_profile("rtx3090-pp3"), _class("rtx3090-pp3"), bare, IMAGE)
    allowed = gpu_plan.plan_gpu_host(*args, install_toolkit=True)
    assert allowed.failures == [] and allowed.toolkit_install is True and allowed.container_spec is not None
    assert gpu_plan.to_json(allowed)["toolkit_install"] is True
    refused = gpu_plan.plan_gpu_host(*args)
    assert [f.split(":")[0] for f in refused.failures] == [
        "nvidia-container-runtime not found on gpu3090-a",
        "Docker on gpu3090-a has no nvidia runtime (docker info",
    ]
    assert refused.toolkit_install is False and refused.container_spec is None
    # Installed already: nothing to install, whatever the inventory allows.
    assert gpu_plan.plan_gpu_host(*args[:2], base, IMAGE, install_toolkit=True).toolkit_install is False


def _row(query_gpu: str, index: int, old: str, new: str) -> str:
    """The --query-gpu text with one GPU's row changed (its trailing fields: ..., mig.mode.current, .pending)."""
    return "".join(
        ln.replace(old, new) if ln.startswith(f"{index},") else ln for ln in query_gpu.splitlines(keepends=True)
    )


def test_mig_enabled_on_a_planned_gpu_refuses_the_tp_plan_naming_the_gpu_and_the_command() -> None:
    """nvidia-smi prints Enabled for mig.mode.current on a MIG-capable board (the RTX PRO 6000 fixture has
    Disabled, Disabled); vLLM cannot run one TP engine across MIG instances."""
    base = _readings("rtxpro6000-tp8")["query_gpu"]
    plan = _plan("rtxpro6000-tp8", query_gpu=_row(base, 3, "Disabled, Disabled", "Enabled, Enabled"))
    assert plan.failures == [
        "GPU 3 on gpupro-a has MIG mode Enabled (nvidia-smi mig.mode.current): CUDA sees only its MIG instances, which "
        "the profile's whole GPUs do not name and vLLM cannot span with tensor or pipeline parallelism; turn it off "
        "with `nvidia-smi -i 3 -mig 0`, then reset the GPU (`nvidia-smi -i 3 -r`, nothing running on it) or reboot"
    ]
    assert plan.container_spec is None
    # Turned off but not yet reset: the reset is what is left to do.
    half = _plan("rtxpro6000-tp8", query_gpu=_row(base, 3, "Disabled, Disabled", "Enabled, Disabled"))
    assert half.failures[0].endswith(
        "MIG is already Disabled pending: reset the GPU (`nvidia-smi -i 3 -r`, nothing running on it)"
    )
    # Enabled only after the next reset: the deploy works now, and the plan says what the reset would do.
    pending = _plan("rtxpro6000-tp8", query_gpu=_row(base, 5, "Disabled, Disabled", "Disabled, Enabled"))
    assert pending.failures == [] and pending.container_spec is not None
    assert pending.notes == (
        "GPU 5 on gpupro-a turns MIG mode on at its next reset (mig.mode.pending Enabled), and this plan would then "
        "fail: `nvidia-smi -i 5 -mig 0` keeps it off",
    )


def test_mig_on_a_gpu_the_profile_does_not_use_is_not_its_concern() -> None:
    data = load_profile("rtx3090-pp3").model_dump(mode="json")
    data["gpu"]["devices"], data["vllm"]["pipeline_parallel_size"] = [0, 1], 2
    mig = _row(_readings("rtx3090-pp3")["query_gpu"], 2, "[N/A], [N/A]", "Enabled, Enabled")
    args = (_class("rtx3090-pp3"), _readings("rtx3090-pp3", query_gpu=mig), IMAGE)
    assert not [f for f in gpu_plan.plan_gpu_host(parse_profile(data), *args).failures if "MIG" in f]
    assert [f for f in gpu_plan.plan_gpu_host(load_profile("rtx3090-pp3"), *args).failures if "MIG" in f] != []


def test_persistence_mode_off_is_a_note_in_the_plan_not_a_refusal() -> None:
    """NVIDIA recommends its persistence daemon on Linux; without it a GPU's state is torn down between clients,
    which costs start-up time, not correctness."""
    off = _row(_readings("rtx3090-pp3")["query_gpu"], 1, "Enabled", "Disabled")
    plan = _plan("rtx3090-pp3", query_gpu=off)
    assert plan.failures == [] and plan.container_spec is not None
    assert plan.notes == (
        "GPU 1 on gpu3090-a has persistence mode off: the driver unloads its state whenever no client holds the GPU, "
        "and every start and nvidia-smi reading pays for loading it again; NVIDIA recommends its persistence daemon "
        "(https://docs.nvidia.com/deploy/driver-persistence/): `systemctl enable --now nvidia-persistenced`",
    )
    assert gpu_plan.to_json(plan)["notes"] == list(plan.notes)
    assert [g["persistence_mode"] for g in gpu_plan.to_json(plan)["gpus"]] == [True, False, True]
    assert _plan("rtx3090-pp3").notes == ()


def test_the_pro6000_host_on_the_proprietary_module_is_refused_and_the_plan_keeps_the_module_it_read() -> None:
    """CONSTRUCTED: the fixture's open-module line with the proprietary module's form (a real Blackwell host would
    not get its GPUs driven by that module at all: NVIDIA supports Blackwell on the open one only)."""
    proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:55:41 UTC 2025\n"
    plan = _plan("rtxpro6000-tp8", nvidia_version=proprietary)
    assert [f.split(" (")[0] for f in plan.failures] == ["gpupro-a runs NVIDIA's proprietary kernel module 580.95.05"]
    assert "nvidia-kernel-open-dkms" in plan.failures[0] and plan.container_spec is None
    ok = _plan("rtxpro6000-tp8")
    assert ok.failures == []
    assert gpu_plan.to_json(ok)["kernel_module"] == {"flavour": "open", "version": "580.95.05", "arch": "x86_64"}
    # The 3090 class runs the proprietary module, which Ampere is supported on.
    assert _plan("rtx3090-pp3").kernel_module == {"flavour": "proprietary", "version": "580.95.05", "arch": "x86_64"}


def test_the_budget_table_is_in_the_plan_with_the_allocator_option_in_force() -> None:
    plan = _plan("rtx3090-pp3")
    assert plan.budget is not None
    assert "host KV offload" in plan.budget_table
    assert "not rounded" in plan.budget_table  # pinned_max_round_threshold_mb=4096 in the profile's env
    assert "FITS" in plan.budget_table


def test_the_profile_of_another_class_is_refused() -> None:
    plan = gpu_plan.plan_gpu_host(
        load_profile("rtx3090-pp3"), _class("rtxpro6000-tp8"), _readings("rtxpro6000-tp8"), IMAGE
    )
    assert any("is for hardware class rtx3090-pp3, but gpupro-a is in class rtxpro6000-tp8" in f for f in plan.failures)


def test_missing_readings_and_a_cpu_profile_are_input_errors() -> None:
    with pytest.raises(gpu_plan.GpuPlanError, match="host readings lack topo"):
        r = _readings("rtx3090-pp3")
        del r["topo"]
        gpu_plan.plan_gpu_host(load_profile("rtx3090-pp3"), _class("rtx3090-pp3"), r, IMAGE)
    with pytest.raises(gpu_plan.GpuPlanError, match="no gpu section"):
        gpu_plan.plan_gpu_host(load_profile("cpu-tiny"), _class("rtx3090-pp3"), _readings("rtx3090-pp3"), IMAGE)
    with pytest.raises(gpu_plan.GpuPlanError, match="'min_driver' is missing"):
        gpu_plan.class_spec_from({"name": "x", "gpu_count": 1, "model_substring": "x", "min_memory_mib": 1})


def test_sysfs_listing_refuses_paths_outside_sys() -> None:
    with pytest.raises(gpu_plan.GpuPlanError, match="not a path under /sys"):
        gpu_plan.topology_from_listing("/sys/../etc/passwd\tx\n")


def test_a_host_without_nvidia_smi_says_so() -> None:
    r = _readings("rtx3090-pp3", nvidia_smi_L="", query_gpu="", topo="", missing="nvidia-smi\n")
    plan = gpu_plan.plan_gpu_host(load_profile("rtx3090-pp3"), _class("rtx3090-pp3"), r, IMAGE)
    assert plan.failures[0] == (
        "nvidia-smi not found on gpu3090-a: this is not an NVIDIA GPU host, or its driver is not installed"
    )
    assert plan.container_spec is None


def _data_readings(profile: str, smart: str | None = None, **extra: str) -> dict[str, str]:
    d = FIX / HOSTS[profile][0]
    r = {
        "data_paths": "/srv/models/served\n",
        "findmnt:/srv/models/served": (d / "findmnt.json").read_text(),
        "lsblk": (d / "lsblk.json").read_text(),
        "smart:nvme1n1": smart if smart is not None else (d / "nvme-smart-log.json").read_text(),
    }
    r.update(extra)
    return r


def test_the_data_path_on_a_healthy_nvme_drive_is_recorded() -> None:
    plan = _plan("rtx3090-pp3", **_data_readings("rtx3090-pp3"))
    assert plan.failures == []
    (rec,) = plan.data or []
    assert (rec["path"], rec["source"], rec["disk"], rec["transport"]) == (
        "/srv/models/served",
        "/dev/nvme1n1p1",
        "nvme1n1",
        "nvme",
    )
    assert rec["smart"]["percentage_used"] == 3


def test_a_failing_drive_under_the_data_stops_the_plan() -> None:
    failing = (Path(__file__).parents[2] / "fixtures" / "nvme" / "smart-log-failing.constructed.json").read_text()
    plan = _plan("rtx3090-pp3", **_data_readings("rtx3090-pp3", smart=failing))
    assert plan.container_spec is None
    assert any("/dev/nvme1n1 on gpu3090-a has 17 media errors" in f for f in plan.failures)


def test_data_off_nvme_and_a_missing_path_and_no_nvme_cli_are_each_one_line() -> None:
    sata = json.dumps({"filesystems": [{"source": "/dev/sda1", "target": "/srv"}]})
    lsblk = (Path(__file__).parents[2] / "fixtures" / "nvme" / "lsblk.constructed.json").read_text()
    r = _data_readings("rtx3090-pp3", **{"findmnt:/srv/models/served": sata, "lsblk": lsblk})
    assert [f for f in _plan("rtx3090-pp3", **r).failures if "not NVMe" in f] != []
    r = _data_readings("rtx3090-pp3", **{"findmnt:/srv/models/served": "findmnt: no such file\n"})
    (line,) = _plan("rtx3090-pp3", **r).failures
    assert line.startswith("cannot tell which drive holds /srv/models/served on gpu3090-a")
    r = _data_readings("rtx3090-pp3", missing="nvme")
    del r["smart:nvme1n1"]
    (line,) = _plan("rtx3090-pp3", **r).failures
    assert "(nvme-cli is not installed): install nvme-cli on the host" in line


def test_the_data_must_be_on_the_disk_the_inventory_names() -> None:
    profile = "rtx3090-pp3"
    plan = gpu_plan.plan_gpu_host(
        load_profile(profile),
        _class(profile),
        _readings(profile, **_data_readings(profile)),
        IMAGE,
        data_disk="nvme0n1",
    )
    assert plan.failures == [
        "/srv/models/served on gpu3090-a is on nvme1n1, expected nvme0n1: check the mount or the inventory"
    ]


def test_the_serving_slice_carries_the_numa_plan_and_the_container_memory() -> None:
    plan = _plan("rtx3090-pp3")
    s = plan.slice_unit
    assert s is not None and plan.container_spec is not None
    assert plan.container_spec["cgroup_parent"] == s["name"] == "refdeploy.slice"
    assert (s["allowed_cpus"], s["allowed_memory_nodes"], s["cpu_quota_pct"]) == ("0-27", "0", 2800)
    assert s["memory_max_bytes"] == 110 * 1024**3
    assert "AllowedCPUs=0-27\n" in s["unit"] and f"MemoryMax={110 * 1024**3}\n" in s["unit"]
    pro = _plan("rtxpro6000-tp8").slice_unit
    assert pro is not None and pro["allowed_memory_nodes"] == "0-1"


def test_a_planned_engine_memlock_replaces_the_low_one_dockerd_runs_with() -> None:
    profile = "rtx3090-pp3"
    low = _readings(profile, dockerd_limits=MEMLOCK_8MIB)
    refused = gpu_plan.plan_gpu_host(load_profile(profile), _class(profile), low, IMAGE)
    assert any("exceeds RLIMIT_MEMLOCK 8.00 MiB" in f for f in refused.failures)
    planned = gpu_plan.plan_gpu_host(load_profile(profile), _class(profile), low, IMAGE, engine_memlock="infinity")
    assert planned.failures == []
    with pytest.raises(gpu_plan.GpuPlanError, match="expected infinity or a size in bytes"):
        gpu_plan.plan_gpu_host(load_profile(profile), _class(profile), low, IMAGE, engine_memlock="lots")


@pytest.mark.parametrize(("given", "written"), [("unlimited", "infinity"), ("-1", "infinity"),
                                                ("infinity", "infinity"), ("68719476736", "68719476736")])  # fmt: skip
def test_the_engine_memlock_is_written_as_systemd_accepts_it(given: str, written: str) -> None:
    assert gpu_plan.systemd_memlock(given) == written


@pytest.mark.parametrize("given", ["0", "64G", "lots", "-5"])
def test_a_memlock_systemd_would_refuse_is_refused_before_any_change(given: str) -> None:
    with pytest.raises(gpu_plan.GpuPlanError, match="expected infinity or a size in bytes"):
        gpu_plan.systemd_memlock(given)
