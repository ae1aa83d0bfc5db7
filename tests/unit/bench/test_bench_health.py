"""A bench point whose runs saw an Xid or PCIe replays is flagged in the bench report (report.txt and summary.json)
in the capture's words (probes/readers/nvml_log.py judge_health) and its figures are marked; the llm-d Benchmark Report
documents carry the point's NVML power as the schema's power_consumption, or say why they cannot.

NVML's answers are the H200's RECORDED stream (tests/fixtures/recorded-h200/nvml-samples.jsonl) through the replay
seam, with the CONSTRUCTED additions of tests/fixtures/nvml-constructed (an Xid 79 after sample 5, the PCIe replay
counter at 1 from sample 8 and 3 from sample 12; a replay counter NVML does not support), read by the sidecar's GPU
sampler for real, 50 ms a sample (the judge counts what falls within 1 s of a run's window, so the samples must
spread over more than that). The bench directory is test_br_export's (c1 and c4: a warm-up and two measured runs
each); each run's window is set from the log's own stamps."""

from __future__ import annotations

import json
import shutil
import statistics
import time
from datetime import datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
import yaml
from llmd_benchmark_report.schema_v0_2 import BenchmarkReportV02

from probes.readers import nvml, nvml_log, sampler_logs, samplers
from serving.bench import br_export
from serving.bench import report as bench_report
from tests.helpers.bench_dirs import RECORDED, SCHEMA, bench_dir, flag, recorded_energy_mj, sidecar_nvml_log

CONSTRUCTED = RECORDED.parents[1] / "nvml-constructed"
XID_AND_REPLAYS = CONSTRUCTED / "xid79-and-pcie-replays.jsonl"
NOT_SUPPORTED = CONSTRUCTED / "replay-counter-not-supported.jsonl"
XID_FLAG_END = "read the host's kernel log (dmesg | grep -i xid) and NVIDIA's Xid catalog for the action it asks"


def _sample(replay: str, out: Path, interval_ms: int) -> Path:
    specs = samplers.build_specs(["nvidia-smi"], [1], gpu_interval_ms=interval_ms, environ={nvml.REPLAY_ENV: replay})
    sset = samplers.SamplerSet(specs, out, 1 << 20)
    sset.start()
    deadline = time.monotonic() + 60
    while sset.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    sset.stop()
    return out / nvml.LOG_NAME


@pytest.fixture(scope="module")
def xid_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _sample(f"{RECORDED},{XID_AND_REPLAYS}", tmp_path_factory.mktemp("xid"), 50)


@pytest.fixture(scope="module")
def not_supported_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _sample(f"{RECORDED},{NOT_SUPPORTED}", tmp_path_factory.mktemp("not-supported"), 5)


def with_log(tmp_path: Path, log: Path) -> tuple[Path, nvml_log.NvmlLog]:
    d = bench_dir(tmp_path)
    shutil.copy(log, d / "samplers" / nvml.LOG_NAME)
    return d, nvml_log.parse_nvml(sampler_logs.read_log(log))


def set_window(d: Path, run_id: str, start: float, end: float) -> None:
    """The run's window on CLOCK_MONOTONIC, and its wall-clock stamps as far apart (a run whose two clocks
    disagree is flagged, and left out of its document, as a wall-clock step)."""
    path = d / "runs" / run_id / "status.json"
    status = json.loads(path.read_text())
    status["started_mono_s"], status["ended_mono_s"] = start, end
    status["ended_unix_s"] = status["started_unix_s"] + (end - start)
    wall = datetime.fromisoformat(status["started_wall"]) + timedelta(seconds=end - start)
    status["ended_wall"] = wall.isoformat()
    path.write_text(json.dumps(status))


def drop_window(d: Path, run_id: str) -> None:
    path = d / "runs" / run_id / "status.json"
    status = json.loads(path.read_text())
    del status["started_mono_s"], status["ended_mono_s"]
    path.write_text(json.dumps(status))


def windows_xid_in_c1_replays_only_in_c4(d: Path, log: nvml_log.NvmlLog) -> dict[str, tuple[float, float]]:
    """c1-m1 over the Xid and both counter rises; c4-m1 starting 1 s after the midpoint between the Xid and
    sample 11 (counter 1), so that, with the judge's 1 s margin, it sees the rise at sample 12 (+2) but not the Xid;
    the other runs 2 s after the last rise or later; c1-w1 without a window."""
    s = [x.mono_s for x in log.samples]
    (xid,) = log.xids
    assert s[5] <= xid.mono_s < s[11] and s[-1] - s[12] > 4.0
    late = next(i for i, t in enumerate(s) if t > s[12] + 2.0)
    t = (xid.mono_s + s[11]) / 2 + 1.0
    windows = {"c1-m1": (s[2], s[20]), "c4-m1": (t, t + 0.1), "c1-m2": (s[late], s[late + 5]),
               "c4-w1": (s[late + 6], s[late + 8]), "c4-m2": (s[late + 9], s[late + 14])}  # fmt: skip
    for rid, (a, b) in windows.items():
        set_window(d, rid, a, b)
    drop_window(d, "c1-w1")
    return windows


