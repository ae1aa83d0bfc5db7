"""The GPU side, from the GPU sampler (NVML or nvidia-smi every 200 ms; seed 000 §5, §9, §12): a GPU idle while a
worker thread is saturated (launch-bound: the CPU cannot feed it), a PCIe link below the class's while busy (links
train down at idle: read them under load), clock-event reasons that slow the clocks (power cap, thermal).

utilization.gpu is the share of the sample in which a kernel ran, not of the device's capacity (nvidia-smi's
definitions): a GPU under LAUNCH_BOUND_UTIL while a worker thread runs at least threads.BUSY_PCT of a CPU is
consistent with launch-bound execution; it explains the idle share. A slowing clock reason in at least
CLOCK_SHARE of the busy samples is reported with its name.
"""

from __future__ import annotations

import statistics

from probes.readers import sampler_logs
from serving.diagnose.evidence import Evidence, thread_rows
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out
from serving.diagnose.rules.threads import BUSY_PCT

SEED = "000 §5, §9, §12"
LAUNCH_BOUND_UTIL = 50.0
CLOCK_SHARE = 0.1
SLOWING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def run(ev: Evidence) -> list[Finding]:
    if ev.gpu is None or not ev.gpu.value:
        raise CannotRun("no GPU samples in the window (no GPU sampler log: a CPU profile, or the sampler skipped)")
    samples = list(ev.gpu.value)
    out: list[Finding] = []
    util = statistics.median(s.values.get("utilization.gpu", 0.0) for s in samples)
    workers = [t for t in thread_rows(ev) if t.role == "worker" and t.median >= BUSY_PCT]
    figures = [fig("GPU utilization, median over GPUs and samples", ev.gpu, "%", value=util)]
    if workers and util < LAUNCH_BOUND_UTIL:
        t = workers[0]
        figures.append(fig(f"worker thread {t.name} CPU median", ev.threads, "% of one CPU", value=t.median))
        out.append(Finding(
            rule="gpu", seed=SEED, verdict="consistent with",
            title=f"launch-bound: the GPUs ran kernels {util:.0f}% of the time while a worker thread ran "
            f"{t.median:.0f}% of a CPU",
            symptom="the GPU waits for the CPU to prepare and launch its work",
            explains=round(1.0 - util / 100.0, 3), figures=figures,
            not_established="what the thread does (the profiler's trace: the gap before each kernel)",
            next_steps=["make profile (a torch trace of a few requests), then make hypothesis on the launch path"],
        ))  # fmt: skip
    if ev.pcie_min is not None:
        for j in sampler_logs.judge_pcie_links(samples, *ev.pcie_min):
            if j.line:
                out.append(Finding(
                    rule="gpu", seed=SEED, verdict="consistent with",
                    title=f"GPU {j.gpu}'s PCIe link ran below the class's while busy",
                    symptom=j.line, explains=round(j.below_samples / max(1, j.busy_samples), 3) * 0.5,
                    figures=[fig(f"GPU {j.gpu} link generation while busy, worst", ev.gpu, value=j.worst_gen),
                             fig(f"GPU {j.gpu} link width while busy, worst", ev.gpu, value=j.worst_width)],
                    not_established="that the link limits the requests: transfers may overlap compute",
                    next_steps=["lspci -vv (LnkSta) under load; reseat or move the card, then make compare"],
                ))  # fmt: skip
    busy = [s for s in samples if s.values.get("utilization.gpu", 0.0) >= sampler_logs.BUSY_UTILIZATION_PCT]
    reasons: dict[str, int] = {}
    for s in busy:
        for name in sampler_logs.clock_event_names(s.values.get("clocks_event_reasons.active", 0.0)):
            reasons[name] = reasons.get(name, 0) + 1
    for name, n in sorted(reasons.items()):
        if name in SLOWING and n >= CLOCK_SHARE * len(busy):
            out.append(Finding(
                rule="gpu", seed=SEED, verdict="consistent with",
                title=f"the GPU clocks were held down by {name}",
                symptom=f"{name} in {n} of {len(busy)} busy samples", explains=round(n / len(busy), 3) * 0.5,
                figures=[fig(f"busy samples with {name}", ev.gpu, value=n)],
                not_established="how much slower the kernels ran (clocks.sm in the samples says by how much)",
                next_steps=["nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE under load"],
            ))  # fmt: skip
    if not out:
        out.append(ruled_out(
            rule="gpu", seed=SEED,
            title="no GPU-side sign: not launch-bound, links and clocks as the class's",
            symptom=f"GPU utilization {util:.0f}% (median)", figures=figures,
            not_established="what runs inside the GPU (the profiler's trace)"
        ))  # fmt: skip
    return out


RULE = Rule("gpu", SEED, run)
