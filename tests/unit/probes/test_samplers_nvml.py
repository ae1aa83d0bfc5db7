"""The GPU sampler's choice (NVML, else nvidia-smi) and the NVML reader as a sampler of probes/readers/samplers.py, run
for real in this process and as the sidecar's CLI, on the H200's RECORDED NVML values through the replay seam that the
tests select with REFDEPLOY_NVML_REPLAY (probes/readers/nvml_replay.py)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from probes.readers import nvml, nvml_log, sampler_logs, samplers

FIX = Path(__file__).resolve().parents[2] / "fixtures"
RECORDED = FIX / "recorded-h200" / "nvml-samples.jsonl"
REPLAY = {nvml.REPLAY_ENV: str(RECORDED)}
LABEL = "REPLAYED NVML: nvml-samples.jsonl, recorded on NVIDIA H200, driver 580.159.04"
NO_NVML = nvml.Unavailable("nvmlInit: NVMLError_LibraryNotFound: NVML Shared Library Not Found")


def test_the_gpu_sampler_reads_nvml_where_it_opens_and_says_which() -> None:
    (spec,) = samplers.build_specs(["nvidia-smi"], [1], environ=REPLAY, which=lambda n: None)
    assert spec.skip_reason is None and spec.reader is not None
    assert (spec.log, spec.via) == ("nvml.log", LABEL)
    assert spec.argv == ["NVML every 200 ms in this process (replayed)"]


def test_where_nvml_does_not_open_nvidia_smi_runs_and_its_via_says_why() -> None:
    (spec,) = samplers.build_specs(["nvidia-smi"], [1], environ={}, which=lambda n: n, nvml_open=lambda e: NO_NVML)
    assert spec.reader is None and spec.skip_reason is None and spec.log == "nvidia-smi.log"
    assert spec.argv[0] == "nvidia-smi" and spec.argv[-2:] == ["-lms", "200"]
    assert spec.via == (
        "nvidia-smi -lms 200, because NVML did not open: nvmlInit: NVMLError_LibraryNotFound: NVML Shared Library "
        "Not Found"
    )


def _until_done(sset: samplers.SamplerSet, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while sset.alive() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_nvml_reader_runs_in_this_process_and_logs_every_recorded_sample(tmp_path: Path) -> None:
    specs = samplers.build_specs(["nvidia-smi"], [1], gpu_interval_ms=5, environ=REPLAY)
    before = time.monotonic()
    sset = samplers.SamplerSet(specs, tmp_path, 1 << 20)
    sset.start()
    _until_done(sset)  # a replay ends with its recording
    results = sset.stop()
    after = time.monotonic()
    r = results["nvidia-smi"]
    assert (r.status, r.reason, r.log, r.lines, r.exit_code) == ("successful", None, "nvml.log", 120, None)
    assert r.via == LABEL
    assert nvml_log.gpu_log(tmp_path) == tmp_path / "nvml.log" and not (tmp_path / "nvidia-smi.log").exists()
    lines = sampler_logs.read_log(tmp_path / "nvml.log")
    assert all(before <= ln.mono_s <= after for ln in lines)
    assert all(a.mono_s <= b.mono_s for a, b in itertools.pairwise(lines))
    samples = nvml_log.read_gpu_samples(tmp_path / "nvml.log")
    assert [s.values["energy_mj"] for s in samples[:2]] == [2292478, 2307911]  # the recording's first two
    doc = json.loads(samplers.write_results(tmp_path, results, [1], (before, "a"), (after, "b")).read_text())
    assert doc["samplers"]["nvidia-smi"]["via"] == LABEL


def test_stopping_the_sampler_set_stops_the_nvml_reader_midway(tmp_path: Path) -> None:
    sset = samplers.SamplerSet(samplers.build_specs(["nvidia-smi"], [1], environ=REPLAY), tmp_path, 1 << 20)
    sset.start()
    time.sleep(1.0)
    assert sset.alive() == ["nvidia-smi"]
    r = sset.stop()["nvidia-smi"]
    assert sset.alive() == []
    assert r.status == "successful" and 2 <= r.lines <= 12  # 200 ms apart: about 5 in the second


def _fake_vllm(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "cmdline").write_bytes(b"/opt/vllm/bin/vllm\x00serve\x00/models/m\x00")
    return proc


def test_the_cli_samples_nvml_through_the_replay_the_environment_names(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "probes.readers.samplers", "--out", str(out), "--seconds", "1.5",
            "--only", "nvidia-smi", "--proc-root", str(_fake_vllm(tmp_path))]  # fmt: skip
    cp = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, **REPLAY}, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert f"(via {LABEL})" in cp.stdout
    doc = json.loads((out / "samplers.json").read_text())["samplers"]["nvidia-smi"]
    assert (doc["status"], doc["log"], doc["via"]) == ("successful", "nvml.log", LABEL)
    texts = [ln.text for ln in sampler_logs.read_log(out / "nvml.log")]
    assert 3 <= len(texts) <= 12 and all(t.startswith("replayed,0,") for t in texts)


def test_a_replay_env_naming_no_file_stops_the_cli_with_one_line(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "probes.readers.samplers", "--out", str(tmp_path / "o"), "--seconds", "1", "--only",
            "nvidia-smi", "--proc-root", str(_fake_vllm(tmp_path))]  # fmt: skip
    env = {**os.environ, nvml.REPLAY_ENV: str(tmp_path / "missing.jsonl")}
    cp = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=60)
    assert cp.returncode == 2
    assert cp.stderr.splitlines() == [
        f"samplers: REFDEPLOY_NVML_REPLAY={tmp_path}/missing.jsonl: {tmp_path}/missing.jsonl is not a file: name a "
        "recording made by tests/device/nvml_record.py, then optionally a file of constructed additions"
    ]
