"""What a run directory holds, read once into the figures the rules judge (serving/diagnose/rules/): a capture's
bundle (runs/<host>/<ts>/capture) or a bench (runs/<host>/<ts>/bench). Only the directory is read, never the host.

Every figure keeps the artifact it came from (`Src`), so a finding can cite it. Where an artifact is absent, or
does not parse, the figure is None and `notes` says why: a rule that needs it then says it could not run.
Samples count only inside the run's window (a capture's bundle.json window; a bench's client start and end).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from probes.readers import cpus, sampler_logs
from probes.readers.cgroup_delta import cgroup_delta
from probes.readers.cgroups import snapshot_from_json
from serving.evidence import rank_trace
from serving.host.numa import parse_cpulist


@dataclass(frozen=True)
class Src:
    """A value and the artifact it was read from (relative to the run directory)."""

    value: Any
    artifact: str


@dataclass(frozen=True)
class ThreadCpu:
    """One thread's %CPU over the window (pidstat -u -t): 100 is one whole CPU."""

    tgid: int
    tid: int
    name: str
    role: str  # the vLLM process it belongs to: api_server, engine_core, worker
    median: float
    max: float
    samples: int
    # pidstat's %wait: the share of a CPU the thread spent runnable, waiting for one (its run-queue time).
    wait_median: float = 0.0
    # The CPUs it may run on: its affinity (Cpus_allowed_list, read at the window's start and end: either) within
    # the container's cpuset; None where the run did not read affinities (a bench, an older capture).
    allowed: tuple[int, ...] | None = None


@dataclass
class Evidence:
    run_dir: Path
    kind: str  # capture | bench
    window_s: float | None = None
    # The seconds samples count in: a capture's window; a bench's measured runs, each from its start to its end
    # (the client's import and the gaps between runs are not load).
    windows: list[tuple[float, float]] | None = None
    notes: list[str] = field(default_factory=list)
    # The requests as the client saw them (ms) and the load it offered.
    client: dict[str, Src] = field(default_factory=dict)  # ttft_p50_ms, tpot_p50_ms, e2e_p50_ms, failed, sent
    load: dict[str, Src] = field(default_factory=dict)  # concurrency, request_rate, achieved_over_requested
    # The server's intervals over the window (vLLM's histograms, means in ms) and its counters.
    server: dict[str, Src] = field(default_factory=dict)  # queue_ms, ttft_ms, prefill_ms, decode_ms, tpot_ms, ...
    gauges: dict[str, Src] = field(default_factory=dict)  # waiting, running, kv_usage: [values in the window]
    max_num_seqs: Src | None = None
    cgroup: Src | None = None  # [level deltas], innermost (the container) first
    cpuset_cpus: Src | None = None  # how many CPUs the container may run on
    cpuset: Src | None = None  # which: [cpu], the container's effective cpuset
    # Each host CPU's busy share over the window ({cpu: 0..1}, /proc/stat before and after), and the host's
    # processes outside the serving container that used CPU in the seconds around it ([cpus.HostUse]).
    cpu_busy: Src | None = None
    host_use: Src | None = None
    host_use_span_s: float | None = None
    host_cpus: int | None = None
    vmstat: Src | None = None  # {column: [(mono_s, value)]}, every sample: vm_values() picks the seconds
    # The seconds the cgroup readings span (before to after): what the host's use is set against.
    cgroup_span: tuple[float, float] | None = None
    threads: Src | None = None  # [ThreadCpu]
    wchan: Src | None = None  # {"rounds": n, "counts": {"<pid> <role>/<thread>": {wchan: n}}}
    stacks: Src | None = None  # stacks/aggregate.json
    gpu: Src | None = None  # [GpuSample] from the GPU sampler's log
    # {"host_mems", "mems_allowed", "node_cpus", "processes": [{pid, comm, node_bytes, cpus_allowed}]} at the
    # window's end (numa_maps, /proc/<pid>/status, sysfs).
    numa: Src | None = None
    pcie_min: tuple[int, int] | None = None  # the class's Gen and width
    # Conditions that void figures: the engine profiled, a stand-in engine, runs the bench flagged.
    conditions: dict[str, Src] = field(default_factory=dict)
    page_cache: dict[str, Src] = field(default_factory=dict)
    # Each rank's step figures (serving/evidence/rank_trace.py rank_figures) where the engine wrote a rank trace.
    ranks: Src | None = None
    # A bench's points, lowest load first ([LoadPoint]): what the scaling rule reads across them.
    points: Src | None = None
    # The served model's facts as the plan read them (serving/plan/model_facts.py ModelFacts, as a dict), the
    # class's memory bandwidth (GB/s, gpu_class.reference.memory_bandwidth_gb_s) and the engine's TP and PP sizes.
    model: Src | None = None
    memory_bandwidth_gb_s: Src | None = None
    parallel: tuple[int, int] = (1, 1)


