"""Bench directories as `make bench` leaves them, built from real `vllm bench serve` results
(tests/fixtures/vllm-bench-serve-0.32.0), and the H200's RECORDED energy counter as a bench's GPU sampler log
(tests/fixtures/recorded-h200)."""

from __future__ import annotations

import json
import shutil
import time
from importlib import resources
from pathlib import Path
from typing import Any

from probes.readers import nvml, sampler_logs, samplers
from serving.bench import compare
from serving.bench import protocol as bench
from serving.config import workload
from serving.config.profile import load_profile
from serving.plan.plan import Plan, plan_from_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-bench-serve-0.32.0"


def fixture(run: str) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    d = FIXTURES / run
    return (
        json.loads((d / "result.json").read_text()),
        json.loads((d / "status.json").read_text()),
        (d / "metrics-before.txt").read_text(),
        (d / "metrics-after.txt").read_text(),
    )


def serving_plan(max_num_seqs: int | None = None, host: str = "localhost") -> Plan:
    """The run's plan of cpu-tiny on `host` (serving/plan/plan.py), as the bench role gets it."""
    profile = load_profile("cpu-tiny")
    if max_num_seqs is not None:
        profile = profile.model_copy(update={"vllm": profile.vllm.model_copy(update={"max_num_seqs": max_num_seqs})})
    return plan_from_profile(profile, host, {"hostname": host, "served_files": ""})


SMOKE = workload.load_workload("smoke")
RUN = {"id": "c1-m1", "point": "c1", "phase": "measured", "seed": 8, "max_concurrency": 1, "request_rate": None}


def make_bench(
    root: Path,
    name: str,
    started: float,
    scale_ttft: float = 1.0,
    max_num_seqs: int | None = None,
    workload: workload.Workload = SMOKE,
    seed_offset: int = 0,
) -> Path:
    """A bench directory as `make bench` leaves it, its runs copied from the fixtures (c1 and c4 runs). scale_ttft
    scales TTFT on both sides of the stream: the client's and the server's histogram (a change that moves TTFT
    moves it in the server first; a client TTFT alone far from the server's is a stream flagged as buffered)."""
    d = root / name / "bench"
    plan = bench.plan_bench(workload, serving_plan(max_num_seqs), "/o", "0-1", "0-1", seed_offset=seed_offset)
    (d / "runs").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(plan["manifest"]))
    (d / "client.json").write_text(json.dumps({"status": "ok", "started_mono_s": 0.0}))
    for i, run in enumerate(plan["manifest"]["runs"]):
        src = FIXTURES / ("c1-m1" if run["point"] == "c1" else "c4-m1")
        dst = d / "runs" / run["id"]
        shutil.copytree(src, dst)
        result = json.loads((dst / "result.json").read_text())
        ttfts = result["ttfts"]
        result["latencies"] = [x + t * (scale_ttft - 1) for x, t in zip(result["latencies"], ttfts, strict=True)]
        result["ttfts"] = [t * scale_ttft for t in ttfts]
        (dst / "result.json").write_text(json.dumps(result))
        _scale_server_ttft(dst, scale_ttft)
        status = json.loads((dst / "status.json").read_text())
        status["started_unix_s"] = started + i
        (dst / "status.json").write_text(json.dumps(status))
    return d


def _scale_server_ttft(run_dir: Path, scale: float) -> None:
    """The run's server TTFT sum delta (vllm:time_to_first_token_seconds_sum, after - before) times scale."""
    if scale == 1.0:
        return
    name = "vllm:time_to_first_token_seconds_sum{"

    def total(text: str) -> float:
        return float(next(ln for ln in text.splitlines() if ln.startswith(name)).rsplit(" ", 1)[1])

    before = total((run_dir / "metrics-before.txt").read_text())
    after_path = run_dir / "metrics-after.txt"
    lines = after_path.read_text().splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith(name):
            head, value = ln.rsplit(" ", 1)
            lines[i] = f"{head} {before + (float(value) - before) * scale!r}"
    after_path.write_text("\n".join(lines) + "\n")


def side(name: str, dirs: list[Path], runs_dir: Path) -> compare.Side:
    return compare.load_side(name, [str(d) for d in dirs], runs_dir)


SCHEMA = json.loads(resources.files("llmd_benchmark_report").joinpath("br_v0_2_json_schema.json").read_text())


def bench_dir(tmp_path: Path, workload: Any = SMOKE) -> Path:
    """make_bench's bench (c1 and c4, a warm-up and two measured runs each), with what the client leaves that it
    does not write: each run's own argv in its status.json (its seed, its result dir), plan.json, the samplers'
    and gauges' logs."""
    d = make_bench(tmp_path / "localhost", "20261129T000000Z", 1000, workload=workload)
    plan = bench.plan_bench(workload, serving_plan(), "/o", "0-1", "0-1")["client_plan"]
    (d / "plan.json").write_text(json.dumps(plan))
    for run in plan["runs"]:
        path = d / "runs" / run["id"] / "status.json"
        status = json.loads(path.read_text())
        status["argv"] = ["vllm", "bench", "serve", *run["argv"]]
        path.write_text(json.dumps(status))
    (d / "samplers").mkdir()
    (d / "samplers" / "vmstat.log").write_text("")
    (d / "gauges.log").write_text("")
    return d


def flag(d: Path, run_id: str, ttft_scale: float = 3.0) -> None:
    """Make the bench flag a run (one request returned 5 tokens of 32: an output length mismatch), its TTFTs
    scaled so that its figures differ from the other runs'."""
    path = d / "runs" / run_id / "result.json"
    result = json.loads(path.read_text())
    result["output_lens"][0] = 5
    result["latencies"] = [x + t * (ttft_scale - 1) for x, t in zip(result["latencies"], result["ttfts"], strict=True)]
    result["ttfts"] = [t * ttft_scale for t in result["ttfts"]]
    path.write_text(json.dumps(result))


RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded-h200" / "nvml-samples.jsonl"


def recorded_energy_mj() -> list[int]:
    lines = [json.loads(ln) for ln in RECORDED.read_text().splitlines()]
    return [r["values"]["nvmlDeviceGetTotalEnergyConsumption"] for r in lines if r["kind"] == "sample"]


def sidecar_nvml_log(samplers_dir: Path) -> list[float]:
    """The sidecar's GPU sampler over the whole recording (5 ms apart, not 200, to be quick), as a bench's window
    of it: samplers/nvml.log. The stamps of its sample lines, in order."""
    specs = samplers.build_specs(["nvidia-smi"], [1], gpu_interval_ms=5, environ={nvml.REPLAY_ENV: str(RECORDED)})
    sset = samplers.SamplerSet(specs, samplers_dir, 1 << 20)
    sset.start()
    deadline = time.monotonic() + 60
    while sset.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sset.stop()["nvidia-smi"].lines == 120
    return [ln.mono_s for ln in sampler_logs.read_log(samplers_dir / "nvml.log")]
