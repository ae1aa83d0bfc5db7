"""The recorded and constructed GPU hosts of tests/fixtures/gpu-hosts as a plan reads them: each profile's host,
its class from the production example inventory, and its readings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from serving.config.profile import load_profile
from serving.host.gpu_facts import GpuClassSpec
from serving.plan import gpu_plan
from serving.plan.plan import Plan, plan_from_profile

FIX = Path(__file__).parent.parent / "fixtures" / "gpu-hosts"
INVENTORY = Path(__file__).parents[2] / "inventory" / "production-example" / "group_vars"
IMAGE = "refdeploy/vllm:0.32.0-cuda-GOLDEN"
UNLIMITED_MEMLOCK = "Limit                     Soft Limit           Hard Limit           Units\n" + (
    "Max locked memory         unlimited            unlimited            bytes\n"
)
HOSTS = {
    "rtx3090-pp3": ("rtx3090-3gpu", "gpu_rtx3090", "gpu3090-a", 131_795_364),  # ~125.7 GiB
    "rtxpro6000-tp8": ("rtxpro6000-8gpu", "gpu_rtxpro6000", "gpupro-a", 1_056_000_000),
    # The same class serving the source's GGUF through vLLM's GGUF plugin (a .gguf file, not the directory).
    "rtxpro6000-tp8-gguf": ("rtxpro6000-8gpu", "gpu_rtxpro6000", "gpupro-a", 1_056_000_000),
}


def class_spec(profile: str) -> GpuClassSpec:
    data = yaml.safe_load((INVENTORY / HOSTS[profile][1] / "class.yml").read_text())
    return gpu_plan.class_spec_from(data["gpu_class"])


def host_readings(profile: str, **override: str) -> dict[str, str]:
    d = FIX / HOSTS[profile][0]
    r = {
        "hostname": HOSTS[profile][2],
        "nvidia_smi_L": (d / "nvidia-smi-L.txt").read_text(),
        "query_gpu": (d / "nvidia-smi-query-gpu.csv").read_text(),
        "topo": (d / "nvidia-smi-topo-m.txt").read_text(),
        "sysfs": gpu_plan.listing_from_tree(d / "sys"),
        "meminfo": f"MemTotal:       {HOSTS[profile][3]} kB\nMemFree:        1000 kB\n",
        "cgroup_fs": "cgroup2fs\n",
        "docker_runtimes": '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"}}',
        "dockerd_limits": UNLIMITED_MEMLOCK,
        "nvidia_version": (d / "host" / "proc-driver-nvidia-version.txt").read_text(),
    }
    r.update(override)
    return r


def class_data(profile: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((INVENTORY / HOSTS[profile][1] / "class.yml").read_text())["gpu_class"]
    return data


def gpu_serving_plan(profile: str, stand_in: dict[str, Any] | None = None, **override: str) -> Plan:
    model = load_profile(profile).model.host_path
    readings = {**host_readings(profile, **override), "served_files": f"17825792\t{model}/model.safetensors\n"}
    return plan_from_profile(load_profile(profile), HOSTS[profile][2], readings, class_data(profile), stand_in=stand_in)
