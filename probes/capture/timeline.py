"""What a capture's timeline is drawn from: the per-second series of the scrapes (latency, the engine's queue,
its KV cache and preemptions),
the samplers' panels (GPU, CPU, block I/O) cut to the window, the window's summary figures, and the notes and
events the bundle adds (GPU links under the class's minimum, XID events and PCIe replays NVML reported, cgroup
throttling and pressure, perf's span)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from probes.readers import kernel, metrics, nvml, nvml_log, procs, sampler_logs, samplers

LATENCY_SERIES = {
    "TTFT mean": "vllm:time_to_first_token_seconds",
    "ITL mean": "vllm:inter_token_latency_seconds",
    "e2e mean": "vllm:e2e_request_latency_seconds",
}
IGNORED_DEVICES = ("loop", "ram", "zram", "sr")


def latency_series(snaps: Sequence[metrics.Snapshot], t0: float) -> dict[str, list[tuple[float, float]]]:
    """Per scrape interval, the mean of each latency histogram's new observations (ms), at the interval's end."""
    out: dict[str, list[tuple[float, float]]] = {label: [] for label in LATENCY_SERIES}
    for a, b in itertools.pairwise(snaps):
        d = metrics.delta(a, b)
        for label, name in LATENCY_SERIES.items():
            hs = [h for h in metrics.find_histograms(d, name) if h.count > 0]
            count = sum(h.count for h in hs)
            if count:
                out[label].append((b.taken_monotonic_s - t0, 1000 * sum(h.sum_s for h in hs) / count))
    return out


def gauge_series(snaps: Sequence[metrics.Snapshot], t0: float) -> dict[str, list[tuple[float, float]]]:
    gs = metrics.GaugeSeries()
    for s in snaps:
        gs.add(s)
    out = {}
    for label, name in (("running", "vllm:num_requests_running"), ("waiting", "vllm:num_requests_waiting")):
        series = gs.series(name)
        out[label] = [(m - t0, v) for m, _u, v in series[0]] if series else []
    return out


def _kv_cache_points(snaps: Sequence[metrics.Snapshot]) -> list[tuple[float, float]]:
    """(monotonic_s, vllm:kv_cache_usage_perc) at each scrape: a fraction, 1 is full. Where several engines report
    it (data parallel), the first engine's series."""
    gs = metrics.GaugeSeries()
    for s in snaps:
        gs.add(s)
    series = gs.series("vllm:kv_cache_usage_perc")
    return [(m, v) for m, _u, v in series[0]] if series else []


def kv_cache_series(snaps: Sequence[metrics.Snapshot], t0: float) -> dict[str, list[tuple[float, float]]]:
    """The KV cache in use at each scrape, in percent, on the window's clock."""
    return {"KV cache used": [(m - t0, round(100 * v, 3)) for m, v in _kv_cache_points(snaps)]}


def preemption_events(snaps: Sequence[metrics.Snapshot], t0: float) -> list[dict[str, Any]]:
    """One event per scrape interval in which the engine preempted requests (vllm:num_preemptions_total went
    up), at the interval's end: the marks every panel shows, so a latency spike lines up with its preemptions."""
    events = []
    for a, b in itertools.pairwise(snaps):
        n = metrics.counter_sum(metrics.delta(a, b), metrics.PREEMPTIONS)
        if n:
            events.append({"t_s": round(b.taken_monotonic_s - t0, 3), "label": f"preemptions +{n:g}"})
    return events


def kv_cache_figures(snaps: Sequence[metrics.Snapshot]) -> dict[str, float | None]:
    """The KV cache in use over the window's scrapes (_kv_cache_points), as percent: mean and maximum."""
    values = [v for _m, v in _kv_cache_points(snaps)]
    if not values:
        return {"kv_cache_usage_mean_pct": None, "kv_cache_usage_max_pct": None}
    return {
        "kv_cache_usage_mean_pct": round(100 * sum(values) / len(values), 3),
        "kv_cache_usage_max_pct": round(100 * max(values), 3),
    }


def _rel(points: Sequence[tuple[float, float]], t0: float, t1: float) -> list[list[float]]:
    return [[round(m - t0, 3), v] for m, v in points if t0 - 1.0 <= m <= t1 + 1.0]


