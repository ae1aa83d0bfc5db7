"""A Benchmark Report document's energy (serving/bench/br_export.py): its pooled runs' NVML energy, as the bench
summary's energy read it (serving/bench/energy.py), and its point's GPU health (serving/bench/health.py).

The schema (llm-d Benchmark Report v0.2.1, llmd-benchmark-report 0.2.1, schema_v0_2.py; the same in the JSON Schema
it ships, br_v0_2_json_schema.json) has one place for it: results.observability.components[], a
ComponentObservability whose component_label references scenario.stack[].metadata.label, and whose aggregate
(ResourceMetrics) holds power_consumption, a Statistics in Units.WATTS, the only power unit (base.py UNITS_POWER).
llm-d's own metrics processor fills the same field from DCGM_FI_DEV_POWER_USAGE, in Watts (metrics_processor.py).
Here each pooled run's mean power is its energy over its window (the NVML energy counter's rise at every GPU the
sidecar read, summed: the engine's power, not one GPU's) divided by the window's length; the statistics are across
the pooled runs, as the document's throughput (mean, stddev, min, median, max; no further percentiles between two
or three numbers). The schema has no field for energy or for joules per output token: those go with the evidence,
in scenario.load.native.config (free content), as "energy". Without NVML energy (the CPU profile, the nvidia-smi
fallback, a run read outside the log) the field is left out, as the schema allows (it is optional), and the
document's notes say why.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from llmd_benchmark_report.base import Units

from probes.readers.nvml import LOG_NAME
from serving.bench.health import export_notes
from serving.bench.summary_schema import BenchSummary

DEFINITION = (
    "per pooled run, the NVML total energy counter's rise over the run's window (status.json started_mono_s to "
    "ended_mono_s), summed over every GPU the sidecar read, divided by the window's length: the engine's mean power "
    "(W); statistics across the pooled runs (serving/bench/energy.py, serving/bench/br_energy.py)"
)


def _watts(values: Sequence[float]) -> dict[str, Any]:
    xs = sorted(values)
    out: dict[str, Any] = {"units": Units.WATTS, "mean": statistics.fmean(xs), "min": xs[0], "max": xs[-1]}
    if len(xs) > 1:
        out["stddev"] = statistics.stdev(xs)
    out["p50"] = statistics.median(xs)
    return out


def point_energy(summary: BenchSummary, point: str, pooled: Sequence[str], label: str) -> dict[str, Any]:
    """For point's document, pooling the runs `pooled` (ids), its engine component labelled `label`: "results"
    (its observability, or nothing), "notes" (why power is absent, or what it is; the point's GPU health mark) and
    "evidence" (energy and J per output token)."""
    energy = summary.energy or {}
    health = export_notes(summary.gpu_health, point)
    if not energy.get("measured"):
        why = energy.get("why") or "the bench summary has no energy (a bench from before it was read)"
        return {"results": {}, "notes": [f"power_consumption left out: energy not measured ({why})", *health],
                "evidence": {"measured": False, "why": why}}  # fmt: skip
    by_run = {r["id"]: r for r in energy["runs"]}
    read = [by_run[r] for r in pooled if r in by_run and by_run[r]["energy_j"] is not None and by_run[r].get("seconds")]
    missing = [f"{r}: {(by_run.get(r) or {}).get('why') or 'not read'}" for r in pooled if by_run.get(r) not in read]
    replayed = " [REPLAYED NVML values, not this host's GPUs]" if energy.get("replayed") else ""
    if not read:
        why = "; ".join(missing)
        return {"results": {}, "notes": [f"power_consumption left out: no pooled run's energy was read ({why})",
                                         *health],
                "evidence": {"measured": False, "why": why}}  # fmt: skip
    joules, tokens = sum(r["energy_j"] for r in read), sum(int(r["output_tokens"] or 0) for r in read)
    watts = [r["energy_j"] / r["seconds"] for r in read]
    runs_read = [
        {"id": r["id"], "energy_j": r["energy_j"], "seconds": r["seconds"], "mean_power_w": w,
         "output_tokens": r["output_tokens"]}
        for r, w in zip(read, watts, strict=True)
    ]  # fmt: skip
    evidence = {
        "measured": True,
        "source": f"{energy['source']}{replayed}",
        "gpus": energy["gpus"],
        "definition": DEFINITION,
        "runs_read": runs_read,
        "energy_j": joules,
        "output_tokens": tokens,
        "j_per_output_token": joules / tokens if tokens else None,
        "not_read": missing,
    }
    component = {
        "component_label": label,
        "aggregate": {"power_consumption": _watts(watts)},
        "raw_data_path": f"../samplers/{LOG_NAME}",  # relative to the document, as the evidence's bench_dir is
    }
    note = (f"power_consumption: the engine's mean power per pooled run from NVML's energy counter, every GPU "
            f"summed, over {len(read)} of {len(pooled)} pooled runs{replayed}"
            + (f" (not read: {'; '.join(missing)})" if missing else ""))  # fmt: skip
    return {"results": {"observability": {"components": [component]}}, "notes": [note, *health], "evidence": evidence}
