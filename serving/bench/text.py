"""A bench's report.txt, from its summary (serving/bench/summary.py) as the schema reads it
(serving/bench/summary_schema.py BenchSummary): the header (what ran, how, where), the streaming, the knee search,
the GPUs' health, the pooled points, the SLO, the runs and their flags, the class's reference figures, the server's
cgroups and the memory at decode, and where the raw files are. The parts the schema leaves as mappings (the manifest,
the knee search, health, energy, PCIe links) are read as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serving.bench import energy as bench_energy
from serving.bench import health as bench_health
from serving.bench import runs as bench_runs
from serving.bench.summary import KNEE_SVG
from serving.bench.summary_schema import BenchSummary, PageCache, PointSummary, RunPageCache, Stat
from serving.standalone import knee_runs


def _f(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, int | float):
        return f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:.0f}"
    return str(x)


def stat(d: Stat | None) -> str:
    """A described figure as the reports print it: median [min-max] n=N, or - where there is none."""
    if not d or not d.n:
        return "-"
    return f"{_f(d.median)} [{_f(d.min)}-{_f(d.max)}] n={d.n}"


def point_label(p: PointSummary | Mapping[str, Any]) -> str:
    """A point in words: "concurrency 4", "rate 2 req/s", "trace replay". A point of the schema, or one as
    summary.json holds it (serving/bench/br_export.py reads the file's form)."""
    name: str | None
    if isinstance(p, PointSummary):
        name, rate, concurrency = p.point, p.request_rate, p.max_concurrency
    else:
        name, rate, concurrency = p.get("point"), p.get("request_rate"), p.get("max_concurrency")
    if name == "trace":
        return "trace replay"
    if rate is not None:
        return f"rate {rate:g} req/s"
    return f"concurrency {concurrency}"


def render_text(s: BenchSummary) -> str:
    labels, health = {p.point: point_label(p) for p in s.points}, s.gpu_health
    lines = _header_lines(s) + _streaming_lines(s) + _knee_lines(s.knee) + bench_health.health_lines(health, labels)
    lines += _point_tables(s) + _turn_lines(s.points) + bench_energy.energy_lines(s.energy, labels, health)
    lines += _run_lines(s)
    lines += _class_lines(s)
    cg = s.server_cgroup or []
    if cg:
        lines += ["", "the server's cgroups over the bench (cgroup-before.json, cgroup-after.json):"]
        lines += [f"  {ln}" for ln in cg]
    mem = s.memory_at_decode or []
    if mem:
        lines += ["", "each worker's memory while decoding, logged inside it (memory-phases.json, patch 0003):"]
        lines += [f"  {ln}" for ln in mem]
    conversations = (s.manifest or {}).get("workload", {}).get("dataset") == "conversations"
    writer = "vllm bench serve --save-detailed"
    writer = f"the conversations client, in the format of {writer}" if conversations else writer
    lines += ["", f"raw: runs/<id>/result.json ({writer}), metrics-before/after.txt,"]
    lines.append("     status.json, stdout.log, stderr.log;")
    lines.append("     gauges.log, samplers/*.log (mono_s, wall, line); manifest.json; plan.json; client.json")
    return "\n".join(lines) + "\n"


def _as_point(x: Any) -> str:
    """A load as its point is named: 64, not 64.0 (the search bisects in floats)."""
    return f"{x:g}" if isinstance(x, int | float) else str(x)


def _knee_lines(k: Mapping[str, Any] | None) -> list[str]:
    """The knee search's result (the summary's free-form "knee": its keys follow the search's own record)."""
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


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.0%}"


