"""A capture whose GPU sampler reads NVML flags the XID events and PCIe replays NVML reported in its window, labelled
REPLAYED where the tests' replay seam stood in for the driver.

The capture runs for real (its samplers part: vmstat, iostat, pidstat and the NVML reader, on this machine) beside a
fake vLLM process; NVML's answers are the H200's RECORDED stream (tests/fixtures/recorded-h200/nvml-samples.jsonl)
with the CONSTRUCTED Xid 79 and replay-counter rises of tests/fixtures/nvml-constructed/xid79-and-pcie-replays.jsonl
(after 1 s, 1.6 s and 2.4 s at 200 ms a sample)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.capture import bundle as capture
from probes.readers import nvml, nvml_log
from serving.evidence import capture_report

FIX = Path(__file__).resolve().parents[2] / "fixtures"
RECORDED = FIX / "recorded-h200" / "nvml-samples.jsonl"
XID_AND_REPLAYS = FIX / "nvml-constructed" / "xid79-and-pcie-replays.jsonl"


def test_a_capture_flags_a_replayed_xid_and_pcie_replays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nvml.REPLAY_ENV, f"{RECORDED},{XID_AND_REPLAYS}")
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "cmdline").write_bytes(b"/opt/vllm/bin/vllm\x00serve\x00/models/m\x00")
    out = tmp_path / "bundle"
    cfg = capture.CaptureConfig(out=out, seconds=4.0, parts=("samplers",), proc_root=proc)
    bundle = capture.run_capture(cfg)
    assert bundle["parts"]["samplers"]["status"] == "successful", bundle["parts"]["samplers"]
    assert "samplers/nvml.log" in bundle["parts"]["samplers"]["files"]
    health = bundle["gpu_health"]
    assert health["judged"] and health["replayed"] and health["log"] == "samplers/nvml.log"
    assert [(x["gpu"], x["xid"]) for x in health["xids"]] == [(0, 79)]
    assert 0.5 < health["xids"][0]["t_s"] < 3.0  # after the 6th sample
    assert health["pcie_replays"]["0"]["increase"] == 3
    timeline = json.loads((out / "timeline.json").read_text())
    labels = [e["label"] for e in timeline["events"]]
    assert "Xid 79 on GPU 0 (replayed)" in labels and "PCIe replays +3 on GPU 0" in labels
    notes = timeline["notes"]
    assert (
        "GPU readings: REPLAYED NVML values (the test seam, probes/readers/nvml_replay.py), not this host's GPUs"
        in notes
    )
    xid_flag = next(n for n in notes if n.startswith("FLAG GPU 0: Xid 79 (GPU has fallen off the bus) at "))
    assert xid_flag.endswith(
        "read the host's kernel log (dmesg | grep -i xid) and NVIDIA's Xid catalog for the action it asks"
    )
    assert nvml_log.REPLAYED_NOTE in xid_flag
    assert any(n.startswith("FLAG GPU 0: PCIe replay counter +3 in the window (0 -> 3, first rise at ") for n in notes)
    gpu = timeline["panels"]["gpu"]
    assert gpu["status"] == "successful" and gpu["series"]["gpu0 util %"]
    assert gpu["source"].startswith("REPLAYED NVML: nvml-samples.jsonl")
    assert gpu["source"].endswith("(samplers/nvml.log)")
    assert "FLAG GPU 0: Xid 79" in (out / "summary.txt").read_text()
    # The page drawn on the controller marks the Xid on every panel and lists the flag.
    page = capture_report.render_html(timeline)
    assert "Xid 79 on GPU 0 (replayed)" in page and "FLAG GPU 0: Xid 79 (GPU has fallen off the bus)" in page
