"""The GPU sampler's NVML reader (probes/readers/nvml.py) on NVML values RECORDED on a real H200, through the seam.

The seam (probes/readers/nvml_replay.py) stands in for pynvml and answers each call with what that call returned on the
H200 (tests/fixtures/recorded-h200/nvml-samples.jsonl, tests/device/nvml_record.py); what the recording lacks (an
XID event, PCIe replays, an unsupported call) comes from the CONSTRUCTED files of tests/fixtures/nvml-constructed.
The reader under test is the one that runs on a GPU host: only the module it calls is replaced."""

from __future__ import annotations

import ctypes.util
import itertools
import json
import re
import threading
from pathlib import Path
from typing import Any

import pynvml
import pytest

from probes.readers import nvml, nvml_log, sampler_logs
from probes.readers.nvml_replay import EventData, Memory, ReplayNvml, Utilization
from probes.readers.sampler_logs import Line

FIX = Path(__file__).resolve().parents[2] / "fixtures"
RECORDED = FIX / "recorded-h200" / "nvml-samples.jsonl"
XID_AND_REPLAYS = FIX / "nvml-constructed" / "xid79-and-pcie-replays.jsonl"
NOT_SUPPORTED = FIX / "nvml-constructed" / "replay-counter-not-supported.jsonl"


def recorded_samples() -> list[dict[str, Any]]:
    lines = [json.loads(ln) for ln in RECORDED.read_text().splitlines()]
    return [rec["values"] for rec in lines if rec["kind"] == "sample"]


def replay_lines(env: str) -> list[str]:
    """What the reader writes over the whole recording, through the replay env var the tests set."""
    opened = nvml.open_api({nvml.REPLAY_ENV: env})
    assert isinstance(opened, nvml.Opened)
    out: list[str] = []
    nvml.NvmlReader(opened, interval_s=0.0).run(out.append, threading.Event())
    return out


def stamped(lines: list[str], samples: list[dict[str, Any]] | None = None) -> list[Line]:
    """The lines as the sidecar's log stamps them, on the recording's own clock: each sample line at the mono time
    the H200's sample was taken (a GPU's lines follow its samples in order), events and errors at the last one."""
    monos = [json.loads(ln)["mono"] for ln in RECORDED.read_text().splitlines() if '"sample"' in ln]
    out, k = [], -1
    for text in lines:
        if text.split(",")[2] not in ("xid", "error"):
            k += 1
        out.append(Line(monos[max(k, 0)], "", text))
    return out


def test_the_seam_has_pynvml_s_names_values_and_struct_fields() -> None:
    """The seam can stand in for pynvml only if the reader's calls and constants mean the same in both."""
    called = set(re.findall(r"\b(?:a|api)\.(nvml\w+|NVML_\w+)", Path(nvml.__file__).read_text()))
    assert {"nvmlDeviceGetTotalEnergyConsumption", "nvmlEventSetWait_v2", "NVML_PCIE_UTIL_RX_BYTES"} <= called
    for name in sorted(called):
        assert hasattr(pynvml, name), f"the reader calls {name}, which pynvml lacks"
        # ...ThrottleReasons is the older bindings' name, called only where ...ClocksEventReasons is missing.
        if name != "nvmlDeviceGetCurrentClocksThrottleReasons":
            assert hasattr(ReplayNvml, name), f"the reader calls {name}, which the replay seam lacks"
        if name.startswith(("NVML_", "nvmlEventType")):
            assert getattr(ReplayNvml, name) == getattr(pynvml, name), name
    for ours, theirs in ((Utilization, pynvml.c_nvmlUtilization_t), (Memory, pynvml.c_nvmlMemory_t),
                         (EventData, pynvml.c_nvmlEventData_t)):  # fmt: skip
        assert list(ours.__dataclass_fields__) == [f[0] for f in theirs._fields_]


