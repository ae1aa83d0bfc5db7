"""NVMe health and data-device checks against nvme-cli/findmnt/lsblk JSON (constructed fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.host import nvme

FIX = Path(__file__).parent.parent.parent / "fixtures" / "nvme"


def _log(name: str) -> nvme.SmartLog:
    return nvme.parse_smart_log("/dev/nvme1n1", (FIX / f"smart-log-{name}.constructed.json").read_text())


def test_healthy_drive_passes() -> None:
    log = _log("healthy")
    assert (log.temperature_c, log.percentage_used, log.media_errors) == (37.9, 3, 0)
    assert nvme.check_smart_log(log, "gpu3090-a") == []


def test_failing_drive_gives_one_line_per_problem() -> None:
    lines = nvme.check_smart_log(_log("failing"), "gpu3090-a")
    assert len(lines) == 4
    assert lines[0].startswith("/dev/nvme1n1 on gpu3090-a reports critical warning 0x04 (NVM subsystem reliability")
    assert "17 media errors (limit 0)" in lines[1]
    assert "78.9 °C, above 70 °C" in lines[2]
    assert "97% of its rated endurance" in lines[3]


def test_limits_are_per_class() -> None:
    lines = nvme.check_smart_log(_log("failing"), "h", nvme.NvmeLimits(max_temperature_c=85, max_media_errors=20))
    assert not any("°C" in ln or "media errors" in ln for ln in lines)


@pytest.mark.parametrize(
    ("text", "message"),
    [("not json", "not JSON"), ("[]", "expected a JSON object"), ('{"critical_warning": 0}', "no field 'temperature'")],
)
def test_bad_smart_log_is_an_input_error(text: str, message: str) -> None:
    with pytest.raises(nvme.NvmeError, match=message):
        nvme.parse_smart_log("/dev/nvme0n1", text)


def test_data_device_is_the_whole_nvme_disk_under_the_path() -> None:
    dev = nvme.data_device(
        "/srv/models/served",
        (FIX / "findmnt-srv.constructed.json").read_text(),
        (FIX / "lsblk.constructed.json").read_text(),
    )
    assert (dev.source, dev.disk, dev.transport) == ("/dev/nvme1n1p1", "nvme1n1", "nvme")
    assert nvme.check_data_device(dev, "h", "/dev/nvme1n1") == []
    assert nvme.check_data_device(dev, "h", "nvme0n1") == [
        "/srv/models/served on h is on nvme1n1, expected nvme0n1: check the mount or the inventory"
    ]


def test_data_on_sata_is_refused() -> None:
    findmnt = json.dumps({"filesystems": [{"source": "/dev/sda1", "target": "/srv"}]})
    dev = nvme.data_device("/srv/x", findmnt, (FIX / "lsblk.constructed.json").read_text())
    (line,) = nvme.check_data_device(dev, "h", None)
    assert "is on /dev/sda1 (sata), not NVMe" in line


def test_data_on_an_unlisted_source_is_an_input_error() -> None:
    findmnt = json.dumps({"filesystems": [{"source": "overlay", "target": "/"}]})
    with pytest.raises(nvme.NvmeError, match="lsblk does not list"):
        nvme.data_device("/x", findmnt, (FIX / "lsblk.constructed.json").read_text())