@dataclass(frozen=True)
class LoadPoint:
    """One bench point's pooled medians: the load it offered and what it got."""

    point: str
    concurrency: float | None
    request_rate: float | None
    aggregate_tok_s: float  # output tokens over each run's duration, all requests together (median over runs)
    decode_tok_s: float | None  # each request's decode rate (N-1)/(tN-t1) (median)
    tpot_ms: float | None
    ttft_ms: float | None
    e2el_ms: float | None  # each request's whole time (median)


def _json(run_dir: Path, rel: str, ev: Evidence) -> Any:
    path = run_dir / rel
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        ev.notes.append(f"{rel} does not parse: {e}")
        return None


def _in_window(t: float, windows: list[tuple[float, float]] | None) -> bool:
    return windows is None or any(a <= t <= b for a, b in windows)


# vLLM's load gauges, by the name the rules read them under.
_GAUGES = {"vllm:num_requests_waiting": "waiting", "vllm:num_requests_running": "running",
           "vllm:kv_cache_usage_perc": "kv_usage"}  # fmt: skip
# pidstat's process names of vLLM's processes, by role (probes/readers/procs.py names them from their titles).
_ROLE_BY_COMMAND = {"VLLM::Worker": "worker", "VLLM::EngineCor": "engine_core", "vllm": "api_server"}


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000.0


def is_capture(d: Path) -> bool:
    return (d / "bundle.json").is_file() or (d / "capture-started.json").is_file()


def is_bench(d: Path) -> bool:
    return (d / "summary.json").is_file() and (d / "manifest.json").is_file()


def load_evidence(run_dir: Path) -> Evidence:
    """The evidence of a capture's or a bench's directory (serving/diagnose/engine.py resolves which one)."""
    run_dir = run_dir.resolve()
    return _capture(run_dir) if is_capture(run_dir) else _bench(run_dir)


# --- the parts both kinds share ------------------------------------------------------------------------------


def _histogram_means(delta: Mapping[str, Any], rel: str) -> dict[str, Src]:
    """vLLM's interval histograms over the window, as means in ms (sum/count: the buckets' quantiles are too
    coarse for short intervals), and its counters."""
    names = {
        "queue_ms": "vllm:request_queue_time_seconds",
        "ttft_ms": "vllm:time_to_first_token_seconds",
        "prefill_ms": "vllm:request_prefill_time_seconds",
        "decode_ms": "vllm:request_decode_time_seconds",
        "tpot_ms": "vllm:request_time_per_output_token_seconds",
        "e2e_ms": "vllm:e2e_request_latency_seconds",
    }
    out: dict[str, Src] = {}
    for key, name in names.items():
        hs = [h for h in delta.get("histograms") or [] if h.get("name") == name and h.get("count")]
        count = sum(float(h["count"]) for h in hs)
        if count:
            out[key] = Src(_ms(sum(float(h.get("sum_s") or 0.0) for h in hs) / count), rel)
    counters = {
        "preemptions": "vllm:num_preemptions_total",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "requests_finished": "vllm:request_success_total",
    }
    for key, name in counters.items():
        cs = [c for c in delta.get("counters") or [] if c.get("name") == name and c.get("delta") is not None]
        if cs:
            out[key] = Src(sum(float(c["delta"]) for c in cs), rel)
    return out


