"""Samplers: the commands, the stamped logs, and the parsers against real sysstat/procps output."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.readers import nvml, sampler_logs, samplers
from probes.readers.sampler_logs import Line

FIX = Path(__file__).parent.parent.parent / "fixtures"
SYSSTAT = FIX / "sysstat-12.6"


def test_specs_target_the_vllm_pids_and_skip_a_missing_nvidia_smi() -> None:
    # No NVML here either (what the real pynvml says on a host without the driver: tests/unit/probes/test_nvml.py).
    no_nvml = nvml.Unavailable("nvmlInit: NVMLError_LibraryNotFound: NVML Shared Library Not Found")
    specs = {
        s.name: s
        for s in samplers.build_specs(
            samplers.SAMPLER_NAMES, [1, 30, 54], which=lambda n: None if n == "nvidia-smi" else n,
            environ={}, nvml_open=lambda env: no_nvml,
        )
    }  # fmt: skip
    assert specs["pidstat"].argv == ["pidstat", "-h", "-u", "-t", "-p", "1,30,54", "1"]
    assert specs["pidstat"].skip_reason is None
    assert specs["nvidia-smi"].skip_reason == (
        "nvidia-smi not found: this container was given no GPUs (the profile has none, or no NVIDIA GPU driver "
        "on this host); and NVML did not open: nvmlInit: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    )
    assert specs["nvidia-smi"].argv[-2:] == ["-lms", "200"]
    assert "utilization.gpu" in specs["nvidia-smi"].argv[1]


def test_pidstat_without_vllm_pids_is_skipped_not_run_over_every_process() -> None:
    (spec,) = samplers.build_specs(["pidstat"], [], which=lambda n: n)
    assert spec.skip_reason is not None and "no vLLM process" in spec.skip_reason


def test_unknown_sampler_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown sampler 'top'"):
        samplers.build_specs(["top"], [1])


def test_vmstat_drops_the_since_boot_row() -> None:
    series = sampler_logs.parse_vmstat(sampler_logs.read_log(SYSSTAT / "vmstat.log"))
    # 5 lines: two headers, the since-boot row, two interval rows.
    assert len(series["us"]) == 2
    assert [v for _, v in series["id"]] == [97.0, 93.0]  # not the since-boot 45
    assert series["us"][0][0] < series["us"][1][0]


def test_iostat_rows_by_device_and_column() -> None:
    by_dev = sampler_logs.parse_iostat(sampler_logs.read_log(SYSSTAT / "iostat.log"))
    assert "vda" in by_dev
    assert {"r/s", "w/s", "r_await", "aqu-sz", "%util"} <= set(by_dev["vda"])
    assert len(by_dev["vda"]["r/s"]) == 2  # -y: no since-boot report; 2 intervals in 3 s


def test_pidstat_process_and_thread_rows() -> None:
    rows = sampler_logs.parse_pidstat(sampler_logs.read_log(SYSSTAT / "pidstat.log"))
    procs_rows = [r for r in rows if r.tid is None]
    assert {r.tgid for r in procs_rows} == {1, 30, 54}
    worker_threads = [r for r in rows if r.tgid == 54 and r.tid is not None]
    assert len(worker_threads) > 10  # the worker's gloo and OpenMP threads
    assert all("%CPU" in r.values for r in rows)
    assert any(r.command == "VLLM::Worker" for r in procs_rows)


def test_nvidia_smi_csv_lines_with_na_fields() -> None:
    text = (FIX / "nvidia-smi" / "query-gpu-3x3090.constructed.csv").read_text().splitlines()
    samples = sampler_logs.parse_nvidia_smi([Line(float(i), "", t) for i, t in enumerate(text)])
    assert [s.index for s in samples] == [0, 1, 2, 0, 1, 2]
    assert samples[0].values["utilization.gpu"] == 97.0
    assert "power.draw" not in samples[2].values  # [N/A]
    assert samples[2].values["memory.used"] == 22990.0


def _sampled(fixture: str) -> list[sampler_logs.GpuSample]:
    """A class's replayed stream (tests/fixtures/gpu-hosts/<class>/nvidia-smi-sampled.csv), as the sidecar logs it."""
    text = (FIX / "gpu-hosts" / fixture / "nvidia-smi-sampled.csv").read_text().splitlines()
    assert text[0] == "# fields: " + ",".join(sampler_logs.NVIDIA_SMI_FIELDS)
    return sampler_logs.parse_nvidia_smi([Line(0.2 * i, "", t) for i, t in enumerate(text[1:])])