def _page_cache_line(pc: PageCache) -> str:
    if not pc.recorded:
        return f"page cache of the served files: {pc.how}; not recorded (a bench from before it was)"
    size = pc.size_bytes / 2**20 if pc.size_bytes is not None else None
    unreadable = (
        f"; engine pids unreadable: {', '.join(pc.engine_pids_unreadable)}" if pc.engine_pids_unreadable else ""
    )
    return (
        f"page cache of the served files ({pc.files} files, {_f(size)} MiB): {pc.state}, {pc.how}; "
        f"resident at the start of measured runs {_pct(pc.resident_before.min)}-"
        f"{_pct(pc.resident_before.max)}, at their end {_pct(pc.resident_after.min)}-"
        f"{_pct(pc.resident_after.max)}; the engine read {_f(pc.engine_read_bytes)} bytes from storage "
        f"(read_bytes) and {_f(pc.engine_rchar)} through read calls (rchar) over them{unreadable}"
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


def holds_line(p: PointSummary, slo: Mapping[str, Any]) -> str:
    """Whether the point held the SLO: the median share of its runs meeting it, against min_share."""
    share = p.slo_share_met.median if p.slo_share_met else None
    if share is None:
        return "-"
    return "yes" if share >= float(slo.get("min_share", 0.9)) else "no"


def _header_lines(s: BenchSummary) -> list[str]:
    m = s.manifest
    w = m["workload"]
    c = m["client"]
    profiled = (
        [f"PROFILED: the engine ran with the {m['profiler']} profiler configured (make profile): these figures carry "
         "its overhead and are not results (seed 000 §6)"]
        if m.get("profiler")
        else []
    )  # fmt: skip
    return [
        f"bench {s.bench_dir}",
        *profiled,
        f"status: {s.status.upper()}" + (f": {s.reason}" if s.reason else ""),
        f"host {m['host']}, profile {m['profile'].get('name')}, image {m['runtime_image']}",
        f"workload {w['name']}: {workload_line(w, m.get('workload_data'))}, seed {w['seed']}, "
        f"{w['warmups']} warm-up + {w['runs']} measured runs per point, --ignore-eos",
        *([f"  {m['sized']}"] if m.get("sized") else []),
        *([f"  SLO per request: {slo_line(w['slo'])}"] if w.get("slo") else []),
        f"client CPUs {c['client_cpus']} (server {c['server_cpus']}): {c['note']}",
        f"prefix cache: {s.prefix_cache.note}; "
        f"hits in measured runs: {_f(s.prefix_cache.hits_in_measured_runs)} tokens"
        + (
            f" of {_f(pc.queries_in_measured_runs)} queried (hit rate {_pct(pc.hit_rate)})"
            if (pc := s.prefix_cache).queries_in_measured_runs
            else ""
        ),
        *([_page_cache_line(s.page_cache)] if s.page_cache is not None else []),
        "definitions: TTFT = t1 - t0; TPOT = (tN - t1)/(N - 1); decode rate = (N - 1)/(tN - t1); "
        "N from the server's usage",
    ]


def _streaming_lines(s: BenchSummary) -> list[str]:
    """Whether chunk intervals are token intervals: one token per chunk, and no run that arrived in bursts."""
    lines: list[str] = []
    if s.grouped_streaming:
        lines.append("streaming: some chunks carried several tokens (grouped streaming), so chunk intervals are NOT")
        lines.append(
            "  inter-token latency; requests affected: "
            + ", ".join(f"{point_label(p)} {p.grouped_requests}/{p.requests_ok}" for p in s.points)
        )
    else:
        lines.append("streaming: one token per chunk in every request")
    buffered = [r.id for r in s.runs if any(f.startswith(bench_runs.BUFFERED_STREAM) for f in r.flags)]
    if buffered:
        lines.append(
            f"  but {len(buffered)} run(s) reached the client in bursts or late ({', '.join(buffered)}; flags below): "
            "their chunk intervals are not token intervals; the server's TPOT and TTFT are the figures there"
        )
    elif not s.grouped_streaming:
        lines.append(
            "  and the client's TPOT and TTFT agree with the server's, so chunk intervals are token intervals (ITL)"
        )
    return lines


def _point_tables(s: BenchSummary) -> list[str]:
    lines: list[str] = []
    lines += ["", "pooled over the valid measured runs (median [min-max] n):"]
    itl = "chunk interval ms (not ITL)" if s.grouped_streaming else "ITL ms"
    header = ("point", "valid runs", "TTFT ms", "TPOT ms", "decode tok/s/req", "e2e ms", itl,
              "aggregate tok/s (per run)")  # fmt: skip
    rows: list[tuple[str, ...]] = [
        (point_label(p), f"{p.runs_valid} of {p.runs}", stat(p.ttft_ms), stat(p.tpot_ms), stat(p.decode_tok_s),
         stat(p.e2el_ms), stat(p.chunk_interval_ms), stat(p.output_tok_s))
        for p in s.points
    ]  # fmt: skip
    lines += _table(header, rows)
    left_out = [x for p in s.points for x in p.left_out]
    if left_out:
        lines.append(f"  left out of the pool, flagged ({len(left_out)}; their own figures are in the runs table):")
        lines += [f"    {x}" for x in left_out]
    lines += ["", "server histogram deltas, mean per run (median [min-max] over runs):"]
    rows = [
        (point_label(p), stat(p.server_ttft_mean_ms), stat(p.server_tpot_mean_ms), stat(p.server_queue_mean_ms))
        for p in s.points
    ]  # fmt: skip
    lines += _table(("point", "server TTFT ms", "server TPOT ms", "server queue ms"), rows)
    slo = (s.manifest["workload"] or {}).get("slo")
    if slo:
        lines += ["", f"SLO per request ({slo_line(slo)}); per run, median [min-max] over runs:"]
        rows = [(point_label(p), stat(p.slo_share_met), stat(p.goodput_req_s), stat(p.request_s),
                 holds_line(p, slo)) for p in s.points]  # fmt: skip
        lines += _table(("point", "share meeting all", "goodput req/s", "completed req/s", "holds"), rows)
    rate_points = [p for p in s.points if p.request_rate is not None]
    if rate_points:
        lines += ["", "fixed arrival rate:"]
        rows = [(point_label(p), stat(p.achieved_over_requested), stat(p.outstanding_max)) for p in rate_points]
        lines += _table(("point", "achieved/requested", "max outstanding"), rows)
    return lines


def _turn_lines(all_points: Sequence[PointSummary]) -> list[str]:
    """Conversations: TTFT by turn number, pooled over the valid measured runs (turn 1 prefills its own message; a later
    turn the whole history, which the turn before it left in the prefix cache)."""
    by_turn = [(p, p.ttft_ms_by_turn) for p in all_points if p.ttft_ms_by_turn]
    if not by_turn:
        return []
    turns = sorted({int(t) for _, stats in by_turn for t in stats})
    lines = ["", "TTFT ms by turn, pooled over the valid measured runs (median [min-max] n; turn 1 has no history, "
             "later turns resend it):"]  # fmt: skip
    rows = [(point_label(p), *(stat(stats.get(str(t))) for t in turns)) for p, stats in by_turn]
    return lines + _table(("point", *(f"turn {t}" for t in turns)), rows)


def _resident(pc: RunPageCache | None) -> str:
    """The served files' residency at a run's start and end: "0%>100%"."""
    return f"{_pct(pc.resident_before)}>{_pct(pc.resident_after)}" if pc else "-"


def _run_lines(s: BenchSummary) -> list[str]:
    lines: list[str] = []
    lines += ["", "runs:"]
    rows = []
    for r in s.runs:
        server, pc = r.server, r.page_cache
        rows.append(
            (r.id, r.phase, r.status, str(r.seed), f"{r.requests_ok}/{r.requests}",
             _f(r.ttft_ms.median), _f(r.tpot_ms.median), _f(r.output_tok_s),
             _f(server.ttft.mean_ms if server else None), _f(server.tpot.mean_ms if server else None),
             _f(server.prefix_cache_hits if server else None), _f(r.achieved_over_requested),
             _resident(pc), _f(pc.engine_read_bytes if pc else None))
        )  # fmt: skip
    lines += _table(
        ("run", "phase", "status", "seed", "ok", "TTFT p50", "TPOT p50", "tok/s", "srv TTFT", "srv TPOT", "hits",
         "rate ratio", "resident", "eng read B"),
        rows,
    )  # fmt: skip
    flagged = [r for r in s.runs if r.flags]
    if flagged:
        lines += ["", "flags:"]
        lines += [f"  {r.id}: {f}" for r in flagged for f in r.flags]
    return lines


def _class_lines(s: BenchSummary) -> list[str]:
    """The class's reference figures beside the measured ones, its PCIe links and its weight-read bound."""
    m = s.manifest
    lines: list[str] = []
    if s.reference:
        lines += ["", f"class reference figures ({(m.get('gpu_class') or {}).get('name', 'class')}), each beside the "
                  "figure measured here with the same definition:"]  # fmt: skip
        beside = {b.key: b for b in s.reference_beside_measured}
        for k, v in sorted(s.reference.items()):
            b = beside.get(k)
            lines.append(
                f"  {k}: {v}"
                + (f"   measured here at concurrency {b.concurrency}: {_f(b.measured)} ({b.what})" if b else "")
            )
        if m.get("stand_in"):
            lines.append(
                "  (a STAND-IN engine ran here, not the class's GPUs: the measured figures are not the class's)"
            )
    links = s.gpu_links or {}
    if links.get("judged"):
        lines += ["", f"PCIe links while busy, against the class's Gen {links['class_min']['gen']} "
                  f"x{links['class_min']['width']} ({links.get('log', 'samplers/nvidia-smi.log')}):"]  # fmt: skip
        lines += [f"  FLAG {f}" for f in links["flags"]] or ["  every busy GPU's link reached it"]
    if s.weight_read_bound:
        w = s.weight_read_bound
        lines.append(
            f"weight-read bound: {w['weight_bytes_per_token_gb']:g} GB/token / {w['memory_bandwidth_gb_s']:g} GB/s = "
            f"{w['ms_per_token']:.2f} ms/token ({w['tok_s']:.0f} tok/s) at concurrency 1"
        )
    return lines


def _table(header: Sequence[str], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    out = ["  " + "  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True))]
    out += ["  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in rows]
    return out