def _cgroup_levels(doc: Any, rel: str, ev: Evidence) -> None:
    if isinstance(doc, Mapping) and isinstance(doc.get("levels"), list):
        ev.cgroup = Src(list(doc["levels"]), rel)
        if doc.get("levels_changed"):
            ev.notes.append(f"{rel}: the container's cgroups changed in the window (a restart): levels may differ")


def _cpuset(snapshot: Any, rel: str, ev: Evidence) -> None:
    """The container's effective cpuset (the innermost level of a cgroup snapshot), and the host's CPUs (the
    outermost level read: the cgroup root's, or the nearest to it)."""
    levels = (snapshot or {}).get("levels") or []
    inner = ((levels[0] if levels else {}).get("cpuset") or {}).get("cpus_effective")
    if inner:
        ev.cpuset_cpus = Src(len(parse_cpulist(str(inner))), rel)
        ev.cpuset = Src(sorted(parse_cpulist(str(inner))), rel)
    outer = ((levels[-1] if levels else {}).get("cpuset") or {}).get("cpus_effective")
    if outer:
        ev.host_cpus = len(parse_cpulist(str(outer)))


def _numa(state: Any, rel: str, ev: Evidence) -> None:
    """Each vLLM process's resident bytes per node, and the nodes its container (innermost level) and the host
    (outermost) may allocate on, from a host-state reading."""
    levels = (((state or {}).get("cgroup") or {}).get("levels")) or []
    procs = [
        {
            "pid": p.get("pid"),
            "comm": p.get("comm"),
            "node_bytes": dict((p.get("numa_maps") or {}).get("node_bytes") or {}),
            "cpus_allowed": p.get("cpus_allowed"),
        }
        for p in (state or {}).get("processes") or []
        if ((p.get("numa_maps") or {}).get("status")) == "successful"
    ]
    mems = [((lv.get("cpuset") or {}).get("mems_effective")) for lv in levels]
    if procs and mems and mems[0] and mems[-1]:
        ev.numa = Src({"host_mems": str(mems[-1]), "mems_allowed": str(mems[0]), "processes": procs,
                       "node_cpus": (state or {}).get("node_cpus")}, rel)  # fmt: skip


def _samplers(run_dir: Path, sdir: str, ev: Evidence, roles: Mapping[int, str]) -> None:
    """vmstat and pidstat's per-thread rows inside the window, and the GPU sampler's samples."""
    vm = run_dir / sdir / "vmstat.log"
    if vm.is_file():
        series = sampler_logs.parse_vmstat(sampler_logs.read_log(vm))
        ev.vmstat = Src(dict(series), f"{sdir}/vmstat.log")
    ps = run_dir / sdir / "pidstat.log"
    if ps.is_file():
        by_tid: dict[tuple[int, int], list[float]] = {}
        waits: dict[tuple[int, int], list[float]] = {}
        names: dict[tuple[int, int], str] = {}
        roles = dict(roles)
        for row in sampler_logs.parse_pidstat(sampler_logs.read_log(ps)):
            if row.tid is None:
                name = next((r for c, r in _ROLE_BY_COMMAND.items() if row.command.startswith(c)), None)
                roles.setdefault(row.tgid, name or "?")
            if row.tid is None or "%CPU" not in row.values or not _in_window(row.mono_s, ev.windows):
                continue
            by_tid.setdefault((row.tgid, row.tid), []).append(row.values["%CPU"])
            waits.setdefault((row.tgid, row.tid), []).append(row.values.get("%wait", 0.0))
            names[(row.tgid, row.tid)] = row.command
        threads = [
            ThreadCpu(
                tgid,
                tid,
                names[(tgid, tid)],
                roles.get(tgid, "?"),
                statistics.median(v),
                max(v),
                len(v),
                statistics.median(waits[(tgid, tid)]),
            )
            for (tgid, tid), v in sorted(by_tid.items())
        ]
        ev.threads = Src(threads, f"{sdir}/pidstat.log")
    for log in ("nvml.log", "nvidia-smi.log"):
        path = run_dir / sdir / log
        if path.is_file():
            if log == "nvml.log":
                from probes.readers import nvml_log

                samples = nvml_log.read_gpu_samples(path)
            else:
                samples = sampler_logs.parse_nvidia_smi(sampler_logs.read_log(path))
            ev.gpu = Src([s for s in samples if _in_window(s.mono_s, ev.windows)], f"{sdir}/{log}")
            break