def sampler_panels(
    sdir: Path, results: Mapping[str, samplers.SamplerResult], found: Sequence[procs.VllmProcess], t0: float, t1: float
) -> dict[str, dict[str, Any]]:
    """GPU, CPU and I/O panels from the sampler logs."""

    def panel(title: str, unit: str, names: Sequence[str], source: str) -> dict[str, Any]:
        rs = [results[n] for n in names if n in results]
        failed = [r for r in rs if r.status == "failed"]
        if not rs:
            status, reason = "skipped", "samplers were not part of this capture"
        elif failed:
            status, reason = "failed", "; ".join(r.reason or "" for r in failed)
        elif all(r.status == "skipped" for r in rs):
            status, reason = "skipped", "; ".join(r.reason or "" for r in rs)
        else:
            status, reason = "successful", None
        return {"title": title, "unit": unit, "status": status, "reason": reason, "source": source, "series": {}}

    log = nvml_log.gpu_log(sdir)
    via = results["nvidia-smi"].via if "nvidia-smi" in results else ""
    source = f"{via or 'nvidia-smi -lms 200'} (samplers/{log.name if log else 'nvidia-smi.log'})"
    gpu = panel("GPU utilisation", "%", ["nvidia-smi"], source)
    if log is not None:
        for s in nvml_log.read_gpu_samples(log):
            if "utilization.gpu" in s.values:
                gpu["series"].setdefault(f"gpu{s.index} util %", []).append(
                    [round(s.mono_s - t0, 3), s.values["utilization.gpu"]]
                )
    cpu = panel("CPU", "%", ["vmstat", "pidstat"], "vmstat 1, pidstat -u -t on the vLLM PIDs (samplers/)")
    if (sdir / "vmstat.log").exists():
        vm = sampler_logs.parse_vmstat(sampler_logs.read_log(sdir / "vmstat.log"))
        for col in ("us", "sy", "wa"):
            cpu["series"][f"host {col}"] = _rel(vm.get(col, []), t0, t1)
    if (sdir / "pidstat.log").exists():
        roles = {p.pid: p.name for p in found}
        for row in sampler_logs.parse_pidstat(sampler_logs.read_log(sdir / "pidstat.log")):
            if row.tid is None and "%CPU" in row.values:
                label = f"pid {row.tgid} {roles.get(row.tgid, row.command)} %CPU"
                cpu["series"].setdefault(label, []).append([round(row.mono_s - t0, 3), row.values["%CPU"]])
    io = panel("Block I/O", "r/s, w/s", ["iostat"], "iostat -x 1 (samplers/iostat.log)")
    if (sdir / "iostat.log").exists():
        for dev, cols in sorted(sampler_logs.parse_iostat(sampler_logs.read_log(sdir / "iostat.log")).items()):
            if dev.startswith(IGNORED_DEVICES):
                continue
            for col in ("r/s", "w/s"):
                if col in cols:
                    io["series"][f"{dev} {col}"] = _rel(cols[col], t0, t1)
    return {"gpu": gpu, "cpu": cpu, "io": io}


def gpu_links(sdir: Path, pcie_min: tuple[int, int] | None) -> dict[str, Any]:
    """Each GPU's PCIe link while busy against the class's (the GPU sampler's log): flags and the judgement."""
    log = nvml_log.gpu_log(sdir)
    if pcie_min is None or log is None:
        why = "no class PCIe link given (--pcie-min-gen)" if pcie_min is None else "no GPU samples (NVML or nvidia-smi)"
        return {"judged": False, "why": why, "flags": [], "gpus": []}
    judged = sampler_logs.judge_pcie_links(nvml_log.read_gpu_samples(log), *pcie_min)
    return {
        "judged": True,
        "log": f"samplers/{log.name}",
        "class_min": {"gen": pcie_min[0], "width": pcie_min[1]},
        "busy_utilization_pct": sampler_logs.BUSY_UTILIZATION_PCT,
        "flags": [j.line for j in judged if j.line],
        "gpus": [asdict(j) for j in judged],
    }


def gpu_health(sdir: Path, t0: float, t1: float) -> dict[str, Any]:
    """The XID events and PCIe replay-counter rises NVML reported in the window (samplers/nvml.log), as flags and
    timeline events (nvml_log.judge_health); nothing to judge where the GPU sampler ran nvidia-smi or none."""
    log = sdir / nvml.LOG_NAME
    if not log.exists():
        why = "no NVML log (samplers/nvml.log): the GPU sampler ran nvidia-smi, or none (samplers.json says why)"
        return {"judged": False, "why": why, "flags": [], "events": [], "notes": []}
    health = nvml_log.judge_health(nvml_log.parse_nvml(sampler_logs.read_log(log)), t0, t1)
    said = ["GPU readings: REPLAYED NVML values (the test seam, probes/readers/nvml_replay.py), not this host's GPUs"]
    return {"log": f"samplers/{log.name}", **health, "notes": (said if health["replayed"] else []) + health["flags"]}


def _hist_ms(d: metrics.WindowDelta, name: str, attr: str) -> float | None:
    hs = [h for h in metrics.find_histograms(d, name) if h.count > 0]
    v = getattr(hs[0], attr) if len(hs) == 1 else None
    return None if v is None else round(1000 * v, 3)


def summary_figures(d: metrics.WindowDelta) -> dict[str, float | None]:
    return {
        "requests": metrics.counter_sum(d, metrics.REQUEST_SUCCESS),
        "prompt_tokens": metrics.counter_sum(d, metrics.PROMPT_TOKENS),
        "generation_tokens": metrics.counter_sum(d, metrics.GENERATION_TOKENS),
        "preemptions": metrics.counter_sum(d, metrics.PREEMPTIONS),
        "ttft_p50_ms": _hist_ms(d, "vllm:time_to_first_token_seconds", "p50_s"),
        "ttft_p99_ms": _hist_ms(d, "vllm:time_to_first_token_seconds", "p99_s"),
        "itl_p50_ms": _hist_ms(d, "vllm:inter_token_latency_seconds", "p50_s"),
        "itl_p99_ms": _hist_ms(d, "vllm:inter_token_latency_seconds", "p99_s"),
        "e2e_p50_ms": _hist_ms(d, "vllm:e2e_request_latency_seconds", "p50_s"),
        "e2e_p99_ms": _hist_ms(d, "vllm:e2e_request_latency_seconds", "p99_s"),
    }


