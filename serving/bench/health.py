"""The GPU's health over each bench point: the XID events and PCIe replay-counter rises NVML reported in the window
of each of the point's runs (warm-ups included), judged by the capture's own judge (probes/readers/nvml_log.py
judge_health) over samplers/nvml.log, each flag in the capture's words, prefixed with the run it fell in (its times
from that run's start). A point with a flagged run is marked: its figures were taken while the GPU reported a
critical error (an Xid), or while its PCIe link resent packets. Nothing is judged where the GPU sampler ran
nvidia-smi or none (no NVML log), and a check NVML could not make (a call not supported) is said, not passed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.readers import nvml, nvml_log
from probes.readers.sampler_logs import read_log

# The NVML calls without which a check is not made (probes/readers/nvml.py logs each failure once per GPU and call).
_XID_CALLS = ("nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2")
_REPLAY_CALLS = ("nvmlDeviceGetPcieReplayCounter",)
CRITICAL = "its figures were taken while the GPU reported a critical error"
REPLAYS = "its figures were taken while the GPU's PCIe link resent packets"
NO_LOG = "no samplers/nvml.log: the GPU sampler read nvidia-smi (no XID events, no replay counter) or nothing (no GPU)"


def _window(bench_dir: Path, run_id: str) -> tuple[float, float] | None:
    try:
        st = json.loads((bench_dir / "runs" / run_id / "status.json").read_text())
    except (OSError, ValueError):
        return None
    a, b = (st.get("started_mono_s"), st.get("ended_mono_s")) if isinstance(st, dict) else (None, None)
    return (float(a), float(b)) if isinstance(a, int | float) and isinstance(b, int | float) else None


def _unchecked(log: nvml_log.NvmlLog) -> dict[str, list[str]]:
    """The checks NVML could not make ("xid", "replays"), each with the failures that stopped it."""
    out: dict[str, list[str]] = {}
    for _t, gpu, call, error in log.errors:
        if call in _XID_CALLS:
            out.setdefault("xid", []).append(f"GPU {gpu}: {call} failed ({error}): XID events not watched")
        elif call in _REPLAY_CALLS:
            out.setdefault("replays", []).append(f"GPU {gpu}: {call} failed ({error}): PCIe replays not counted")
    return out


def gpu_health(bench_dir: Path, runs: Sequence[Mapping[str, Any]], points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each run's XID events and PCIe replays, and each point's mark; sets each of `points`' "gpu_health" (the
    summary's points: their figures are the ones marked)."""
    log_path = bench_dir / "samplers" / nvml.LOG_NAME
    if not log_path.exists():
        for p in points:
            p["gpu_health"] = {"judged": False, "flagged": False, "mark": ""}
        return {"judged": False, "why": NO_LOG, "flags": [], "points": {}, "runs": {}}
    log = nvml_log.parse_nvml(read_log(log_path))
    judged: dict[str, dict[str, Any]] = {}
    not_judged: list[str] = []
    for r in runs:
        window = _window(bench_dir, r["id"])
        if window is None:
            not_judged.append(f"{r['id']} (status {r['status']}): no started_mono_s/ended_mono_s in its status.json")
            continue
        h = nvml_log.judge_health(log, *window)
        judged[r["id"]] = {"point": r["point"], "phase": r["phase"], "xids": h["xids"],
                           "pcie_replays": h["pcie_replays"], "flags": h["flags"]}  # fmt: skip
    by_point: dict[str, dict[str, Any]] = {}
    for pid in dict.fromkeys(r["point"] for r in runs):
        mine = {rid: j for rid, j in judged.items() if j["point"] == pid}
        xids = [{"run": rid, "gpu": x["gpu"], "xid": x["xid"]} for rid, j in mine.items() for x in j["xids"]]
        rises = [{"run": rid, "gpu": int(g), "increase": v["increase"]}
                 for rid, j in mine.items() for g, v in j["pcie_replays"].items() if v["increase"]]  # fmt: skip
        said = [f"Xid {x['xid']} on GPU {'?' if x['gpu'] is None else x['gpu']} ({x['run']})" for x in xids]
        said += [f"PCIe replay counter +{x['increase']} on GPU {x['gpu']} ({x['run']})" for x in rises]
        why = CRITICAL if xids else REPLAYS if rises else ""
        by_point[pid] = {
            "judged": bool(mine), "flagged": bool(why), "critical_error": bool(xids), "xids": xids,
            "pcie_replay_rises": rises, "mark": f"{why}: {'; '.join(said)}" if why else "",
            "runs_judged": list(mine), "runs_flagged": [rid for rid, j in mine.items() if j["flags"]],
        }  # fmt: skip
    for p in points:
        p["gpu_health"] = by_point.get(p["point"], {"judged": False, "flagged": False, "mark": ""})
    return {
        "judged": True,
        "log": f"samplers/{nvml.LOG_NAME}",
        "replayed": log.replayed,
        "unchecked": _unchecked(log),
        "not_judged": not_judged,
        "runs": judged,
        "points": by_point,
        "flags": [f"{rid}: {f}" for rid, j in judged.items() for f in j["flags"]],
    }