def test_a_point_whose_runs_saw_an_xid_or_pcie_replays_is_flagged_and_its_figures_marked(
    tmp_path: Path, xid_log: Path
) -> None:
    d, log = with_log(tmp_path, xid_log)
    windows = windows_xid_in_c1_replays_only_in_c4(d, log)
    s = bench_report.write_report(d)
    health = s["gpu_health"]
    assert (health["judged"], health["replayed"], health["log"]) == (True, True, "samplers/nvml.log")
    # Each run's flags are the capture judge's over its window, word for word.
    for rid, (a, b) in windows.items():
        assert health["runs"][rid]["flags"] == nvml_log.judge_health(log, a, b)["flags"], rid
    c1, c4 = health["points"]["c1"], health["points"]["c4"]
    assert (c1["flagged"], c1["critical_error"], c1["runs_flagged"]) == (True, True, ["c1-m1"])
    assert c1["xids"] == [{"run": "c1-m1", "gpu": 0, "xid": 79}]
    assert c1["pcie_replay_rises"] == [{"run": "c1-m1", "gpu": 0, "increase": 3}]
    assert c1["runs_judged"] == ["c1-m1", "c1-m2"]  # c1-w1 has no window
    assert (c4["flagged"], c4["critical_error"], c4["xids"]) == (True, False, [])
    assert c4["pcie_replay_rises"] == [{"run": "c4-m1", "gpu": 0, "increase": 2}]
    # The summary's points, whose figures these are, carry the mark; so does summary.json.
    marks = {p["point"]: p["gpu_health"]["mark"] for p in s["points"]}
    assert marks == {
        "c1": "its figures were taken while the GPU reported a critical error: Xid 79 on GPU 0 (c1-m1); "
        "PCIe replay counter +3 on GPU 0 (c1-m1)",
        "c4": "its figures were taken while the GPU's PCIe link resent packets: PCIe replay counter +2 on GPU 0 "
        "(c4-m1)",
    }
    written = json.loads((d / bench_report.SUMMARY_JSON).read_text())
    assert {p["point"]: p["gpu_health"]["mark"] for p in written["points"]} == marks
    assert written["gpu_health"]["points"]["c1"]["xids"] == c1["xids"]
    text = (d / bench_report.REPORT_TXT).read_text()
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("GPU health over each point's runs"))
    assert lines[head].endswith("[REPLAYED NVML values, not this host's GPUs]:")
    assert head < lines.index("pooled over the valid measured runs (median [min-max] n):")  # before the figures
    assert lines[head + 1] == f"  FLAGGED concurrency 1: {marks['c1']}"
    assert lines[head + 2].startswith("    c1-m1: FLAG GPU 0: Xid 79 (GPU has fallen off the bus) at ")
    assert lines[head + 2].endswith(XID_FLAG_END) and nvml_log.REPLAYED_NOTE in lines[head + 2]
    assert lines[head + 3].startswith("    c1-m1: FLAG GPU 0: PCIe replay counter +3 in the window (0 -> 3, first ")
    assert lines[head + 4] == f"  FLAGGED concurrency 4: {marks['c4']}"
    assert lines[head + 5].startswith("    c4-m1: FLAG GPU 0: PCIe replay counter +2 in the window (1 -> 3, first ")
    assert lines[head + 6] == "  not judged: c1-w1 (status ok): no started_mono_s/ended_mono_s in its status.json"
    rows = {ln.split("  ")[1]: ln for ln in lines if ln.startswith("  concurrency ") and " of 2 " in ln}
    assert rows["concurrency 1"].endswith("  FLAG Xid 79, PCIe replays")
    assert rows["concurrency 4"].endswith("  FLAG PCIe replays")
    # Each point's Benchmark Report document says it too.
    docs = {p.stem: yaml.safe_load(p.read_text()) for p in (d / br_export.BR_DIR).glob("*.yaml")}
    for point in ("c1", "c4"):
        notes = docs[point]["scenario"]["load"]["native"]["config"]["notes"]
        assert f"GPU health FLAGGED (samplers/nvml.log): {marks[point]} (the flags: report.txt, GPU health)" in notes