def _limits_text(lv: Mapping[str, Any]) -> str:
    quota, limit = lv.get("cpu_quota_cpus"), lv.get("memory_limit_bytes")
    said = ([f"CPU quota {quota:g} CPUs"] if quota is not None else []) + (
        [f"memory limit {limit / 2**20:,.0f} MiB"] if limit is not None else []
    )
    return "; ".join(said) or "no limit"


def cgroup_notes(cg: Mapping[str, Any]) -> list[str]:
    """The serving container's cgroup over the window, in one line per concern (innermost level), then a line
    for every ancestor level that sets a limit (a CPU quota or a memory limit), naming it: on a GPU host the CPU
    quota is refdeploy.slice's, so the container's own level reads "throttled 0" while the slice throttles it."""
    levels = cg.get("levels") or []
    if not levels:
        return ["host state: no cgroup level could be read"]
    lv = levels[0]

    def s(level: Mapping[str, Any], key: str) -> str:
        v = level.get(key)
        return "n/a" if v is None else f"{v:.2f} s"

    def mib(key: str) -> str:
        v = lv.get(key)
        return "n/a" if v is None else f"{v / 2**20:,.0f} MiB"

    out = [
        f"cgroup {lv.get('path')} ({_limits_text(lv)}): CPU used {s(lv, 'cpu_usage_s')}, throttled "
        f"{lv.get('nr_throttled')} of {lv.get('nr_periods')} periods ({s(lv, 'throttled_s')})",
        f"cgroup memory: {mib('memory_usage_before_bytes')} -> {mib('memory_usage_after_bytes')}, peak "
        f"{mib('memory_max_usage_bytes')}, OOM kills +{lv.get('oom_kill_increase')}",
        f"cgroup pressure (stall time in the window): cpu some {s(lv, 'cpu_some_stall_s')}, memory some "
        f"{s(lv, 'memory_some_stall_s')}, io some {s(lv, 'io_some_stall_s')}",
    ]
    for up in levels[1:]:
        if up.get("cpu_quota_cpus") is None and up.get("memory_limit_bytes") is None:
            continue
        events = up.get("memory_events_increase") or {}
        raised = ", ".join(f"{k} +{v}" for k, v in events.items() if v and k in ("high", "max", "oom", "oom_kill"))
        out.append(
            f"cgroup ancestor {up.get('path')} ({_limits_text(up)}): throttled {up.get('nr_throttled')} of "
            f"{up.get('nr_periods')} periods ({s(up, 'throttled_s')}), memory events {raised or 'none'}, "
            f"pressure cpu some {s(up, 'cpu_some_stall_s')}, memory some {s(up, 'memory_some_stall_s')}"
        )
    if cg.get("reset_detected") or cg.get("levels_changed"):
        out.append("cgroup: the container's cgroup changed in the window (restart?): figures are partial")
    return out


# perf is said to have sampled "the window" when its span opens within this of the window's opening.
PERF_LAG_NOTE_S = 1.0


def _perf_name(pid: int, found: Sequence[procs.VllmProcess]) -> str:
    return next((f"{p.name} pid {p.pid}" for p in found if p.pid == pid), f"pid {pid}")


def perf_events(
    perf_res: Sequence[kernel.PerfResult], found: Sequence[procs.VllmProcess], t0: float, t1: float
) -> list[dict[str, Any]]:
    """One event per perf record, at the time it began sampling: the timeline shows what its samples cover."""
    out = []
    for r in sorted(perf_res, key=lambda r: r.recorded_mono_s or [t1]):
        if r.recorded_mono_s:
            a, b = (x - t0 for x in r.recorded_mono_s)
            out.append({"t_s": round(a, 3), "label": f"perf record {_perf_name(r.pid, found)}: {a:.1f} to {b:.1f} s"})
    return out


def perf_lag_notes(
    perf_res: Sequence[kernel.PerfResult], found: Sequence[procs.VllmProcess], t0: float, t1: float
) -> list[str]:
    """A note for each perf record that did not sample the window's start: its samples say nothing of that part."""
    notes = []
    for r in perf_res:
        if r.recorded_mono_s and r.recorded_mono_s[0] - t0 > PERF_LAG_NOTE_S:
            a, b = (x - t0 for x in r.recorded_mono_s)
            notes.append(
                f"perf record {_perf_name(r.pid, found)} sampled {a:.1f} to {b:.1f} s of the {t1 - t0:.1f} s window "
                "(it started late: the host was busy); its samples cover only that span"
            )
    return notes