# --- a capture ------------------------------------------------------------------------------------------------


def _capture(d: Path) -> Evidence:
    ev = Evidence(run_dir=d, kind="capture")
    bundle = _json(d, "bundle.json", ev) or _json(d, "capture-started.json", ev) or {}
    window = bundle.get("window") or {}
    if window.get("start_mono_s") is not None and window.get("end_mono_s") is not None:
        ev.windows = [(float(window["start_mono_s"]), float(window["end_mono_s"]))]
        ev.window_s = ev.windows[0][1] - ev.windows[0][0]
    else:
        ev.notes.append("bundle.json has no window (an interrupted capture): samples are not limited to one")
    roles = {int(p["pid"]): str(p.get("role", "?")) for p in bundle.get("processes") or [] if "pid" in p}
    config = bundle.get("config") or {}
    load = config.get("load") or {}
    if load:
        ev.load["concurrency"] = Src(load.get("concurrency"), "bundle.json")
    if pcie := config.get("pcie_min"):
        ev.pcie_min = (int(pcie[0]), int(pcie[1])) if isinstance(pcie, list | tuple) else None
    req = _json(d, "requests/requests.json", ev)
    if req:
        for key, src in (("ttft_p50_ms", "ttft_ms_p50"), ("ttft_p99_ms", "ttft_ms_p99"),
                         ("tpot_p50_ms", "tpot_ms_p50"), ("tpot_p99_ms", "tpot_ms_p99"),
                         ("sent", "sent"), ("completed", "completed"), ("failed", "failed"),
                         ("one_burst", "one_burst")):  # fmt: skip
            if req.get(src) is not None:
                ev.client[key] = Src(req[src], "requests/requests.json")
        ev.client["output_len"] = Src((req.get("spec") or {}).get("output_len"), "requests/requests.json")
    else:
        ev.notes.append("no requests/requests.json: the capture sent no workload (make capture WORKLOAD=...)")
    delta = _json(d, "metrics/delta.json", ev)
    if delta:
        ev.server = _histogram_means(delta, "metrics/delta.json")
    gauges = _json(d, "metrics/gauges.json", ev)
    for series in (gauges or {}).get("series") or []:
        gauge = _GAUGES.get(series.get("name"))
        if gauge:
            vals = [float(p["value"]) for p in series.get("points") or [] if _in_window(p["monotonic_s"], ev.windows)]
            prev = ev.gauges.get(gauge)
            ev.gauges[gauge] = Src((prev.value if prev else []) + vals, "metrics/gauges.json")
    _cgroup_levels(_json(d, "host-state/cgroup-delta.json", ev), "host-state/cgroup-delta.json", ev)
    state = _json(d, "host-state/before/host-state.json", ev)
    after = _json(d, "host-state/after/host-state.json", ev)
    _numa(after, "host-state/after/host-state.json", ev)
    if state and after and state.get("taken_mono_s") and after.get("taken_mono_s"):
        ev.cgroup_span = (float(state["taken_mono_s"]), float(after["taken_mono_s"]))
    _cpuset((state or {}).get("cgroup"), "host-state/before/host-state.json", ev)
    _samplers(d, "samplers", ev, roles)
    _cpus(d, ev, str((((state or {}).get("cgroup") or {}).get("levels") or [{}])[0].get("path") or ""))
    wchan = _json(d, "kernel/wchan.json", ev)
    if wchan and wchan.get("status") == "successful":
        ev.wchan = Src({"rounds": wchan.get("rounds"), "counts": wchan.get("counts") or {}}, "kernel/wchan.json")
    stacks = _json(d, "stacks/aggregate.json", ev)
    if isinstance(stacks, list):
        ev.stacks = Src(stacks, "stacks/aggregate.json")
    steps, _ = rank_trace.read_steps(d / "ranks")
    if steps:
        ev.ranks = Src(rank_trace.rank_figures(steps), "ranks/rank*.steps.jsonl")
    engine = bundle.get("engine")  # the serving container's labels at the window's start (older bundles: none)
    if isinstance(engine, Mapping):
        ev.conditions["profiler"] = Src(engine.get("profiler") or None, "bundle.json")
        ev.conditions["stand_in"] = Src(engine.get("stand_in") or None, "bundle.json")
    return ev