def test_the_sampled_fields_read_the_pcie_link_and_the_clock_event_reasons() -> None:
    samples = _sampled("rtx3090-3gpu")
    idle, busy = samples[1].values, samples[7].values  # GPU 1 before the first request, then in decode
    assert (idle["utilization.gpu"], idle["power.draw"], idle["clocks.sm"]) == (0, 31.17, 210)
    assert sampler_logs.clock_event_names(idle["clocks_event_reasons.active"]) == ["gpu_idle"]
    assert (busy["utilization.gpu"], busy["pcie.link.gen.gpucurrent"], busy["pcie.link.width.current"]) == (47, 1, 8)
    assert busy["pcie.link.gen.max"] == 4 and busy["clocks_event_reasons.active"] == 0
    capped = [s for s in samples if s.values.get("clocks_event_reasons.active") == 4]
    # GPU 2, whose power limit is set to 300 W (nvidia-smi-settings.csv), at its cap.
    assert [(s.index, s.values["power.draw"]) for s in capped] == [(2, 299.6)]
    assert sampler_logs.clock_event_names(capped[0].values["clocks_event_reasons.active"]) == ["sw_power_cap"]
    assert sampler_logs.clock_event_names(0x1 | 0x40 | 0x1000) == ["gpu_idle", "hw_thermal_slowdown", "0x1000"]


def test_a_link_below_the_class_while_busy_is_flagged_and_an_idle_drop_is_not() -> None:
    judged = {j.gpu: j for j in sampler_logs.judge_pcie_links(_sampled("rtx3090-3gpu"), 4, 16)}
    assert [g for g, j in judged.items() if j.line] == [1]
    assert judged[1].line is not None and judged[1].line.startswith(
        "GPU 1: PCIe link at Gen 1 x8 in 8 of 8 busy samples (utilization >= 20%), below the class's Gen 4 x16"
    )
    # GPUs 0 and 2 drop to Gen 1 when idle, and are at Gen 4 x16 whenever busy.
    assert (judged[0].busy_samples, judged[0].below_samples) == (8, 0) and judged[2].below_samples == 0
    assert all(j.line is None for j in sampler_logs.judge_pcie_links(_sampled("rtxpro6000-8gpu"), 5, 16))


def test_a_log_of_the_seeds_nine_fields_still_reads() -> None:
    line = "2026/11/29 12:00:00.000, 0, 97, 61, 23011, 301.52, 1905, 9751, 71"
    (s,) = sampler_logs.parse_nvidia_smi([Line(1.0, "", line)])
    assert s.values["utilization.gpu"] == 97 and "pcie.link.gen.gpucurrent" not in s.values


def test_a_missing_nvidia_smi_says_what_is_missing() -> None:
    assert "given no GPUs" in samplers.nvidia_smi_missing({})
    given = samplers.nvidia_smi_missing({"REFDEPLOY_GPU_ACCESS": "--gpus device=0,1,2,capabilities=utility"})
    assert given.startswith("this container was given the GPUs (--gpus device=0,1,2,capabilities=utility) but the")
    assert "nvidia-ctk runtime configure" in given


def test_window_log_is_bounded_and_counts_what_it_dropped(tmp_path: Path) -> None:
    log = samplers._Log(tmp_path / "x.log", max_bytes=300, rotate=False)
    for i in range(50):
        log.write(f"line {i}")
    log.close()
    assert (tmp_path / "x.log").stat().st_size <= 300
    assert log.lines + log.dropped == 50 and log.dropped > 0


def test_sidecar_log_rotates_once(tmp_path: Path) -> None:
    log = samplers._Log(tmp_path / "x.log", max_bytes=300, rotate=True)
    for i in range(50):
        log.write(f"line {i}")
    log.close()
    assert (tmp_path / "x.log.1").exists()
    assert (tmp_path / "x.log").stat().st_size <= 300
    lines = sampler_logs.read_log(tmp_path / "x.log")
    assert lines[-1].text == "line 49"
    assert all(a.mono_s <= b.mono_s for a, b in itertools.pairwise(lines))


@pytest.mark.timing(margin="4 vmstat rows needed in 2.5 s at 0.5 s, 5 expected: 1.25, by design (counts not recorded)")
def test_a_real_sampler_set_stamps_lines_on_the_monotonic_clock(tmp_path: Path) -> None:
    specs = samplers.build_specs(["vmstat"], [1])
    if specs[0].skip_reason:
        pytest.fail(f"vmstat must be installed for the tests (procps): {specs[0].skip_reason}")
    before = time.monotonic()
    sset = samplers.SamplerSet(specs, tmp_path, 1 << 20)
    sset.start()
    time.sleep(2.5)
    results = sset.stop()
    after = time.monotonic()
    assert results["vmstat"].status == "successful", results["vmstat"].reason
    lines = sampler_logs.read_log(tmp_path / "vmstat.log")
    assert len(lines) >= 4  # two headers and at least two rows
    assert all(before <= ln.mono_s <= after for ln in lines)


