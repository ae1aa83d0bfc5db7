"""A bench's report: summary.json (every figure), report.txt (for an incident) and report.html (plots).

Reads a bench directory as `make bench` leaves it (runs/<host>/<ts>/bench/): manifest.json, the client's
plan.json and client.json, runs/<id>/ (status.json, result.json, the /metrics pair), gauges.log and the sidecar
samplers' window in samplers/. Every figure is computed here from those raw artifacts (serving/bench.py), so
each one can be traced back to the file it came from.

The HTML page is one file of inline SVG, no scripts, drawn by serving/plots.py in the capture timeline's
colours: latency CDFs per run, chunk (or token) intervals over time, concurrency scaling, and the samplers' and
gauges' series on the bench's timeline with the runs marked.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from probes.cgroup_delta import cgroup_delta
from probes.cgroups import snapshot_from_json
from probes.nvml_log import gpu_log, read_gpu_samples
from probes.samplers import judge_pcie_links, parse_vmstat, read_log
from probes.timeline import cgroup_notes
from serving import bench, bench_energy, bench_health, bench_runs, bench_trace, knee_runs, memory_phases
from serving.errors import InputError
from serving.plots import BACKGROUND, PANEL_COLOURS, TEXT, escape, xy_panel
from serving.stats import describe
from serving.workload import intends_prefix_hits

SUMMARY_JSON = "summary.json"
REPORT_TXT = "report.txt"
REPORT_HTML = "report.html"


def _load(path: Path) -> Any:
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
    manifest = _load(bench_dir / "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("kind") != "bench":
        raise InputError(f"{bench_dir}: no bench manifest.json here (is this a `make bench` directory?)")
    workload = manifest["workload"]
    client = _load(bench_dir / "client.json")
    runs: list[dict[str, Any]] = []
    obs: dict[str, list[bench_runs.RequestObs]] = {}
    # A knee search's runs were decided as it went: the client lists them after the plan's warm-up.
    planned = list(manifest["runs"]) + list((client or {}).get("search_runs") or [])
    for run in planned:
        d = bench_dir / "runs" / run["id"]
        status = _load(d / "status.json") or {"status": "not run", "reason": "no status.json: the client stopped first"}
        result = _load(d / bench.RESULT_FILE)
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
    resets = {
        (_load(bench_dir / "runs" / r["id"] / "status.json") or {}).get("prefix_cache_reset", {}).get("status")
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
        "reference_beside_measured": bench.reference_beside_measured(
            (manifest.get("gpu_class") or {}).get("reference"), points
        ),
        "weight_read_bound": bench.weight_read_bound(manifest.get("gpu_class")),
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
    """A knee search's result (search.json, written by the client as serving/knee.py decided), each measured run
    as the figure draws it, and the runs the search counted that this report's checks leave out (the client judges
    a run by its own record; the report adds the server's side: a burst, a restart, hits)."""
    search = manifest.get("search")
    if not search:
        return None
    result = _load(bench_dir / "search.json")
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


def _as_point(x: Any) -> str:
    """A load as its point is named: 64, not 64.0 (the search bisects in floats)."""
    return f"{x:g}" if isinstance(x, int | float) else str(x)


def _knee_lines(s: Mapping[str, Any]) -> list[str]:
    k = s.get("knee")
    if not k:
        return []
    result = k["result"] or {}
    lines = [
        "",
        f"knee search (SEARCH={k['kind']}): {result.get('summary') or 'no search.json: the search did not end'}",
    ]
    if result.get("why"):
        lines.append(f"  why it stopped: {result['why']}")
    lines += knee_runs.report_lines(result, k.get("search"))
    for b in result.get("bracket_loads") or []:
        share = b.get("share_met") or {}
        good = b.get("goodput_req_s") or {}
        lines.append(
            f"  bracket {_as_point(b.get('load'))} {k['unit']}: {b.get('verdict')} ({b.get('reason')}); "
            "share meeting the SLO "
            f"{_f(share.get('median'))} [{_f(share.get('min'))}-{_f(share.get('max'))}], goodput "
            f"{_f(good.get('median'))} [{_f(good.get('min'))}-{_f(good.get('max'))}] req/s over {share.get('n')} "
            "valid run(s)"
        )
    for note in result.get("notes") or []:
        lines.append(f"  {note}")
    if k["left_out_here"]:
        lines.append("  runs the search counted that this report's checks leave out (see runs below):")
        lines += [f"    {x}" for x in k["left_out_here"]]
    lines.append(f"  figure: {KNEE_SVG} (latency and goodput against load, the knee and the bracket marked)")
    return lines


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


