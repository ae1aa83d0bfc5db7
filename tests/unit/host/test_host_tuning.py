"""The host's tuning as the manifest records it (serving/host/host_tuning.py), from the module's `tuning` readings:
the selected THP mode, one governor or which CPUs have which, "absent" where a file does not exist, and each
GPU's settings from nvidia-smi."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.host.host_tuning import (
    ABSENT,
    SETTINGS_FIELDS,
    HostTuningError,
    governors,
    host_tuning,
    parse_gpu_settings,
    selected,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu-hosts"


def test_the_selected_thp_mode_is_the_bracketed_one() -> None:
    assert selected("always [madvise] never\n") == "madvise"
    assert selected("[always] defer defer+madvise madvise never") == "always"
    assert selected(None) == ABSENT
    with pytest.raises(HostTuningError, match="bracketed"):
        selected("always madvise never")


def test_one_governor_for_every_cpu_or_which_cpus_have_which() -> None:
    assert governors("cpu0\tperformance\ncpu1\tperformance\n") == "performance"
    mixed = "cpu0\tperformance\ncpu1\tpowersave\ncpu2\tperformance\ncpu3\tperformance\n"
    assert governors(mixed) == {"performance": "0,2-3", "powersave": "1"}
    assert governors(None) == ABSENT
    assert governors("") == ABSENT


def test_a_cpu_host_without_cpufreq_or_numa_balancing_reads_absent_not_an_error() -> None:
    got = host_tuning(
        {
            "cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n",
            "cpu_governors": None,
            "thp_enabled": "always [madvise] never\n",
            "thp_defrag": "always defer defer+madvise [madvise] never\n",
            "swappiness": "60\n",
            "numa_balancing": None,
        }
    )
    assert got == {
        "source": "read on the host",
        "kernel_cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet",
        "cpu_governor": ABSENT,
        "thp": {"enabled": "madvise", "defrag": "madvise"},
        "swappiness": 60,
        "numa_balancing": ABSENT,
        "gpus": None,
    }
    assert host_tuning(None) is None


def test_a_reading_that_cannot_be_parsed_is_kept_with_why() -> None:
    got = host_tuning({"cmdline": "x", "swappiness": "sixty\n"})
    assert got is not None
    assert got["unreadable"] == "vm.swappiness: 'sixty' is not an integer"
    assert got["raw"]["swappiness"] == "sixty\n"


def test_the_replayed_3090_hosts_gpu_settings_per_gpu() -> None:
    text = (FIXTURES / "rtx3090-3gpu" / "nvidia-smi-settings.csv").read_text()
    assert text.splitlines()[0] == "# fields: " + ",".join(SETTINGS_FIELDS)
    gpus = parse_gpu_settings(text)
    assert [g["index"] for g in gpus] == [0, 1, 2]
    assert gpus[0] == {
        "index": 0,
        "pci_bus_id": "00000000:01:00.0",
        "persistence_mode": "Enabled",
        "application_clocks_mhz": {"graphics": None, "memory": None},  # [N/A]: GeForce boards set none
        "power_limit_w": 350.0,
        "power_default_limit_w": 350.0,
        "ecc_mode": {"current": None, "pending": None},
        "pcie": {"gen_current": 1, "gen_max": 4, "width_current": 16, "width_max": 16},
    }
    assert gpus[2]["power_limit_w"] == 300.0 and gpus[2]["pcie"]["width_current"] is None
    tuned = host_tuning({"gpu_settings": text, "replayed": "/opt/replay/rtx3090-3gpu"})
    assert tuned is not None and tuned["gpus"] == gpus
    assert tuned["source"] == "replayed: /opt/replay/rtx3090-3gpu"


def test_gpu_settings_with_other_fields_are_refused_naming_the_line() -> None:
    with pytest.raises(HostTuningError, match="line 1: 3 fields, expected 13"):
        parse_gpu_settings("0, Enabled, 1695\n")
    row = "0, 00000000:01:00.0, Enabled, fast, 9751, 350.00, 350.00, [N/A], [N/A], 1, 4, 16, 16"
    with pytest.raises(HostTuningError, match="line 1: 'fast' is not a number"):
        parse_gpu_settings(row)


def test_a_gpu_host_whose_nvidia_smi_gave_nothing_reads_absent() -> None:
    tuned = host_tuning({"gpu_settings": None})
    assert tuned is not None and tuned["gpus"] == ABSENT