def _cpus(d: Path, ev: Evidence, serving_cgroup: str) -> None:
    """Each thread's allowed CPUs (its affinity within the cpuset), the host's per-CPU busy share over the window,
    and the host's other processes (probes/readers/cpus.py says how each was read)."""
    before, after = (_json(d, f"host-state/{w}/{cpus.CPUS_FILE}", ev) for w in ("before", "after"))
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return
    rel = f"host-state/before/{cpus.CPUS_FILE}, host-state/after/{cpus.CPUS_FILE}"
    busy = cpus.busy_shares(before.get("per_cpu") or {}, after.get("per_cpu") or {})
    if busy:
        ev.cpu_busy = Src(busy, rel)
    cpuset = set(ev.cpuset.value) if ev.cpuset else set(busy)
    allowed: dict[tuple[int, int], set[int]] = {}
    for doc in (before, after):
        for t in doc.get("threads") or []:
            key = (int(t["pid"]), int(t["tid"]))
            allowed[key] = allowed.get(key, set()) | (cpus.parse_cpulist(str(t["cpus_allowed"])) & cpuset)
    first = {(t["pid"], t["tid"]): t["cpus_allowed"] for t in before.get("threads") or []}
    changed = sorted(f"{u['pid']}/{u['tid']} {u['comm']}" for u in after.get("threads") or []
                     if first.get((u["pid"], u["tid"]), u["cpus_allowed"]) != u["cpus_allowed"])  # fmt: skip
    if changed:
        ev.notes.append(f"{rel}: affinity changed in the window for {', '.join(changed[:5])}: both counted")
    if ev.threads is not None and allowed:
        rows = [replace(t, allowed=tuple(sorted(allowed[(t.tgid, t.tid)]))) if (t.tgid, t.tid) in allowed else t
                for t in ev.threads.value]  # fmt: skip
        ev.threads = Src(rows, f"{ev.threads.artifact}, {rel}")
    texts = [d / "host-state" / "host-processes-before.txt", d / "host-state" / "host-processes-after.txt"]
    if all(t.is_file() for t in texts):
        hb, ha = (cpus.parse_host_processes(t.read_text(errors="replace")) for t in texts)
        if hb is not None and ha is not None:
            use = cpus.host_use(hb, ha, set(busy) or cpuset, serving_cgroup)
            ev.host_use = Src(use, "host-state/host-processes-before.txt, host-state/host-processes-after.txt")
            ev.host_use_span_s = ha.wall_s - hb.wall_s


# --- a bench --------------------------------------------------------------------------------------------------