def test_the_reader_writes_every_recorded_sample_in_nvml_s_units_labelled_replayed() -> None:
    lines = replay_lines(str(RECORDED))
    recorded = recorded_samples()
    assert len(lines) == len(recorded) == 120  # one GPU, one line a sample, no event and no error recorded
    assert all(ln.startswith("replayed,0,") for ln in lines)
    first = dict(zip(nvml.LOG_FIELDS, lines[0].split(","), strict=True))
    assert first == {
        "source": "replayed", "index": "0", "utilization.gpu": "0", "utilization.memory": "0",
        "memory.used_bytes": "644939776", "power_mw": "77014", "clocks.sm": "345", "clocks.mem": "3201",
        "temperature.gpu": "37", "pcie.link.gen.gpucurrent": "5", "pcie.link.gen.max": "5",
        "pcie.link.width.current": "16", "pcie.link.width.max": "16", "clocks_event_reasons.active": "0x1",
        "pcie.tx_kb_s": "752", "pcie.rx_kb_s": "723", "pcie.replay_counter": "0", "energy_mj": "2292478",
    }  # fmt: skip
    log = nvml_log.parse_nvml(stamped(lines))
    assert log.replayed and not log.xids and not log.errors
    for s, rec in zip(log.samples, recorded, strict=True):
        assert s.values["energy_mj"] == rec["nvmlDeviceGetTotalEnergyConsumption"]
        assert s.values["power.draw"] == rec["nvmlDeviceGetPowerUsage"] / 1000  # W, as nvidia-smi's
        assert s.values["memory.used"] == rec["nvmlDeviceGetMemoryInfo"]["used"] / 2**20  # MiB
        assert s.values["pcie.rx_kb_s"] == rec["nvmlDeviceGetPcieThroughput.RX"]


def test_the_recorded_load_reads_as_it_ran() -> None:
    """The bf16 products at the power cap, the host-to-device copies at Gen 5 x16 speed (README of the recording)."""
    samples = nvml_log.parse_nvml(stamped(replay_lines(str(RECORDED)))).samples
    busy = [s for s in samples if s.values["utilization.gpu"] >= 99 and s.values["power.draw"] > 600]
    assert len(busy) >= 25
    assert {tuple(sampler_logs.clock_event_names(s.values["clocks_event_reasons.active"])) for s in busy} == {
        ("sw_power_cap",)
    }
    copies = [s for s in samples if s.values["pcie.rx_kb_s"] > 50e6]
    assert copies and all(59e6 < s.values["pcie.rx_kb_s"] < 60e6 for s in copies)
    # The PCIe judgement reads NVML's samples as it reads nvidia-smi's: at Gen 5 x16 whenever busy.
    (link,) = sampler_logs.judge_pcie_links(samples, 5, 16)
    assert link.busy_samples >= 25 and link.line is None
    assert sampler_logs.judge_pcie_links(samples, 6, 16)[0].line is not None  # a class asking Gen 6 is not met


def test_the_energy_counter_agrees_with_the_power_readings() -> None:
    """Between any two times, the energy the reader's counter gives equals the power it reads integrated (the
    trapezoid rule) within 1% where the power holds steady (NVML's power reading lags a step by a sample or so):
    the counter (mJ) and the power (mW) are read in the right units."""
    samples = nvml_log.parse_nvml(stamped(replay_lines(str(RECORDED)))).samples
    by_gpu = nvml_log.counter_series(samples, "energy_mj")
    power = [(s.mono_s, s.values["power.draw"]) for s in samples]
    for t_a, t_b in ((25.5, 49.2), (37.0, 41.0), (25.5, 31.0)):
        joules, why = nvml_log.energy_j(by_gpu, t_a, t_b)
        inside = [(t, w) for t, w in power if t_a <= t <= t_b]
        integral = sum((tb - ta) * (wa + wb) / 2 for (ta, wa), (tb, wb) in itertools.pairwise(inside))
        integral += (inside[0][0] - t_a) * inside[0][1] + (t_b - inside[-1][0]) * inside[-1][1]
        assert joules is not None, why
        assert abs(joules - integral) < 0.01 * integral, (t_a, t_b, joules, integral)
    # Over the 6 s of bf16 products (load-phases-2.jsonl) about 690 W for 6 s: about 4.1 kJ.
    joules, _ = nvml_log.energy_j(by_gpu, 35.601965, 41.630009)
    assert joules is not None and 4000 < joules < 4200


def test_an_energy_span_outside_the_samples_or_across_a_restart_is_not_read() -> None:
    points = [(10.0, 5000.0), (10.2, 6000.0), (10.4, 7000.0), (12.0, 9000.0)]
    assert nvml_log.counter_at(points, 10.1) == 5500.0
    assert nvml_log.counter_at(points, 10.4) == 7000.0
    assert nvml_log.counter_at(points, 11.0) is None  # 1.6 s between the samples either side
    assert nvml_log.counter_at(points, 9.0) is None and nvml_log.counter_at(points, 12.5) is None
    assert nvml_log.energy_j({0: points}, 10.0, 10.4) == (2.0, "")
    restarted = [(10.0, 5000.0), (10.2, 6000.0), (10.4, 100.0), (10.6, 1100.0)]
    joules, why = nvml_log.energy_j({0: restarted}, 10.1, 10.5)
    assert joules is None and why.startswith("GPU 0: ") and "restarted" in why
    assert nvml_log.energy_j({}, 0.0, 1.0)[0] is None