# --- text -----------------------------------------------------------------------------------------------------


def _f(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, int | float):
        return f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:.0f}"
    return str(x)


def _stat(d: Mapping[str, Any] | None) -> str:
    if not d or not d.get("n"):
        return "-"
    return f"{_f(d['median'])} [{_f(d['min'])}-{_f(d['max'])}] n={d['n']}"


def _point_label(p: Mapping[str, Any]) -> str:
    if p.get("point") == "trace":
        return "trace replay"
    if p.get("request_rate") is not None:
        return f"rate {p['request_rate']:g} req/s"
    return f"concurrency {p.get('max_concurrency')}"


CGROUP_FILES = ("cgroup-before.json", "cgroup-after.json")


def write_cgroup_readings(bench_dir: Path, readings: Mapping[str, Any] | None) -> None:
    """The probe container's readings of the server's cgroups before and after the bench (`python -m
    probes.cgroups`' stdout), each into its file; one that did not read, as {"error": ...}."""
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
    limit, naming it (probes/timeline.py cgroup_notes, as the capture's summary says it)."""
    docs = [_load(bench_dir / n) for n in CGROUP_FILES]
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


def render_text(s: Mapping[str, Any]) -> str:
    labels, health = {p["point"]: _point_label(p) for p in s["points"]}, s.get("gpu_health")
    lines = _header_lines(s) + _streaming_lines(s) + _knee_lines(s) + bench_health.health_lines(health, labels)
    lines += _point_tables(s) + _turn_lines(s) + bench_energy.energy_lines(s.get("energy"), labels, health)
    lines += _run_lines(s)
    lines += _class_lines(s)
    cg = s.get("server_cgroup") or []
    if cg:
        lines += ["", "the server's cgroups over the bench (cgroup-before.json, cgroup-after.json):"]
        lines += [f"  {ln}" for ln in cg]
    mem = s.get("memory_at_decode") or []
    if mem:
        lines += ["", "each worker's memory while decoding, logged inside it (memory-phases.json, patch 0003):"]
        lines += [f"  {ln}" for ln in mem]
    conversations = (s.get("manifest") or {}).get("workload", {}).get("dataset") == "conversations"
    writer = "vllm bench serve --save-detailed"
    writer = f"the conversations client, in the format of {writer}" if conversations else writer
    lines += ["", f"raw: runs/<id>/result.json ({writer}), metrics-before/after.txt,"]
    lines.append("     status.json, stdout.log, stderr.log;")
    lines.append("     gauges.log, samplers/*.log (mono_s, wall, line); manifest.json; plan.json; client.json")
    return "\n".join(lines) + "\n"


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


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.0%}"


def _page_cache_line(pc: Mapping[str, Any]) -> str:
    if not pc["recorded"]:
        return f"page cache of the served files: {pc['how']}; not recorded (a bench from before it was)"
    size = pc["size_bytes"] / 2**20 if pc["size_bytes"] is not None else None
    unreadable = (
        f"; engine pids unreadable: {', '.join(pc['engine_pids_unreadable'])}" if pc["engine_pids_unreadable"] else ""
    )
    return (
        f"page cache of the served files ({pc['files']} files, {_f(size)} MiB): {pc['state']}, {pc['how']}; "
        f"resident at the start of measured runs {_pct(pc['resident_before']['min'])}-"
        f"{_pct(pc['resident_before']['max'])}, at their end {_pct(pc['resident_after']['min'])}-"
        f"{_pct(pc['resident_after']['max'])}; the engine read {_f(pc['engine_read_bytes'])} bytes from storage "
        f"(read_bytes) and {_f(pc['engine_rchar'])} through read calls (rchar) over them{unreadable}"
    )


