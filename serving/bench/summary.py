"""A bench's figures: summary.json's content (`build_summary`), every one computed from the bench directory's raw
artifacts as `make bench` leaves it (serving/bench/report.py writes it and the reports made from it): each run
read back and each point pooled (serving/bench/runs.py), the knee search's runs, the GPUs' links and health, the
page cache, the server's cgroups, the energy and the memory at decode.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from probes.capture.timeline import cgroup_notes
from probes.readers.cgroup_delta import cgroup_delta
from probes.readers.cgroups import snapshot_from_json
from probes.readers.nvml_log import gpu_log, read_gpu_samples
from probes.readers.sampler_logs import judge_pcie_links
from serving.bench import energy as bench_energy
from serving.bench import health as bench_health
from serving.bench import protocol as bench
from serving.bench import reference as bench_reference
from serving.bench import runs as bench_runs
from serving.bench.stats import describe
from serving.config.workload import intends_prefix_hits
from serving.errors import InputError
from serving.record import memory_phases

# A bench whose every run completed but none of whose measured runs was valid (each left out of its point's pool
# by the validity rules: serving/bench/runs.py summarize_run) measured nothing: not "ok", and not "failed" either
# (every run ran), so that the report, the page and the exit say which.
INVALID = "invalid"


def nothing_valid(points: Sequence[Mapping[str, Any]]) -> str:
    """Why the bench measured nothing valid, naming each measured run left out and its first flag; "" where a point
    pooled at least one valid run (or no point had a measured run: a knee search's own figures are judged apart)."""
    if not any(p["runs"] for p in points) or any(p["runs_valid"] for p in points):
        return ""
    left_out = [x for p in points for x in p["left_out"]]
    return f"every measured run was left out ({len(left_out)}), so no figure stands: " + "; ".join(left_out)


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def build_summary(bench_dir: Path) -> dict[str, Any]:
    """Every figure of the bench, from its raw artifacts."""
    manifest = load_json(bench_dir / "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("kind") != "bench":
        raise InputError(f"{bench_dir}: no bench manifest.json here (is this a `make bench` directory?)")
    workload = manifest["workload"]
    client = load_json(bench_dir / "client.json")
    runs: list[dict[str, Any]] = []
    obs: dict[str, list[bench_runs.RequestObs]] = {}
    # A knee search's runs were decided as it went: the client lists them after the plan's warm-up.
    planned = list(manifest["runs"]) + list((client or {}).get("search_runs") or [])
    for run in planned:
        d = bench_dir / "runs" / run["id"]
        status = load_json(d / "status.json") or {
            "status": "not run",
            "reason": "no status.json: the client stopped first",
        }
        result = load_json(d / bench.RESULT_FILE)
        summary = bench_runs.summarize_run(
            run,
            status,
            result,
            _text(d / "metrics-before.txt"),
            _text(d / "metrics-after.txt"),
            workload,
            manifest.get("workload_data"),
        )
        runs.append(summary)
        obs[run["id"]] = bench_runs.parse_requests(result) if isinstance(result, dict) else []
    point_ids = list(
        dict.fromkeys(r["point"] for r in planned if r["phase"] == "measured" or not manifest.get("search"))
    )
    points = [bench_runs.pool_point(p, runs, obs) for p in point_ids]
    health = bench_health.gpu_health(bench_dir, runs, points)  # each run's Xids, PCIe replays; marks its point
    failed = [r for r in runs if r["status"] != "ok"]
    measured = [r for r in runs if r["phase"] == "measured"]
    status = "failed" if failed or not isinstance(client, dict) or client.get("status") != "ok" else "ok"
    reason = ""
    if status == "failed":
        reason = (client or {}).get("reason") or (failed[0]["flags"][0] if failed and failed[0]["flags"] else "")
        reason = reason or "the client left no client.json (it was stopped, or never started)"
    elif nothing := nothing_valid(points):
        status, reason = INVALID, nothing
    resets = {
        (load_json(bench_dir / "runs" / r["id"] / "status.json") or {}).get("prefix_cache_reset", {}).get("status")
        for r in planned
    }
    mode = workload.get("prefix_cache")
    if mode == "fresh":
        cache_note = "each run's requests carry their own cache_salt" + (
            ", cache reset before each run" if resets == {200} else " (/reset_prefix_cache not offered by the server)"
        )
    else:
        cache_note = "prefix caching off on the server"
    hits = sum(((r["server"] or {}).get("prefix_cache_hits") or 0) for r in measured)
    queries = sum(((r["server"] or {}).get("prefix_cache_queries") or 0) for r in measured)
    intended = intends_prefix_hits(workload, manifest.get("workload_data"))
    if intended:
        shared = (
            "each turn resends its conversation's history"
            if workload.get("dataset") == "conversations"
            else "the prompts share prefixes"
        )
        cache_note = (
            f"HITS INTENDED: {shared}, so the cache serving them is what this workload measures; "
            + cache_note
            + ", so every hit came from the run's own requests"
        )
    return {
        "schema_version": bench.SCHEMA_VERSION,
        "status": status,
        "reason": reason,
        "bench_dir": str(bench_dir),
        "manifest": manifest,
        "client": client,
        "prefix_cache": {
            "mode": mode,
            "note": cache_note,
            "hits_intended": intended,
            "hits_in_measured_runs": hits,
            "queries_in_measured_runs": queries,
            "hit_rate": hits / queries if queries else None,
        },
        "page_cache": page_cache_summary(workload, runs),
        "grouped_streaming": any(r["grouped_streaming"] for r in measured),
        "output_length_mismatch": [r["id"] for r in runs if any("output length mismatch" in f for f in r["flags"])],
        "runs": runs,
        "points": points,
        "reference": (manifest.get("gpu_class") or {}).get("reference"),
        "reference_beside_measured": bench_reference.reference_beside_measured(
            (manifest.get("gpu_class") or {}).get("reference"), points
        ),
        "weight_read_bound": bench_reference.weight_read_bound(manifest.get("gpu_class")),
        "gpu_links": gpu_links(bench_dir, manifest.get("gpu_class")),
        "energy": bench_energy.energy_summary(bench_dir, runs),
        "gpu_health": health,
        "server_cgroup": server_cgroup(bench_dir),
        "memory_at_decode": memory_phases.bench_lines(bench_dir),
        "knee": knee_summary(bench_dir, manifest, runs, obs),
    }


KNEE_SVG = "knee.svg"


def _p90(xs: Sequence[float | None]) -> float | None:
    vals = sorted(float(x) for x in xs if x is not None)
    if not vals:
        return None
    return statistics.quantiles(vals, n=10, method="inclusive")[-1] if len(vals) > 1 else vals[0]


def knee_summary(
    bench_dir: Path,
    manifest: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    obs: Mapping[str, Sequence[bench_runs.RequestObs]],
) -> dict[str, Any] | None:
    """A knee search's result (search.json, written by the client as serving/standalone/knee.py decided), each measured
    run as the figure draws it, and the runs the search counted that this report's checks leave out (the client judges
    a run by its own record; the report adds the server's side: a burst, a restart, hits)."""
    search = manifest.get("search")
    if not search:
        return None
    result = load_json(bench_dir / "search.json")
    plotted = []
    for r in runs:
        if r["phase"] != "measured":
            continue
        ok = [o for o in obs.get(r["id"], []) if o.success]
        slo = r.get("slo") or {}
        plotted.append(
            {
                "id": r["id"],
                "load": r["request_rate"] if search["kind"] == "rate" else r["max_concurrency"],
                "share_met": slo.get("share_met"),
                "goodput_req_s": slo.get("goodput_req_s"),
                "ttft_p50_ms": r["ttft_ms"]["median"],
                "ttft_p90_ms": _p90([o.ttft_s * 1000 if o.ttft_s is not None else None for o in ok]),
                "tpot_p50_ms": r["tpot_ms"]["median"],
                "tpot_p90_ms": _p90([o.tpot_s * 1000 if o.tpot_s is not None else None for o in ok]),
                "valid": bool(r["valid"]),
                "flags": r["flags"],
            }
        )
    counted = {str(m.get("note", "")).split(" ")[0] for m in (result or {}).get("measurements") or [] if m.get("valid")}
    left_out = [f"{k['id']}: {k['flags'][0]}" for k in plotted if k["id"] in counted and not k["valid"] and k["flags"]]
    unit = "req/s" if search["kind"] == "rate" else "concurrent requests"
    return {"kind": search["kind"], "unit": unit, "result": result, "runs": plotted, "left_out_here": left_out,
            "search": search}  # fmt: skip


def gpu_links(bench_dir: Path, gpu_class: Mapping[str, Any] | None) -> dict[str, Any]:
    """Each GPU's PCIe link while busy over the bench (the sidecar's GPU sampler lines of its window: NVML's, else
    nvidia-smi's) against the class's generation and width; links drop at idle, so only busy samples are judged
    (seed 000 §12)."""
    log = gpu_log(bench_dir / "samplers")
    if not gpu_class or gpu_class.get("pcie_min_gen") is None or log is None:
        return {"judged": False, "flags": []}
    gen, width = int(gpu_class["pcie_min_gen"]), int(gpu_class.get("pcie_min_width") or 16)
    judged = judge_pcie_links(read_gpu_samples(log), gen, width)
    return {
        "judged": True,
        "log": f"samplers/{log.name}",
        "class_min": {"gen": gen, "width": width},
        "flags": [j.line for j in judged if j.line],
        "gpus": [{"gpu": j.gpu, "busy_samples": j.busy_samples, "below_samples": j.below_samples} for j in judged],
    }


CGROUP_FILES = ("cgroup-before.json", "cgroup-after.json")


def write_cgroup_readings(bench_dir: Path, readings: Mapping[str, Any] | None) -> None:
    """The probe container's readings of the server's cgroups before and after the bench (`python -m
    probes.readers.cgroups`' stdout), each into its file; one that did not read, as {"error": ...}."""
    for name, key in zip(CGROUP_FILES, ("before", "after"), strict=True):
        r = (readings or {}).get(key) or {}
        try:
            doc = json.loads(str(r.get("stdout") or ""))
        except ValueError:
            said = str(r.get("stderr") or "").strip().splitlines()[-1:] or ["no output"]
            doc = {"error": f"the cgroup reading exited {r.get('rc')}: {said[0]}"}
        (bench_dir / name).write_text(json.dumps(doc, indent=2) + "\n")


def server_cgroup(bench_dir: Path) -> list[str]:
    """The server's cgroup over the bench, a line per concern, then a line for every ancestor level that sets a
    limit, naming it (probes/capture/timeline.py cgroup_notes, as the capture's summary says it)."""
    docs = [load_json(bench_dir / n) for n in CGROUP_FILES]
    if any(d is None for d in docs):
        return ["server cgroup: not read (no cgroup-before.json / cgroup-after.json: a bench made before they were)"]
    errors = [d["error"] for d in docs if isinstance(d, dict) and "error" in d]
    if errors:
        return [f"server cgroup: not read: {errors[0]}"]
    try:
        before, after = (snapshot_from_json(d) for d in docs)
        delta = asdict(cgroup_delta(before, after))
    except (KeyError, TypeError, ValueError) as e:
        return [f"server cgroup: the readings do not parse ({type(e).__name__}: {e})"]
    return cgroup_notes(delta)


PAGE_CACHE_HOW = {
    "cold": "evicted before each run (posix_fadvise DONTNEED on each served file; nothing else on the host)",
    "warm": "read in before each run",
    "as-found": "left as found",
}


def page_cache_summary(workload: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The served files' page-cache state over the bench: asked for, resident at the start of each measured run,
    and what the engine processes read over them (seed 000 §11: save residency and actual read volume)."""
    measured = [r["page_cache"] for r in runs if r["phase"] == "measured" and r.get("page_cache")]
    state = workload.get("page_cache", "as-found")
    reads = [c["engine_read_bytes"] for c in measured if c.get("engine_read_bytes") is not None]
    rchars = [c["engine_rchar"] for c in measured if c.get("engine_rchar") is not None]
    return {
        "state": state,
        "how": PAGE_CACHE_HOW.get(state, state),
        "recorded": bool(measured),
        "files": measured[0].get("files") if measured else None,
        "size_bytes": measured[0].get("size_bytes") if measured else None,
        "resident_before": describe([c.get("resident_before") for c in measured]),
        "resident_after": describe([c.get("resident_after") for c in measured]),
        "engine_read_bytes": sum(reads) if reads else None,
        "engine_rchar": sum(rchars) if rchars else None,
        "engine_pids_unreadable": sorted({p for c in measured for p in c.get("engine_pids_unreadable") or []}),
    }