def test_a_constructed_xid_and_pcie_replays_are_flagged_as_replayed() -> None:
    lines = replay_lines(f"{RECORDED},{XID_AND_REPLAYS}")
    assert "replayed,0,xid,79" in lines
    log = nvml_log.parse_nvml(stamped(lines))
    counters = [s.values["pcie.replay_counter"] for s in log.samples]
    assert counters[:8] == [0] * 8 and counters[8:12] == [1] * 4 and set(counters[12:]) == {3}
    t0 = log.samples[0].mono_s
    health = nvml_log.judge_health(log, t0, log.samples[-1].mono_s)
    (xid,) = health["xids"]
    assert (xid["gpu"], xid["xid"]) == (0, 79)
    assert health["pcie_replays"]["0"]["increase"] == 3
    assert health["pcie_replays"]["0"]["first_rise_s"] == round(log.samples[8].mono_s - t0, 3)
    flags = health["flags"]
    assert len(flags) == 2
    assert flags[0].startswith("FLAG GPU 0: Xid 79 (GPU has fallen off the bus) at ")
    assert flags[1].startswith("FLAG GPU 0: PCIe replay counter +3 in the window (0 -> 3, first rise at ")
    assert all(nvml_log.REPLAYED_NOTE in f for f in flags)
    assert [e["label"] for e in health["events"]] == ["Xid 79 on GPU 0 (replayed)", "PCIe replays +3 on GPU 0"]
    # A window after them flags neither: the Xid is older and the counter stays at 3 in it.
    later = nvml_log.judge_health(log, log.samples[20].mono_s, log.samples[-1].mono_s)
    assert later["flags"] == [] and later["pcie_replays"]["0"] == {"first": 3, "last": 3, "increase": 0}


def test_an_unsupported_call_leaves_its_field_empty_and_is_logged_once() -> None:
    lines = replay_lines(f"{RECORDED},{NOT_SUPPORTED}")
    errors = [ln for ln in lines if ",error," in ln]
    assert errors == ["replayed,0,error,nvmlDeviceGetPcieReplayCounter,NVMLError_NotSupported"]
    log = nvml_log.parse_nvml(stamped(lines))
    assert len(log.samples) == 120 and all("pcie.replay_counter" not in s.values for s in log.samples)
    assert all("energy_mj" in s.values for s in log.samples)
    assert [(g, c, e) for _t, g, c, e in log.errors] == [
        ("0", "nvmlDeviceGetPcieReplayCounter", "NVMLError_NotSupported")
    ]
    health = nvml_log.judge_health(log, log.samples[0].mono_s, log.samples[-1].mono_s)
    assert health["flags"] == [] and health["pcie_replays"] == {}


def test_a_replay_env_naming_no_recording_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"^REFDEPLOY_NVML_REPLAY=/nonexistent.jsonl: /nonexistent.jsonl is not a file"
    ):
        nvml.open_api({nvml.REPLAY_ENV: "/nonexistent.jsonl"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "sample", "index": 0, "values": {}}\n{"kind": "table"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: kind 'table' is not a recording's"):
        nvml.open_api({nvml.REPLAY_ENV: str(bad)})


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver")
def test_without_a_driver_the_real_pynvml_does_not_open_and_says_why() -> None:
    """The real path, on a host without NVIDIA's driver (this one): pynvml imports, nvmlInit cannot load NVML."""
    opened = nvml.open_api({})
    assert isinstance(opened, nvml.Unavailable)
    assert opened.reason == "nvmlInit: NVMLError_LibraryNotFound: NVML Shared Library Not Found"


def test_the_probe_image_pins_the_nvidia_ml_py_the_tests_run() -> None:
    repo = FIX.parent.parent
    # Both are hashed requirements files: the pin's line goes on with " \" (its hashes follow).
    pin = r"^nvidia-ml-py==([^\s\\]+) \\$"
    image = re.search(pin, (repo / "images/probes/requirements.txt").read_text(), re.M)
    lock = re.search(pin, (repo / "requirements.lock").read_text(), re.M)
    assert image and lock and image[1] == lock[1] == "13.610.43"
    assert (
        "pip install --require-hashes -r /opt/refdeploy/probes-requirements.txt"
        in (repo / "images/probes/Dockerfile").read_text()
    )