def test_a_point_whose_runs_saw_neither_is_ok_and_a_check_nvml_could_not_make_is_said(
    tmp_path: Path, not_supported_log: Path
) -> None:
    d, log = with_log(tmp_path, not_supported_log)
    s = [x.mono_s for x in log.samples]
    for i, rid in enumerate(("c1-w1", "c1-m1", "c1-m2", "c4-w1", "c4-m1", "c4-m2")):
        set_window(d, rid, s[10 + 15 * i], s[20 + 15 * i])  # a 0.6 s log: each window sees all of it
    summary = bench_report.write_report(d)
    health = summary["gpu_health"]
    assert [p["gpu_health"]["flagged"] for p in summary["points"]] == [False, False]
    assert health["unchecked"] == {
        "replays": ["GPU 0: nvmlDeviceGetPcieReplayCounter failed (NVMLError_NotSupported): PCIe replays not counted"]
    }
    text = (d / bench_report.REPORT_TXT).read_text()
    assert "  concurrency 1: no XID event and PCIe replays not counted in its 3 run(s)" in text
    assert "  not checked: GPU 0: nvmlDeviceGetPcieReplayCounter failed (NVMLError_NotSupported)" in text
    assert "FLAG" not in text
    # The health column's rows (the pooled table's rows say "2 of 2" valid runs too, and do not end so).
    rows = [ln for ln in text.splitlines() if ln.startswith("  concurrency ") and "  ok (" in ln]
    assert len(rows) == 2 and all(r.endswith("  ok (replays not read)") for r in rows)


def test_without_nvml_gpu_health_is_not_judged_and_the_documents_leave_power_out_saying_why(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)  # its samplers/ holds vmstat.log only: no GPU sampler (the CPU profile)
    s = bench_report.write_report(d)
    assert s["gpu_health"]["judged"] is False
    assert all(p["gpu_health"] == {"judged": False, "flagged": False, "mark": ""} for p in s["points"])
    text = (d / bench_report.REPORT_TXT).read_text()
    assert (
        "GPU health (XID events, PCIe replays): not judged (no samplers/nvml.log: the GPU sampler read nvidia-smi "
        "(no XID events, no replay counter) or nothing (no GPU))"
    ) in text
    for path in (d / br_export.BR_DIR).glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        assert "observability" not in doc["results"]
        config = doc["scenario"]["load"]["native"]["config"]
        why = s["energy"]["why"]
        assert config["energy"] == {"measured": False, "why": why}
        assert f"power_consumption left out: energy not measured ({why})" in config["notes"]


def test_a_document_carries_its_pooled_runs_nvml_power_as_power_consumption(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    # The RECORDED stream alone, replayed 5 ms a sample (recorded 200 ms apart): the counter rises 40 times as fast
    # as the H200's did, and so do the watts here; what is checked is that they are the runs' joules over seconds.
    stamps = sidecar_nvml_log(d / "samplers")
    mj = recorded_energy_mj()
    windows = {"c1-m1": (10, 30), "c1-m2": (30, 50), "c4-m1": (60, 90), "c4-m2": (90, 119)}
    for rid, (a, b) in windows.items():
        set_window(d, rid, stamps[a], stamps[b])
    flag(d, "c4-m1")  # left out of c4's document, still in the summary's point
    s = bench_report.write_report(d)
    joules = {rid: (mj[b] - mj[a]) / 1000 for rid, (a, b) in windows.items()}
    watts = {rid: joules[rid] / (stamps[b] - stamps[a]) for rid, (a, b) in windows.items()}
    docs = {p.stem: yaml.safe_load(p.read_text()) for p in (d / br_export.BR_DIR).glob("*.yaml")}
    for point, pooled in (("c1", ["c1-m1", "c1-m2"]), ("c4", ["c4-m2"])):
        doc = docs[point]
        BenchmarkReportV02.model_validate(doc)
        jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        (component,) = doc["results"]["observability"]["components"]
        assert component["component_label"] == doc["scenario"]["stack"][0]["metadata"]["label"]
        assert component["raw_data_path"] == "../samplers/nvml.log"
        assert (d / br_export.BR_DIR / component["raw_data_path"]).is_file()
        power = component["aggregate"]["power_consumption"]
        expected = [watts[r] for r in pooled]
        assert power["units"] == "Watts"
        assert abs(power["mean"] - statistics.fmean(expected)) < 1e-6
        assert abs(power["min"] - min(expected)) < 1e-6 and abs(power["max"] - max(expected)) < 1e-6
        energy = doc["scenario"]["load"]["native"]["config"]["energy"]
        assert [r["id"] for r in energy["runs_read"]] == pooled
        assert abs(energy["j_per_output_token"] - sum(joules[r] for r in pooled) / (256 * len(pooled))) < 1e-9
        assert energy["source"].endswith("[REPLAYED NVML values, not this host's GPUs]")
    # c4's document pools its valid run only (one figure: no stddev); the summary's point pools both.
    assert next(p["runs_read"] for p in s["energy"]["points"] if p["point"] == "c4") == 2
    c4_power = docs["c4"]["results"]["observability"]["components"][0]["aggregate"]["power_consumption"]
    assert "stddev" not in c4_power and c4_power["p50"] == c4_power["mean"]
    said = (
        "power_consumption: the engine's mean power per pooled run from NVML's energy counter, every GPU summed, "
        "over 1 of 1 pooled runs [REPLAYED NVML values, not this host's GPUs]"
    )
    assert said in docs["c4"]["scenario"]["load"]["native"]["config"]["notes"]