def _bench(d: Path) -> Evidence:
    ev = Evidence(run_dir=d, kind="bench")
    summary = _json(d, "summary.json", ev) or {}
    manifest = _json(d, "manifest.json", ev) or {}
    client = _json(d, "client.json", ev) or {}
    if client.get("started_mono_s") is not None and client.get("ended_mono_s") is not None:
        ev.window_s = float(client["ended_mono_s"]) - float(client["started_mono_s"])
    profile = manifest.get("profile") or {}
    seqs = ((profile.get("vllm") or {}) if isinstance(profile, Mapping) else {}).get("max_num_seqs")
    ev.max_num_seqs = Src(seqs, "manifest.json") if seqs is not None else None
    measured = [r for r in summary.get("runs") or [] if r.get("phase") == "measured"]
    if not measured:
        ev.notes.append("summary.json has no measured runs")
    # The point with the longest e2e median: the slow one, which the interval rule judges.
    points = [p for p in summary.get("points") or [] if (p.get("e2el_ms") or {}).get("median") is not None]
    if points:
        slow = max(points, key=lambda p: p["e2el_ms"]["median"])
        for key, src in (("ttft_p50_ms", "ttft_ms"), ("tpot_p50_ms", "tpot_ms"), ("e2e_p50_ms", "e2el_ms")):
            ev.client[key] = Src((slow.get(src) or {}).get("median"), "summary.json")
        ev.client["point"] = Src(slow.get("point"), "summary.json")
        ev.load["concurrency"] = Src(slow.get("max_concurrency"), "summary.json")
        ev.load["request_rate"] = Src(slow.get("request_rate"), "summary.json")
        ratio = (slow.get("achieved_over_requested") or {}).get("median")
        if ratio is not None:
            ev.load["achieved_over_requested"] = Src(ratio, "summary.json")
        slow_runs = [r for r in measured if r.get("point") == slow.get("point")]
    else:
        slow_runs = measured
    runs = [_json(d, f"runs/{r['id']}/status.json", ev) or {} for r in measured]
    spans = [(float(r["started_mono_s"]), float(r["ended_mono_s"])) for r in runs
             if r.get("started_mono_s") is not None and r.get("ended_mono_s") is not None]  # fmt: skip
    if spans:
        ev.windows = spans
    ev.client["failed"] = Src(sum(int(r.get("requests_failed") or 0) for r in measured), "summary.json")
    ev.client["output_len"] = Src((manifest.get("workload") or {}).get("output_len"), "manifest.json")
    # The server's intervals over the slow point's runs, weighted by each run's count.
    for key, part in (("queue_ms", "queue"), ("ttft_ms", "ttft"), ("prefill_ms", "prefill"),
                      ("decode_ms", "decode"), ("tpot_ms", "tpot"), ("e2e_ms", "e2e")):  # fmt: skip
        pairs = [((r.get("server") or {}).get(part) or {}) for r in slow_runs]
        n = sum(float(p.get("count") or 0) for p in pairs)
        if n:
            mean = sum(float(p.get("count") or 0) * float(p.get("mean_ms") or 0) for p in pairs) / n
            ev.server[key] = Src(mean, "summary.json")
    for key in ("preemptions", "prompt_tokens", "generation_tokens", "requests_finished"):
        vals = [(r.get("server") or {}).get(key) for r in measured]
        if any(v is not None for v in vals):
            ev.server[key] = Src(sum(float(v or 0) for v in vals), "summary.json")
    _bench_gauges(d, ev)
    _bench_points(summary, manifest, ev)
    docs = [_json(d, n, ev) for n in ("cgroup-before.json", "cgroup-after.json")]
    if all(isinstance(x, dict) and "error" not in x for x in docs):
        try:
            delta = asdict(cgroup_delta(snapshot_from_json(docs[0]), snapshot_from_json(docs[1])))
            _cgroup_levels(delta, "cgroup-before.json, cgroup-after.json", ev)
            ev.cgroup_span = (float(docs[0]["taken_mono_s"]), float(docs[1]["taken_mono_s"]))
            _cpuset(docs[0], "cgroup-before.json", ev)
        except (KeyError, TypeError, ValueError) as e:
            ev.notes.append(f"cgroup-before.json / cgroup-after.json do not parse: {e}")
    _samplers(d, "samplers", ev, {})
    flagged = [f"{r['id']}: {f}" for r in measured for f in r.get("flags") or []]
    ev.conditions["flagged_runs"] = Src(flagged, "summary.json")
    ev.conditions["profiler"] = Src(manifest.get("profiler"), "manifest.json")
    ev.conditions["stand_in"] = Src(manifest.get("stand_in"), "manifest.json")
    pc = summary.get("page_cache") or {}
    for key in ("engine_read_bytes", "size_bytes", "state"):
        if pc.get(key) is not None:
            ev.page_cache[key] = Src(pc[key], "summary.json")
    if (pc.get("resident_before") or {}).get("median") is not None:
        ev.page_cache["resident_before"] = Src(pc["resident_before"]["median"], "summary.json")
    return ev