def workload_line(w: Mapping[str, Any], data: Mapping[str, Any] | None) -> str:
    """What one run sends, in words: the path, the dataset and its lengths, the arrivals."""
    api = "/v1/chat/completions (the model's chat template)" if w.get("api") == "chat" else "/v1/completions"
    dataset = w.get("dataset", "random")
    data = data or {}
    if dataset == "shared_prefix":
        what = (
            f"{w['num_prefixes']} shared prefix(es) of {w['prefix_len']} tokens, {w['input_len']} in / "
            f"{w['output_len']} out tokens"
        )
    elif dataset == "prompts":
        name = Path(str(w["prompts"])).name
        what = f"prompts from {name} ({data.get('lines', '?')} prompts), {w['output_len']} out tokens"
    elif dataset == "trace":
        what = (
            f"trace {Path(str(w['trace'])).name} replayed on its timestamps x{w.get('trace_time_scale', 1):g}: "
            f"{data.get('requests', '?')} requests over {_f(data.get('span_s'))} s"
        )
    elif dataset == "conversations":
        what = (
            f"{w['num_conversations']} conversations x {w['turns']} turns, random {w['input_len']} in / "
            f"{w['output_len']} out tokens per turn, history resent each turn, think time "
            f"{w.get('think_time') or '0ms'}, concurrency = conversations in flight"
        )
    else:
        what = f"random {w['input_len']} in / {w['output_len']} out tokens"
    arrivals = ""
    if dataset != "trace" and w.get("arrival_rates"):
        b = w.get("burstiness", 1.0)
        # JSON has no infinity: the manifest holds null for .inf (evenly spaced).
        kind = "Poisson" if b == 1 else "evenly spaced" if b in (None, math.inf) else f"gamma, burstiness {b:g}"
        arrivals = f", arrivals {kind}"
    count = "" if dataset in ("trace", "conversations") else f", {w['num_prompts']} prompts per run"
    return f"{api}, {what}{count}{arrivals}"


def slo_line(slo: Mapping[str, Any]) -> str:
    given = [f"{k} <= {slo[k]}" for k in ("ttft", "tpot", "e2e") if slo.get(k)]
    return ", ".join(given) + f"; a load holds it when {float(slo.get('min_share', 0.9)):.0%} of requests meet all"


def holds_line(p: Mapping[str, Any], slo: Mapping[str, Any]) -> str:
    """Whether the point held the SLO: the median share of its runs meeting it, against min_share."""
    share = (p.get("slo_share_met") or {}).get("median")
    if share is None:
        return "-"
    return "yes" if share >= float(slo.get("min_share", 0.9)) else "no"


def _header_lines(s: Mapping[str, Any]) -> list[str]:
    m = s["manifest"]
    w = m["workload"]
    c = m["client"]
    profiled = (
        [f"PROFILED: the engine ran with the {m['profiler']} profiler configured (make profile): these figures carry "
         "its overhead and are not results (seed 000 §6)"]
        if m.get("profiler")
        else []
    )  # fmt: skip
    return [
        f"bench {s['bench_dir']}",
        *profiled,
        f"status: {s['status'].upper()}" + (f": {s['reason']}" if s["reason"] else ""),
        f"host {m['host']}, profile {m['profile'].get('name')}, image {m['runtime_image']}",
        f"workload {w['name']}: {workload_line(w, m.get('workload_data'))}, seed {w['seed']}, "
        f"{w['warmups']} warm-up + {w['runs']} measured runs per point, --ignore-eos",
        *([f"  {m['sized']}"] if m.get("sized") else []),
        *([f"  SLO per request: {slo_line(w['slo'])}"] if w.get("slo") else []),
        f"client CPUs {c['client_cpus']} (server {c['server_cpus']}): {c['note']}",
        f"prefix cache: {s['prefix_cache']['note']}; "
        f"hits in measured runs: {_f(s['prefix_cache']['hits_in_measured_runs'])} tokens"
        + (
            f" of {_f(pc['queries_in_measured_runs'])} queried (hit rate {_pct(pc['hit_rate'])})"
            if (pc := s["prefix_cache"]).get("queries_in_measured_runs")
            else ""
        ),
        *([_page_cache_line(s["page_cache"])] if "page_cache" in s else []),
        "definitions: TTFT = t1 - t0; TPOT = (tN - t1)/(N - 1); decode rate = (N - 1)/(tN - t1); "
        "N from the server's usage",
    ]


