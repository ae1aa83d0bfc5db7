"""Energy per output token per bench point (serving/bench/energy.py), from the energy counter the sidecar's NVML
reader logs, here the H200's RECORDED counter through the replay seam (tests/fixtures/recorded-h200), over a bench
directory built from real `vllm bench serve` results (tests/helpers/bench_dirs.py bench_dir: c1 and c4, two measured
runs each, 256 output tokens a run)."""

from __future__ import annotations

import json
from pathlib import Path

from serving.bench import report as bench_report
from tests.helpers.bench_dirs import bench_dir, recorded_energy_mj, sidecar_nvml_log


def set_window(d: Path, run_id: str, start: float, end: float) -> None:
    path = d / "runs" / run_id / "status.json"
    status = json.loads(path.read_text())
    status["started_mono_s"], status["ended_mono_s"] = start, end
    path.write_text(json.dumps(status))


def test_a_bench_report_gives_energy_per_output_token_per_point_from_replayed_nvml(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)
    stamps = sidecar_nvml_log(d / "samplers")
    mj = recorded_energy_mj()
    # Each measured run's window from one sample's stamp to another's; c4-m2 ran after the log's window ended.
    windows = {"c1-m1": (10, 30), "c1-m2": (30, 50), "c4-m1": (60, 90)}
    for run_id, (a, b) in windows.items():
        set_window(d, run_id, stamps[a], stamps[b])
    set_window(d, "c4-m2", stamps[-1] + 5.0, stamps[-1] + 6.0)
    s = bench_report.write_report(d)
    energy = s["energy"]
    assert (energy["measured"], energy["replayed"], energy["gpus"]) == (True, True, [0])
    joules = {rid: (mj[b] - mj[a]) / 1000 for rid, (a, b) in windows.items()}
    by_run = {r["id"]: r for r in energy["runs"]}
    for rid, expected in joules.items():
        assert abs(by_run[rid]["energy_j"] - expected) < 1e-6 and by_run[rid]["output_tokens"] == 256
    c1, c4 = energy["points"]
    assert (c1["point"], c1["runs_read"], c1["output_tokens"]) == ("c1", 2, 512)
    assert abs(c1["j_per_output_token"] - (joules["c1-m1"] + joules["c1-m2"]) / 512) < 1e-9
    # c4: one of its two runs lies outside the log: the point's figure is the one it has, and says so.
    assert (c4["runs"], c4["runs_read"], c4["output_tokens"]) == (2, 1, 256)
    assert abs(c4["j_per_output_token"] - joules["c4-m1"] / 256) < 1e-9
    assert c4["why"] == "c4-m2: GPU 0: no energy reading within 1 s of both ends, or the counter restarted"
    text = (d / "report.txt").read_text()
    head = ("energy per output token over the measured runs (GPUs 0; samplers/nvml.log (NVML total energy counter, "
            "mJ)) [REPLAYED NVML values, not this host's GPUs]:")  # fmt: skip
    assert head in text
    # The energy table's row (the pooled table above it has a "concurrency 1" row with "of 2" valid runs too).
    energy_table = text.split(head, 1)[1].splitlines()
    c1_row = next(ln for ln in energy_table if ln.startswith("  concurrency 1 ") and "of 2" in ln)
    assert c1_row.split()[2:6] == [f"{c1['j_per_output_token']:.4g}", f"{c1['energy_j']:.1f}", "512", "2"]
    assert "  not read: c4-m2: GPU 0: no energy reading" in text


def test_a_bench_without_nvml_says_energy_was_not_measured(tmp_path: Path) -> None:
    d = bench_dir(tmp_path)  # its samplers/ holds vmstat.log only: no GPU sampler
    s = bench_report.write_report(d)
    assert s["energy"]["measured"] is False and s["energy"]["points"] == []
    assert (
        "energy per output token: not measured (no samplers/nvml.log: the GPU sampler read nvidia-smi (no energy "
        "counter) or nothing (no GPU))"
    ) in (d / "report.txt").read_text()