def point_cell(health: Mapping[str, Any] | None, point: str) -> str:
    """A point's GPU health in one table cell: what its runs saw, ok, or "-" (not judged)."""
    p = ((health or {}).get("points") or {}).get(point) or {}
    if not p.get("judged") or health is None:
        return "-"
    if p["flagged"]:
        seen = sorted({f"Xid {x['xid']}" for x in p["xids"]}) + (["PCIe replays"] if p["pcie_replay_rises"] else [])
        return "FLAG " + ", ".join(seen)
    unread = [k for k in ("xid", "replays") if k in health["unchecked"]]
    return f"ok ({' and '.join(unread)} not read)" if unread else "ok"


def health_lines(health: Mapping[str, Any] | None, labels: Mapping[str, str]) -> list[str]:
    """The report's lines: per point its mark (or that its runs saw neither), then each run's flags."""
    if not health:
        return []
    if not health["judged"]:
        return ["", f"GPU health (XID events, PCIe replays): not judged ({health['why']})"]
    replayed = " [REPLAYED NVML values, not this host's GPUs]" if health["replayed"] else ""
    lines = ["", f"GPU health over each point's runs ({health['log']}: NVML XID events and PCIe replay counter in each "
             f"run's window, times from its start){replayed}:"]  # fmt: skip
    for pid, p in health["points"].items():
        label = labels.get(pid, pid)
        if not p["judged"]:
            lines.append(f"  {label}: not judged (no run with a window)")
        elif p["flagged"]:
            lines.append(f"  FLAGGED {label}: {p['mark']}")
            lines += [f"    {rid}: {f}" for rid in p["runs_flagged"] for f in health["runs"][rid]["flags"]]
        else:
            saw = [
                ("XID events not watched" if "xid" in health["unchecked"] else "no XID event"),
                ("PCIe replays not counted" if "replays" in health["unchecked"] else "no PCIe replay-counter rise"),
            ]
            lines.append(f"  {label}: {' and '.join(saw)} in its {len(p['runs_judged'])} run(s)")
    lines += [f"  not judged: {x}" for x in health["not_judged"]]
    lines += [f"  not checked: {x}" for xs in health["unchecked"].values() for x in xs]
    return lines


def export_notes(health: Mapping[str, Any] | None, point: str) -> list[str]:
    """A Benchmark Report document's note on its point's GPU health, where its runs saw an Xid or PCIe replays."""
    p = ((health or {}).get("points") or {}).get(point) or {}
    if not p.get("flagged"):
        return []
    return [f"GPU health FLAGGED ({(health or {}).get('log')}): {p['mark']} (the flags: report.txt, GPU health)"]
