"""Energy per output token, per bench point, from NVML's energy counter over each measured run.

The sidecar's GPU sampler reads every GPU's total energy counter (nvmlDeviceGetTotalEnergyConsumption: millijoules
since the driver was last reloaded, NVML API Reference) every 200 ms into samplers/nvml.log, stamped on
CLOCK_MONOTONIC, the clock of each run's status.json (started_mono_s, ended_mono_s). For each measured run that
completed: the counter of each GPU, interpolated at the run's start and end between the samples either side
(probes/readers/nvml_log.py counter_at), summed over the GPUs; for a point, the sum over its runs divided by the output
tokens those runs' requests returned (the server's usage counts, as every other per-token figure here). Where the GPU
sampler ran nvidia-smi (no energy counter) or none, the report says so instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.readers import nvml, nvml_log
from probes.readers.sampler_logs import read_log
from serving.bench.health import point_cell


def _status(bench_dir: Path, run_id: str) -> Mapping[str, Any]:
    try:
        doc = json.loads((bench_dir / "runs" / run_id / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def energy_summary(bench_dir: Path, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each measured run's energy (J, every GPU the sidecar read) and each point's J per output token."""
    log = bench_dir / "samplers" / nvml.LOG_NAME
    if not log.exists():
        why = "no samplers/nvml.log: the GPU sampler read nvidia-smi (no energy counter) or nothing (no GPU)"
        return {"measured": False, "why": why, "points": [], "runs": []}
    parsed = nvml_log.parse_nvml(read_log(log))
    by_gpu = nvml_log.counter_series(parsed.samples, "energy_mj")
    per_run = []
    for r in runs:
        if r["phase"] != "measured" or r["status"] != "ok":
            continue
        st = _status(bench_dir, r["id"])
        a, b = st.get("started_mono_s"), st.get("ended_mono_s")
        seconds = None
        if isinstance(a, int | float) and isinstance(b, int | float):
            joules, why = nvml_log.energy_j(by_gpu, float(a), float(b))
            seconds = float(b) - float(a)  # the run's window, over which its energy was read
        else:
            joules, why = None, "no started_mono_s/ended_mono_s in its status.json"
        per_run.append({"id": r["id"], "point": r["point"], "energy_j": joules, "output_tokens": r["output_tokens"],
                        "seconds": seconds, "why": why})  # fmt: skip
    points = []
    for point in dict.fromkeys(x["point"] for x in per_run):
        mine = [x for x in per_run if x["point"] == point]
        read = [x for x in mine if x["energy_j"] is not None]
        energy, tokens = sum(x["energy_j"] for x in read), sum(int(x["output_tokens"] or 0) for x in read)
        points.append({
            "point": point, "runs": len(mine), "runs_read": len(read),
            "energy_j": energy if read else None, "output_tokens": tokens if read else None,
            "j_per_output_token": energy / tokens if read and tokens else None,
            "why": "; ".join(f"{x['id']}: {x['why']}" for x in mine if x["why"]),
        })  # fmt: skip
    return {
        "measured": True,
        "replayed": parsed.replayed,
        "gpus": sorted(by_gpu),
        "source": f"samplers/{nvml.LOG_NAME} (NVML total energy counter, mJ)",
        "points": points,
        "runs": per_run,
    }


def energy_lines(
    energy: Mapping[str, Any] | None, labels: Mapping[str, str], health: Mapping[str, Any] | None = None
) -> list[str]:
    """The report's lines: a row per point, J per output token first, and its GPU health (bench_health: FLAG where
    its runs saw an Xid or PCIe replays); `labels` names each point."""
    if not energy:
        return []
    if not energy["measured"]:
        return ["", f"energy per output token: not measured ({energy['why']})"]
    replayed = " [REPLAYED NVML values, not this host's GPUs]" if energy["replayed"] else ""
    gpus = ", ".join(str(g) for g in energy["gpus"]) or "none"
    lines = ["", f"energy per output token over the measured runs (GPUs {gpus}; {energy['source']}){replayed}:"]
    rows = [("point", "J/token", "energy J", "output tokens", "runs read", "GPU health")]
    for p in energy["points"]:
        jpt, joules = p["j_per_output_token"], p["energy_j"]
        rows.append((labels.get(p["point"], p["point"]), "-" if jpt is None else f"{jpt:.4g}",
                     "-" if joules is None else f"{joules:.1f}", str(p["output_tokens"] or "-"),
                     f"{p['runs_read']} of {p['runs']}", point_cell(health, p["point"])))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += [f"  not read: {p['why']}" for p in energy["points"] if p["why"]]
    return lines