def _bench_points(summary: Mapping[str, Any], manifest: Mapping[str, Any], ev: Evidence) -> None:
    """The points with an aggregate figure, closed-loop ones by concurrency then open-loop ones by rate; the
    model's facts and the class's memory bandwidth from the manifest."""

    def med(p: Mapping[str, Any], key: str) -> float | None:
        v = (p.get(key) or {}).get("median")
        return float(v) if isinstance(v, int | float) else None

    pts = [
        LoadPoint(
            str(p.get("point")),
            p.get("max_concurrency"),
            p.get("request_rate"),
            agg,
            med(p, "decode_tok_s"),
            med(p, "tpot_ms"),
            med(p, "ttft_ms"),
            med(p, "e2el_ms"),
        )
        for p in summary.get("points") or []
        if (agg := med(p, "output_tok_s")) is not None
    ]
    pts.sort(key=lambda p: (p.request_rate is not None, p.request_rate or 0.0, p.concurrency or 0.0))
    if pts:
        ev.points = Src(pts, "summary.json")
    if isinstance(manifest.get("model"), Mapping):
        ev.model = Src(dict(manifest["model"]), "manifest.json")
    bw = (((manifest.get("gpu_class") or {}).get("reference")) or {}).get("memory_bandwidth_gb_s")
    if isinstance(bw, int | float) and bw > 0:
        ev.memory_bandwidth_gb_s = Src(float(bw), "manifest.json")
    vllm = ((manifest.get("profile") or {}).get("vllm")) or {}
    ev.parallel = (int(vllm.get("tensor_parallel_size") or 1), int(vllm.get("pipeline_parallel_size") or 1))


def _bench_gauges(d: Path, ev: Evidence) -> None:
    """gauges.log: the client's reads of the load gauges every 0.5 s (images/vllm/bench_client.py)."""
    path = d / "gauges.log"
    if not path.is_file():
        return
    names = _GAUGES
    values: dict[str, list[float]] = {}
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        metric = parts[2].split("{", 1)[0].split(" ", 1)[0]
        if metric in names:
            try:
                values.setdefault(names[metric], []).append(float(parts[2].rsplit(" ", 1)[-1]))
            except ValueError:
                continue
    for key, vals in values.items():
        ev.gauges[key] = Src(vals, "gauges.log")


def vm_values(ev: Evidence, column: str, span: tuple[float, float] | None = None) -> list[float]:
    """vmstat's column in the given seconds, else in the run's windows."""
    pts = (ev.vmstat.value if ev.vmstat else {}).get(column) or []
    return [v for t, v in pts if _in_window(t, [span] if span else ev.windows)]


def thread_rows(ev: Evidence) -> Sequence[ThreadCpu]:
    return list(ev.threads.value) if ev.threads is not None else []


def engine_cpus(ev: Evidence) -> list[int] | None:
    """The CPUs vLLM's threads may run on: the union of their affinities within the cpuset where the run read
    them, else the container's cpuset; None where neither is known."""
    allowed = {c for t in thread_rows(ev) for c in (t.allowed or ())}
    if allowed:
        return sorted(allowed)
    return list(ev.cpuset.value) if ev.cpuset else None