def _streaming_lines(s: Mapping[str, Any]) -> list[str]:
    """Whether chunk intervals are token intervals: one token per chunk, and no run that arrived in bursts."""
    lines: list[str] = []
    if s["grouped_streaming"]:
        lines.append("streaming: some chunks carried several tokens (grouped streaming), so chunk intervals are NOT")
        lines.append(
            "  inter-token latency; requests affected: "
            + ", ".join(f"{_point_label(p)} {p['grouped_requests']}/{p['requests_ok']}" for p in s["points"])
        )
    else:
        lines.append("streaming: one token per chunk in every request")
    buffered = [r["id"] for r in s["runs"] if any(f.startswith(bench_runs.BUFFERED_STREAM) for f in r["flags"])]
    if buffered:
        lines.append(
            f"  but {len(buffered)} run(s) reached the client in bursts or late ({', '.join(buffered)}; flags below): "
            "their chunk intervals are not token intervals; the server's TPOT and TTFT are the figures there"
        )
    elif not s["grouped_streaming"]:
        lines.append(
            "  and the client's TPOT and TTFT agree with the server's, so chunk intervals are token intervals (ITL)"
        )
    return lines


def _point_tables(s: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += ["", "pooled over measured runs (median [min-max] n):"]
    itl = "chunk interval ms (not ITL)" if s["grouped_streaming"] else "ITL ms"
    header = ("point", "TTFT ms", "TPOT ms", "decode tok/s/req", "e2e ms", itl, "aggregate tok/s (per run)")
    rows: list[tuple[str, ...]] = [
        (_point_label(p), _stat(p["ttft_ms"]), _stat(p["tpot_ms"]), _stat(p["decode_tok_s"]), _stat(p["e2el_ms"]),
         _stat(p["chunk_interval_ms"]), _stat(p["output_tok_s"]))
        for p in s["points"]
    ]  # fmt: skip
    lines += _table(header, rows)
    lines += ["", "server histogram deltas, mean per run (median [min-max] over runs):"]
    rows = [
        (_point_label(p), _stat(p["server_ttft_mean_ms"]), _stat(p["server_tpot_mean_ms"]),
         _stat(p["server_queue_mean_ms"]))
        for p in s["points"]
    ]  # fmt: skip
    lines += _table(("point", "server TTFT ms", "server TPOT ms", "server queue ms"), rows)
    slo = (s["manifest"]["workload"] or {}).get("slo")
    if slo:
        lines += ["", f"SLO per request ({slo_line(slo)}); per run, median [min-max] over runs:"]
        rows = [(_point_label(p), _stat(p.get("slo_share_met")), _stat(p.get("goodput_req_s")), _stat(p["request_s"]),
                 holds_line(p, slo)) for p in s["points"]]  # fmt: skip
        lines += _table(("point", "share meeting all", "goodput req/s", "completed req/s", "holds"), rows)
    rate_points = [p for p in s["points"] if p.get("request_rate") is not None]
    if rate_points:
        lines += ["", "fixed arrival rate:"]
        rows = [
            (_point_label(p), _stat(p["achieved_over_requested"]), _stat(p["outstanding_max"])) for p in rate_points
        ]
        lines += _table(("point", "achieved/requested", "max outstanding"), rows)
    return lines


def _turn_lines(s: Mapping[str, Any]) -> list[str]:
    """Conversations: TTFT by turn number, pooled over the measured runs (turn 1 prefills its own message; a later
    turn the whole history, which the turn before it left in the prefix cache)."""
    points = [p for p in s["points"] if p.get("ttft_ms_by_turn")]
    if not points:
        return []
    turns = sorted({int(t) for p in points for t in p["ttft_ms_by_turn"]})
    lines = ["", "TTFT ms by turn, pooled over measured runs (median [min-max] n; turn 1 has no history, later "
             "turns resend it):"]  # fmt: skip
    rows = [(_point_label(p), *(_stat(p["ttft_ms_by_turn"].get(str(t))) for t in turns)) for p in points]
    return lines + _table(("point", *(f"turn {t}" for t in turns)), rows)


def _resident(pc: Mapping[str, Any] | None) -> str:
    """The served files' residency at a run's start and end: "0%>100%"."""
    return f"{_pct(pc.get('resident_before'))}>{_pct(pc.get('resident_after'))}" if pc else "-"


def _run_lines(s: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += ["", "runs:"]
    rows = []
    for r in s["runs"]:
        server = r["server"] or {}
        rows.append(
            (r["id"], r["phase"], r["status"], str(r["seed"]), f"{r['requests_ok']}/{r['requests']}",
             _f(r["ttft_ms"]["median"]), _f(r["tpot_ms"]["median"]), _f(r["output_tok_s"]),
             _f((server.get("ttft") or {}).get("mean_ms")), _f((server.get("tpot") or {}).get("mean_ms")),
             _f(server.get("prefix_cache_hits")), _f(r["achieved_over_requested"]),
             _resident(r.get("page_cache")), _f((r.get("page_cache") or {}).get("engine_read_bytes")))
        )  # fmt: skip
    lines += _table(
        ("run", "phase", "status", "seed", "ok", "TTFT p50", "TPOT p50", "tok/s", "srv TTFT", "srv TPOT", "hits",
         "rate ratio", "resident", "eng read B"),
        rows,
    )  # fmt: skip
    flagged = [r for r in s["runs"] if r["flags"]]
    if flagged:
        lines += ["", "flags:"]
        lines += [f"  {r['id']}: {f}" for r in flagged for f in r["flags"]]
    return lines


def _class_lines(s: Mapping[str, Any]) -> list[str]:
    """The class's reference figures beside the measured ones, its PCIe links and its weight-read bound."""
    m = s["manifest"]
    lines: list[str] = []
    if s["reference"]:
        lines += ["", f"class reference figures ({(m.get('gpu_class') or {}).get('name', 'class')}), each beside the "
                  "figure measured here with the same definition:"]  # fmt: skip
        beside = {b["key"]: b for b in s["reference_beside_measured"]}
        for k, v in sorted(s["reference"].items()):
            b = beside.get(k)
            lines.append(
                f"  {k}: {v}"
                + (
                    f"   measured here at concurrency {b['concurrency']}: {_f(b['measured'])} ({b['what']})"
                    if b
                    else ""
                )
            )
        if m.get("stand_in"):
            lines.append(
                "  (a STAND-IN engine ran here, not the class's GPUs: the measured figures are not the class's)"
            )
    links = s.get("gpu_links") or {}
    if links.get("judged"):
        lines += ["", f"PCIe links while busy, against the class's Gen {links['class_min']['gen']} "
                  f"x{links['class_min']['width']} ({links.get('log', 'samplers/nvidia-smi.log')}):"]  # fmt: skip
        lines += [f"  FLAG {f}" for f in links["flags"]] or ["  every busy GPU's link reached it"]
    if s["weight_read_bound"]:
        b = s["weight_read_bound"]
        lines.append(
            f"weight-read bound: {b['weight_bytes_per_token_gb']:g} GB/token / {b['memory_bandwidth_gb_s']:g} GB/s = "
            f"{b['ms_per_token']:.2f} ms/token ({b['tok_s']:.0f} tok/s) at concurrency 1"
        )
    return lines


def _table(header: Sequence[str], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    out = ["  " + "  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True))]
    out += ["  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in rows]
    return out


# --- HTML --------------------------------------------------------------------------------------------------------


def _cdf(values: Sequence[float]) -> list[tuple[float, float]]:
    xs = sorted(values)
    n = len(xs)
    out: list[tuple[float, float]] = []
    for i, x in enumerate(xs):
        out += [(x, i / n), (x, (i + 1) / n)]
    return out


def _colour(panel: str, i: int) -> str:
    cols = PANEL_COLOURS[panel]
    return cols[i % len(cols)]


def render_html(s: Mapping[str, Any], bench_dir: Path) -> str:
    manifest = s["manifest"]
    panels: list[str] = []
    for p in s["points"]:
        measured = [r for r in s["runs"] if r["point"] == p["point"] and r["phase"] == "measured"]
        results = {r["id"]: _load(bench_dir / "runs" / r["id"] / bench.RESULT_FILE) or {} for r in measured}
        obs = {rid: [o for o in bench_runs.parse_requests(res) if o.success] for rid, res in results.items()}
        label = _point_label(p)
        for title, axis, field, colours in (
            ("end-to-end latency", "e2e latency (ms)", "e2el_s", "latency"),
            ("TTFT", "TTFT (ms)", "ttft_s", "io"),
        ):
            series = []
            for i, (r, os) in enumerate(obs.items()):
                values = [v * 1000 for v in (getattr(o, field) for o in os) if v is not None]
                series.append((r, _cdf(values), _colour(colours, i)))
            panels.append(xy_panel(f"{label}: {title} CDF per run", series, axis, "fraction of requests"))
        itl_title = (
            f"{label}: chunk intervals over time (chunks carried several tokens: NOT inter-token latency)"
            if p["grouped_streaming"]
            else f"{label}: inter-token latency over time (one token per chunk)"
        )
        series = []
        for i, (r, os) in enumerate(obs.items()):
            pts: list[tuple[float, float]] = []
            for o in os:
                t = (o.start_s or 0.0) + (o.ttft_s or 0.0)
                for dt in o.chunk_intervals_s:
                    t += dt
                    pts.append((t, dt * 1000))
            series.append((r, pts, _colour("queue", i)))
        panels.append(
            xy_panel(itl_title, series, "seconds since the run's first request", "interval (ms)", mode="dots")
        )
    conc = [p for p in s["points"] if p.get("max_concurrency") is not None and p["output_tok_s"]["n"]]
    if conc:
        agg = [(float(p["max_concurrency"]), p["output_tok_s"]["median"]) for p in conc]
        lo = [(float(p["max_concurrency"]), p["output_tok_s"]["min"]) for p in conc]
        hi = [(float(p["max_concurrency"]), p["output_tok_s"]["max"]) for p in conc]
        per = [(float(p["max_concurrency"]), p["decode_tok_s"]["median"]) for p in conc if p["decode_tok_s"]["n"]]
        panels.append(
            xy_panel(
                "concurrency scaling: aggregate output tok/s (median, min, max over runs) and per-request decode rate",
                [("aggregate median", agg, _colour("gpu", 0)), ("aggregate min", lo, _colour("gpu", 3)),
                 ("aggregate max", hi, _colour("gpu", 2)), ("per request (median)", per, _colour("cpu", 0))],
                "max concurrency", "tokens/s",
            )
        )  # fmt: skip
    panels.append(_timeline(s, bench_dir))
    knee_svg = bench_dir / KNEE_SVG
    if s.get("knee") and knee_svg.is_file():
        # Inline, as every panel here: the page is one file to attach to an incident.
        svg = knee_svg.read_text()
        panels.insert(0, '<div id="knee">' + svg[svg.find("<svg") :] + "</div>")
    m = manifest
    head = (
        f"<h1>bench {escape(m['workload']['name'])} on {escape(m['host'])}</h1>"
        f"<p>status <b>{escape(s['status'])}</b> {escape(s['reason'])}</p>"
        f'<pre style="overflow-x:auto">{escape(render_text(s))}</pre>'
    )
    body = "".join(f"<div>{p}</div>" for p in panels)
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>bench report</title></head>'
        f'<body style="background:{BACKGROUND};color:{TEXT};font-family:sans-serif">{head}{body}</body></html>\n'
    )


def _timeline(s: Mapping[str, Any], bench_dir: Path) -> str:
    """vmstat CPU and the load gauges on the bench's clock (seconds since the client started), runs as bands."""
    client = s.get("client") or {}
    t0 = client.get("started_mono_s")
    if not isinstance(t0, int | float):
        return xy_panel("samplers and gauges over the bench", [], "s", "", message="no client.json: no timeline")
    bands = []
    for r in s["runs"]:
        st = _load(bench_dir / "runs" / r["id"] / "status.json") or {}
        a, b = st.get("started_mono_s"), st.get("ended_mono_s")
        if isinstance(a, int | float) and isinstance(b, int | float):
            bands.append((a - t0, b - t0, r["id"]))
    series: list[tuple[str, Sequence[tuple[float, float]], str]] = []
    vm = parse_vmstat(read_log(bench_dir / "samplers" / "vmstat.log", include_rotated=False))
    for i, col in enumerate(("us", "sy", "wa")):
        if col in vm:
            series.append((f"vmstat {col} %", [(t - t0, v) for t, v in vm[col]], _colour("cpu", i)))
    gauges: dict[str, list[tuple[float, float]]] = {}
    for ln in read_log(bench_dir / "gauges.log", include_rotated=False):
        parts = ln.text.split()
        if len(parts) == 2 and not ln.text.startswith("#"):
            name = parts[0].split("{")[0].removeprefix("vllm:")
            try:
                gauges.setdefault(name, []).append((ln.mono_s - t0, float(parts[1])))
            except ValueError:
                continue
    for i, name in enumerate(("num_requests_running", "num_requests_waiting")):
        if name in gauges:
            series.append((f"{name} (x10)", [(t, v * 10) for t, v in gauges[name]], _colour("queue", i)))
    return xy_panel(
        "samplers and server gauges on the bench's timeline (grey: runs)",
        series,
        "seconds since the client started",
        "% CPU / requests x10",
        bands=bands,
        message="no sampler or gauge lines in the window",
    )


def write_report(bench_dir: Path) -> dict[str, Any]:
    s = build_summary(bench_dir)
    (bench_dir / SUMMARY_JSON).write_text(json.dumps(s, indent=2, sort_keys=True, default=str) + "\n")
    (bench_dir / REPORT_TXT).write_text(render_text(s))
    if s.get("knee") and s["knee"]["result"]:
        from serving.knee_plot import draw_knee

        draw_knee(s["knee"]["result"], s["knee"]["runs"], bench_dir / KNEE_SVG)
    (bench_dir / REPORT_HTML).write_text(render_html(s, bench_dir))
    bench_trace.write_trace(bench_dir)
    # The field's format last: its documents reference the files above (serving/br_export.py).
    from serving import br_export

    try:
        written = br_export.export_bench(bench_dir, s)
        line = (
            f"Benchmark Report v{br_export.BR_VERSION} (llm-d, validated): "
            + (", ".join(f"{br_export.BR_DIR}/{p.name}" for p in written) or "no point had a valid run")
            + f"; {br_export.BR_DIR}/{br_export.INDEX_FILE} says which runs each pools"
        )
    except br_export.ReportInvalid as e:
        line = f"Benchmark Report not written: {e}"
    s["benchmark_report"] = line
    with (bench_dir / REPORT_TXT).open("a") as f:
        f.write(line + "\n")
    return s


# The client's exits (images/vllm/bench_client.py) and timeout(1)'s.
CLIENT_EXITS = {1: "a run failed", 2: "bad plan"}


def report_bench(bench_dir: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Write a fetched bench's summary and reports, and say whether the bench completed: {"ok", "lines", "line"}.

    settings: host, client_rc (the client container's exit), timeout_s (its bound), change (the serving
    container's change in the window, serving.continuity), cgroup (the readings of the server's cgroups before and
    after: rc, stdout, stderr of each), memory_log (the engine log's memory rows, patch 0003). `lines` is what
    the operator is shown: the report, where it is, and the change; `line` the one line a bench that did not
    complete stops on."""
    if "cgroup" in settings:
        write_cgroup_readings(bench_dir, settings.get("cgroup"))
    if settings.get("memory_log") is not None:
        memory_phases.write_bench_memory(bench_dir, [str(x) for x in settings["memory_log"]])
    summary = write_report(bench_dir)
    lines = (bench_dir / REPORT_TXT).read_text().splitlines()
    lines += [f"report: {bench_dir / REPORT_TXT}", f"page:   {bench_dir / REPORT_HTML}"]
    change = settings.get("change") or {}
    rc = int(settings.get("client_rc", 0))
    if change.get("changed"):
        lines.append(str(change["line"]))
    ok = rc == 0 and summary["status"] == "ok" and not change.get("changed")
    if ok:
        return {"ok": True, "lines": lines, "line": ""}
    timeout = f"it ran past {settings.get('timeout_s')} s and was stopped"
    why = "" if rc == 0 else CLIENT_EXITS.get(rc, timeout if rc == 124 else f"client exit {rc}")
    reason = summary.get("reason") if summary["status"] != "ok" else None
    line = (
        (f"{change['line']}; " if change.get("changed") else "")
        + f"the bench on {settings['host']} FAILED"
        + (f" ({why})" if why else "")
        + (f": {reason}" if reason else "")
        + f"; partial data kept in {bench_dir}/"
    )
    return {"ok": False, "lines": lines, "line": line}