def test_cli_without_vllm_is_bad_input(tmp_path: Path) -> None:
    fake_proc = tmp_path / "proc"
    (fake_proc / "77").mkdir(parents=True)
    (fake_proc / "77" / "cmdline").write_bytes(b"sleep\x00100\x00")
    cp = subprocess.run(
        [
            sys.executable,
            "-m",
            "probes.readers.samplers",
            "--out",
            str(tmp_path / "o"),
            "--seconds",
            "1",
            "--proc-root",
            str(fake_proc),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert cp.returncode == 2
    assert "no vLLM process" in cp.stderr
    assert not (tmp_path / "o" / "samplers.json").exists()


def test_results_file_records_both_clocks(tmp_path: Path) -> None:
    r = {"vmstat": samplers.SamplerResult("vmstat", "skipped", "why", ["vmstat"], None)}
    path = samplers.write_results(tmp_path, r, [1], (1.0, "a"), (2.0, "b"))
    doc = json.loads(path.read_text())
    assert doc["start"] == {"mono_s": 1.0, "wall": "a"}
    assert doc["samplers"]["vmstat"]["reason"] == "why"


def test_sidecar_starts_its_logs_afresh_and_stops_on_sigterm(tmp_path: Path) -> None:
    import signal

    fake_proc = tmp_path / "proc"
    (fake_proc / "1").mkdir(parents=True)
    (fake_proc / "1" / "cmdline").write_bytes(b"/opt/vllm/bin/vllm\x00serve\x00/models/m\x00")
    out = tmp_path / "out"
    out.mkdir()
    (out / "vmstat.log").write_text("1.0\tthen\tlines of the previous serving container\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "probes.readers.samplers", "--out", str(out), "--sidecar", "--only", "vmstat",
         "--proc-root", str(fake_proc)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (out / "samplers.json").exists():
        time.sleep(0.1)
    assert json.loads((out / "samplers.json").read_text())["pids"] == [1]
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    _stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert "previous serving container" in (out / "vmstat.log.1").read_text()
    current = sampler_logs.read_log(out / "vmstat.log", include_rotated=False)
    assert current and all("previous" not in ln.text for ln in current)
    assert json.loads((out / "samplers.json").read_text())["samplers"]["vmstat"]["status"] == "successful"


def test_a_sidecars_pidstat_follows_the_engine_processes_that_start_after_it(tmp_path: Path) -> None:
    """After a restart by Docker's policy the sidecar starts beside vLLM's API server alone: pidstat, which takes
    a fixed list of PIDs, must be run again on the engine's processes once they exist (a CI run's sidecar watched
    PID 1 for the rest of its life). Real processes and a real pidstat; the /proc that names them vLLM's is a
    directory of command lines (--proc-root)."""
    import signal

    server, engine = (subprocess.Popen(["sleep", "120"]) for _ in range(2))
    fake_proc = tmp_path / "proc"
    (fake_proc / str(server.pid)).mkdir(parents=True)
    (fake_proc / str(server.pid) / "cmdline").write_bytes(b"/opt/vllm/bin/vllm\x00serve\x00/models/m\x00")
    out = tmp_path / "out"
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "probes.readers.samplers", "--out", str(out), "--sidecar", "--only", "pidstat",
         "--proc-root", str(fake_proc)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def watched(pids: list[int], timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                doc = out / "samplers.json"
                if doc.exists() and json.loads(doc.read_text())["pids"] == pids:
                    return
                time.sleep(0.2)
            pytest.fail(f"samplers.json never said it watches {pids} within {timeout_s:g} s")

        watched([server.pid], 20)
        (fake_proc / str(engine.pid)).mkdir()
        (fake_proc / str(engine.pid) / "cmdline").write_bytes(b"VLLM::EngineCore")
        watched([server.pid, engine.pid], samplers.FOLLOW_S + 10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            tgids = {r.tgid for r in sampler_logs.parse_pidstat(sampler_logs.read_log(out / "pidstat.log"))}
            if engine.pid in tgids:
                break
            time.sleep(0.5)
        sidecar.send_signal(signal.SIGTERM)
        _stdout, stderr = sidecar.communicate(timeout=20)
    finally:
        for p in (sidecar, server, engine):
            p.kill()
            p.wait()
    assert {server.pid, engine.pid} <= tgids, tgids
    assert sidecar.returncode == 0, stderr
    assert json.loads((out / "samplers.json").read_text())["samplers"]["pidstat"]["status"] == "successful"
