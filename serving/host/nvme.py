"""NVMe checks for a GPU host's data path: is it on the expected device, and is that device healthy?

The host produces raw readings with standard tools; this module interprets them:
- `findmnt -J -o SOURCE,TARGET --target PATH`: the block device under a data path;
- `lsblk -J -o NAME,PKNAME,TYPE,TRAN,MODEL`: which disk a partition belongs to and how it is attached;
- `nvme smart-log -o json /dev/nvmeN`: the drive's own health (NVMe SMART / Health Information log).

The I/O gate itself (fio QD1/QD64 against per-class thresholds) is probes/io/probe.py; a slow drive shows there,
a dying one here. Each problem is one line that says what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.errors import InputError

SCHEMA_VERSION = 1
# NVMe base specification, SMART / Health log byte 0: what each critical-warning bit means.
CRITICAL_WARNING_BITS = {
    0: "available spare below its threshold",
    1: "temperature outside its thresholds",
    2: "NVM subsystem reliability degraded (media or internal errors)",
    3: "media placed in read-only mode",
    4: "volatile memory backup device failed",
    5: "persistent memory region read-only",
}


class NvmeError(InputError):
    pass


@dataclass(frozen=True)
class SmartLog:
    device: str
    critical_warning: int
    temperature_c: float  # nvme-cli's JSON reports Kelvin; converted
    available_spare_pct: int
    available_spare_threshold_pct: int
    percentage_used: int
    media_errors: int
    error_log_entries: int
    unsafe_shutdowns: int
    power_on_hours: int


@dataclass(frozen=True)
class NvmeLimits:
    max_temperature_c: float = 70.0
    max_percentage_used: int = 90
    max_media_errors: int = 0


def _int(data: Mapping[str, Any], *names: str) -> int:
    for name in names:
        if name in data:
            value = data[name]
            if isinstance(value, str):
                value = value.replace(",", "").strip().rstrip("%")
            return int(value)
    raise NvmeError(f"nvme smart-log: no field {names[0]!r} in the JSON (expected `nvme smart-log -o json`)")


def parse_smart_log(device: str, text: str) -> SmartLog:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise NvmeError(f"nvme smart-log {device}: not JSON ({e}); run it with -o json") from None
    if not isinstance(data, dict):
        raise NvmeError(f"nvme smart-log {device}: expected a JSON object")
    return SmartLog(
        device=device,
        critical_warning=_int(data, "critical_warning"),
        temperature_c=round(_int(data, "temperature") - 273.15, 1),
        available_spare_pct=_int(data, "avail_spare"),
        available_spare_threshold_pct=_int(data, "spare_thresh"),
        percentage_used=_int(data, "percent_used", "percentage_used"),
        media_errors=_int(data, "media_errors"),
        error_log_entries=_int(data, "num_err_log_entries"),
        unsafe_shutdowns=_int(data, "unsafe_shutdowns"),
        power_on_hours=_int(data, "power_on_hours"),
    )


def check_smart_log(log: SmartLog, host: str, limits: NvmeLimits = NvmeLimits()) -> list[str]:
    """One line per health problem of the drive under the data path."""
    out = []
    if log.critical_warning:
        meaning = [m for bit, m in CRITICAL_WARNING_BITS.items() if log.critical_warning & (1 << bit)]
        out.append(
            f"{log.device} on {host} reports critical warning 0x{log.critical_warning:02x} ({'; '.join(meaning)}): "
            "replace or move the data before serving from it"
        )
    if log.media_errors > limits.max_media_errors:
        out.append(
            f"{log.device} on {host} has {log.media_errors} media errors (limit {limits.max_media_errors}): "
            "unrecovered reads stall every reader; check `nvme error-log` and plan a replacement"
        )
    if log.temperature_c > limits.max_temperature_c:
        out.append(
            f"{log.device} on {host} is at {log.temperature_c:g} °C, above {limits.max_temperature_c:g} °C: "
            "a hot drive throttles; check its airflow"
        )
    if log.percentage_used >= limits.max_percentage_used:
        out.append(
            f"{log.device} on {host} has used {log.percentage_used}% of its rated endurance "
            f"(limit {limits.max_percentage_used}%): plan a replacement"
        )
    return out


@dataclass(frozen=True)
class DataDevice:
    path: str
    source: str  # the mounted block device, e.g. /dev/nvme0n1p2
    disk: str  # its whole disk, e.g. nvme0n1
    transport: str | None  # lsblk TRAN: nvme, sata, ...
    model: str | None


def _walk(devices: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for d in devices:
        out.append(d)
        out += _walk(d.get("children") or [])
    return out


def data_device(path: str, findmnt_json: str, lsblk_json: str) -> DataDevice:
    """The disk under `path`, from findmnt's and lsblk's JSON."""
    try:
        fs = json.loads(findmnt_json)["filesystems"][0]
        blocks = _walk(json.loads(lsblk_json)["blockdevices"])
    except (json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
        raise NvmeError(f"{path}: cannot read findmnt/lsblk JSON ({e})") from None
    source = str(fs["source"])
    name = source.removeprefix("/dev/")
    by_name = {str(b["name"]): b for b in blocks}
    dev = by_name.get(name)
    if dev is None:
        raise NvmeError(f"{path} is on {source}, which lsblk does not list (a network or overlay filesystem?)")
    disk = dev
    while disk.get("pkname") and disk["pkname"] in by_name:
        disk = by_name[disk["pkname"]]
    return DataDevice(path, source, str(disk["name"]), disk.get("tran"), disk.get("model"))


def check_data_device(dev: DataDevice, host: str, expected_disk: str | None) -> list[str]:
    """The data must sit on NVMe, and on the disk the inventory names when it names one."""
    out = []
    if dev.transport != "nvme" and not dev.disk.startswith("nvme"):
        out.append(
            f"{dev.path} on {host} is on {dev.source} ({dev.transport or 'unknown transport'}), not NVMe: "
            "serial page faults on this data will be slow; move it or fix the inventory's data path"
        )
    if expected_disk and dev.disk != expected_disk.removeprefix("/dev/"):
        out.append(f"{dev.path} on {host} is on {dev.disk}, expected {expected_disk}: check the mount or the inventory")
    return out
