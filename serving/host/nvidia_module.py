"""Which flavour of NVIDIA's kernel module a GPU host runs (open or proprietary), and whether its GPUs can run on it.

The host's `/proc/driver/nvidia/version` names the loaded module in its first line (NVIDIA's README, "Using the
/proc File System Interface"):

    NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)
    NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.48.01  Mon Dec  8 11:22:45 UTC 2025

The first is the open flavour as the recorded H200 printed it (tests/fixtures/recorded-h200/
proc-driver-nvidia-version.txt; nix-community/nixGL issues 121 and 186 quote the same form from Arch's
nvidia-open-dkms and Ubuntu's nvidia-driver-565-open); the second the proprietary flavour, whose form public setup
notes and scripts quote the same way (no "Open", the architecture before "Kernel Module"). The open module's
architecture word is the build's TARGET_ARCH (x86_64, aarch64).

NVIDIA's driver installation guide ("Kernel Modules"): the proprietary flavour is required for Maxwell, Pascal and
Volta, the open one supports Turing and later and is the default from the 560 series; the newest platforms (Grace
Hopper, Blackwell) are supported by the open flavour only, and the proprietary module refuses to drive a Blackwell
GPU ("NVRM: ... installed in this system requires use of the NVIDIA open kernel module", its kernel log).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from serving.errors import InputError

VERSION_FILE = "/proc/driver/nvidia/version"
_OPEN_RE = re.compile(r"^NVRM version: NVIDIA UNIX Open Kernel Module for (?P<arch>\S+)\s+(?P<version>\d[\d.]*)\s")
_PROPRIETARY_RE = re.compile(r"^NVRM version: NVIDIA UNIX (?P<arch>\S+) Kernel Module\s+(?P<version>\d[\d.]*)\s")
# Blackwell is compute capability 10.x (B200, B300), 11.x and 12.x (RTX PRO 6000, RTX 50): NVIDIA supports these, and
# what comes after them, on the open kernel module only.
OPEN_ONLY_FROM_MAJOR = 10
OPEN_PACKAGES = "nvidia-open (NVIDIA's repository) or nvidia-kernel-open-dkms (Debian)"


class NvidiaModuleError(InputError):
    """A /proc/driver/nvidia/version that cannot be read; the message names the line."""


@dataclass(frozen=True)
class KernelModule:
    flavour: str  # "open" or "proprietary"
    version: str  # the module's driver version, e.g. 580.159.04
    arch: str  # x86_64, aarch64


def parse_version_file(text: str) -> KernelModule:
    """The loaded module's flavour, version and architecture from /proc/driver/nvidia/version's first line."""
    first = text.splitlines()[0] if text.strip() else ""
    for flavour, pattern in (("open", _OPEN_RE), ("proprietary", _PROPRIETARY_RE)):
        m = pattern.match(first + " ")
        if m:
            return KernelModule(flavour=flavour, version=m.group("version"), arch=m.group("arch"))
    raise NvidiaModuleError(
        f"{VERSION_FILE}: expected 'NVRM version: NVIDIA UNIX [Open] ... Kernel Module ... VERSION', got {first!r}"
    )


def _major(compute_capability: str) -> int | None:
    head = compute_capability.strip().split(".")[0]
    return int(head) if head.isdigit() else None


def check_module(text: str, compute_capability: str, host: str) -> tuple[KernelModule | None, list[str]]:
    """The module the host runs, and one line if its GPUs (the class's compute capability) cannot run on it.

    An empty reading (no /proc/driver/nvidia/version: no module loaded) is a failure only where the class needs the
    open module, which is then the thing to install; elsewhere nvidia-smi's own failure says more."""
    major = _major(compute_capability)
    open_only = major is not None and major >= OPEN_ONLY_FROM_MAJOR
    what = f"compute capability {compute_capability}: Blackwell or later"
    if not text.strip():
        if not open_only:
            return None, []
        return None, [
            f"{VERSION_FILE} could not be read on {host}: no NVIDIA kernel module is loaded; its GPUs ({what}) need "
            f"NVIDIA's open kernel module, {OPEN_PACKAGES}"
        ]
    try:
        module = parse_version_file(text)
    except NvidiaModuleError as e:
        return None, [f"{host}: {e}: is it an NVIDIA driver's?"]
    if open_only and module.flavour == "proprietary":
        return module, [
            f"{host} runs NVIDIA's proprietary kernel module {module.version} ({VERSION_FILE}), which does not "
            f"support its GPUs ({what}; NVIDIA supports them on the open module only): install the open module of "
            f"the same driver, {OPEN_PACKAGES}, in place of the proprietary one, and reboot"
        ]
    return module, []
