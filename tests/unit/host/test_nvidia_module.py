"""The NVIDIA kernel module's flavour from /proc/driver/nvidia/version, and Blackwell refused on the proprietary one."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.host.nvidia_module import KernelModule, NvidiaModuleError, check_module, parse_version_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# RECORDED on the lent H200 (tests/fixtures/recorded-h200/README.md).
H200 = (FIXTURES / "recorded-h200" / "proc-driver-nvidia-version.txt").read_text()
# CONSTRUCTED in the proprietary module's real form (serving/host/nvidia_module.py cites where it is quoted): what a
# Blackwell host would read if the proprietary module were loaded.
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:55:41 UTC 2025\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"
)


def test_the_recorded_h200_runs_the_open_module() -> None:
    assert parse_version_file(H200) == KernelModule(flavour="open", version="580.159.04", arch="x86_64")


def test_the_class_fixtures_run_the_flavour_their_readme_says() -> None:
    pro = (FIXTURES / "gpu-hosts" / "rtxpro6000-8gpu" / "host" / "proc-driver-nvidia-version.txt").read_text()
    rtx = (FIXTURES / "gpu-hosts" / "rtx3090-3gpu" / "host" / "proc-driver-nvidia-version.txt").read_text()
    assert parse_version_file(pro) == KernelModule("open", "580.95.05", "x86_64")
    assert parse_version_file(rtx) == KernelModule("proprietary", "580.95.05", "x86_64")
    assert parse_version_file(PROPRIETARY) == parse_version_file(rtx)


def test_blackwell_on_the_proprietary_module_is_refused_naming_the_open_module() -> None:
    module, failures = check_module(PROPRIETARY, "12.0", "gpupro-a")
    assert module is not None and module.flavour == "proprietary"
    assert failures == [
        "gpupro-a runs NVIDIA's proprietary kernel module 580.95.05 (/proc/driver/nvidia/version), which does not "
        "support its GPUs (compute capability 12.0: Blackwell or later; NVIDIA supports them on the open module "
        "only): install the open module of the same driver, nvidia-open (NVIDIA's repository) or "
        "nvidia-kernel-open-dkms (Debian), in place of the proprietary one, and reboot"
    ]
    assert check_module(PROPRIETARY, "10.0", "b200")[1] != []  # B200: Blackwell too
    # Hopper and Ampere run on either flavour.
    assert check_module(PROPRIETARY, "9.0", "h200") == (KernelModule("proprietary", "580.95.05", "x86_64"), [])
    assert check_module(PROPRIETARY, "8.6", "gpu3090-a")[1] == []
    assert check_module(H200, "12.0", "gpupro-a")[1] == []


def test_no_module_loaded_is_refused_only_where_the_gpus_need_the_open_one() -> None:
    assert check_module("", "8.6", "gpu3090-a") == (None, [])
    assert check_module("", "12.0", "gpupro-a") == (
        None,
        [
            "/proc/driver/nvidia/version could not be read on gpupro-a: no NVIDIA kernel module is loaded; its GPUs "
            "(compute capability 12.0: Blackwell or later) need NVIDIA's open kernel module, nvidia-open (NVIDIA's "
            "repository) or nvidia-kernel-open-dkms (Debian)"
        ],
    )


def test_a_file_that_is_not_the_drivers_is_one_line_naming_it() -> None:
    with pytest.raises(NvidiaModuleError, match=r"/proc/driver/nvidia/version: expected 'NVRM version: "):
        parse_version_file("nouveau\n")
    _, failures = check_module("nouveau\n", "8.6", "gpu3090-a")
    assert failures == [
        "gpu3090-a: /proc/driver/nvidia/version: expected 'NVRM version: NVIDIA UNIX [Open] ... Kernel Module ... "
        "VERSION', got 'nouveau': is it an NVIDIA driver's?"
    ]
