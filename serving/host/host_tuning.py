"""The host's tuning as the manifest records it, from the plan's read of the host (the module
library/refdeploy_host_readings.py, its `tuning` readings: each file's text or the tool's output, null where
the file does not exist).

  kernel_cmdline      /proc/cmdline
  cpu_governor        /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor: one governor when every CPU has
                      it, else {governor: cpulist}; "absent" where the kernel has no cpufreq (many VMs)
  thp                 /sys/kernel/mm/transparent_hugepage/{enabled,defrag}: the bracketed (selected) value
  swappiness          /proc/sys/vm/swappiness
  numa_balancing      /proc/sys/kernel/numa_balancing ("absent" on a kernel built without it)
  gpus                on a GPU host, per GPU: persistence mode, application clocks, power limits, ECC mode and
                      PCIe link gen/width (nvidia-smi --query-gpu=<SETTINGS_FIELDS>); None on a CPU host

A reading that is missing is recorded as "absent", never an error: a host without cpufreq or NUMA balancing
is a fact to compare, not a failure. `make verify` compares these between a reference manifest and the host.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from typing import Any

from serving.host.numa import format_cpulist

ABSENT = "absent"

# The --query-gpu fields of the GPU settings, in the order parse_gpu_settings reads them. The PCIe link's
# current gen drops at idle (REFERENCE §7); its max and width are what the slot trained to.
SETTINGS_FIELDS = (
    "index",
    "pci.bus_id",
    "persistence_mode",
    "clocks.applications.graphics",
    "clocks.applications.memory",
    "power.limit",
    "power.default_limit",
    "ecc.mode.current",
    "ecc.mode.pending",
    "pcie.link.gen.gpucurrent",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
_NOT_AVAILABLE = frozenset({"[N/A]", "[Not Supported]", "N/A"})
_BRACKETED = re.compile(r"\[([^\]]+)\]")
_CPU_GOVERNOR = re.compile(r"^cpu(\d+)\t(.*)$")


class HostTuningError(ValueError):
    """A reading that is there but cannot be read as its file's format; the message names it."""


def selected(text: str | None) -> str:
    """The bracketed choice of a sysfs selector ("always [madvise] never" -> "madvise"); "absent" without one."""
    if text is None:
        return ABSENT
    m = _BRACKETED.search(text)
    if m is None:
        raise HostTuningError(f"expected one [bracketed] choice, got {text.strip()!r}")
    return m.group(1)


def _int_or_absent(text: str | None, what: str) -> int | str:
    if text is None:
        return ABSENT
    try:
        return int(text.strip())
    except ValueError:
        raise HostTuningError(f"{what}: {text.strip()!r} is not an integer") from None


def governors(text: str | None) -> str | dict[str, str]:
    """Lines "cpu<N>\\t<governor>" -> the governor every CPU has, or {governor: cpulist}; "absent" without any."""
    by_governor: dict[str, list[int]] = {}
    for line in (text or "").splitlines():
        m = _CPU_GOVERNOR.match(line)
        if m is None:
            raise HostTuningError(f"cpu governor reading: expected 'cpu<N>\\t<governor>', got {line!r}")
        by_governor.setdefault(m.group(2).strip(), []).append(int(m.group(1)))
    if not by_governor:
        return ABSENT
    if len(by_governor) == 1:
        return next(iter(by_governor))
    return {g: format_cpulist(sorted(cpus)) for g, cpus in sorted(by_governor.items())}


def _cell(value: str) -> str | None:
    value = value.strip()
    return None if value in _NOT_AVAILABLE else value


def _number(value: str | None) -> int | float | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            raise HostTuningError(f"{value!r} is not a number") from None


def parse_gpu_settings(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=<SETTINGS_FIELDS> --format=csv,noheader,nounits`, one dict per GPU
    (None where nvidia-smi prints [N/A] or [Not Supported])."""
    gpus: list[dict[str, Any]] = []
    for number, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), start=1):
        if not row or row[0].startswith("#"):
            continue
        if len(row) != len(SETTINGS_FIELDS):
            raise HostTuningError(
                f"nvidia-smi --query-gpu (GPU settings) line {number}: {len(row)} fields, expected "
                f"{len(SETTINGS_FIELDS)} ({','.join(SETTINGS_FIELDS)})"
            )
        v = {f: _cell(c) for f, c in zip(SETTINGS_FIELDS, row, strict=True)}
        try:
            gpus.append(
                {
                    "index": _number(v["index"]),
                    "pci_bus_id": (v["pci.bus_id"] or "").lower() or None,
                    "persistence_mode": v["persistence_mode"],
                    "application_clocks_mhz": {
                        "graphics": _number(v["clocks.applications.graphics"]),
                        "memory": _number(v["clocks.applications.memory"]),
                    },
                    "power_limit_w": _number(v["power.limit"]),
                    "power_default_limit_w": _number(v["power.default_limit"]),
                    "ecc_mode": {"current": v["ecc.mode.current"], "pending": v["ecc.mode.pending"]},
                    "pcie": {
                        "gen_current": _number(v["pcie.link.gen.gpucurrent"]),
                        "gen_max": _number(v["pcie.link.gen.max"]),
                        "width_current": _number(v["pcie.link.width.current"]),
                        "width_max": _number(v["pcie.link.width.max"]),
                    },
                }
            )
        except HostTuningError as e:
            raise HostTuningError(f"nvidia-smi --query-gpu (GPU settings) line {number}: {e}") from None
    return gpus


def host_tuning(readings: Mapping[str, str | None] | None) -> dict[str, Any] | None:
    """The manifest's host_tuning section from the module's `tuning` readings; None where none were read (a
    manifest of a run that did not read them)."""
    if readings is None:
        return None
    r = dict(readings)
    cmdline = r.get("cmdline")
    gpu_text = r.get("gpu_settings")
    try:
        return {
            "source": "replayed: " + str(r["replayed"]) if r.get("replayed") else "read on the host",
            "kernel_cmdline": cmdline.strip() if cmdline is not None else ABSENT,
            "cpu_governor": governors(r.get("cpu_governors")),
            "thp": {
                "enabled": selected(r.get("thp_enabled")),
                "defrag": selected(r.get("thp_defrag")),
            },
            "swappiness": _int_or_absent(r.get("swappiness"), "vm.swappiness"),
            "numa_balancing": _int_or_absent(r.get("numa_balancing"), "kernel.numa_balancing"),
            "gpus": None if "gpu_settings" not in r else parse_gpu_settings(gpu_text) if gpu_text else ABSENT,
        }
    except HostTuningError as e:
        # A reading the manifest cannot parse is recorded as what it is, with why: the manifest is evidence.
        return {"source": "read on the host", "unreadable": str(e), "raw": r}
