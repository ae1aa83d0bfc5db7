"""How the engine's output scales with the load (seed 004, the case study's turning point): after rounds of NCCL
tuning that all left single-request decode at ~57 tok/s, a concurrency sweep showed aggregate output rising 57.6 ->
97.4 -> 144.4 tok/s at 1, 2 and 4 requests while each request slowed only a little. That rules out a shared link or
bandwidth ceiling (shared, it would have been split between the requests) and points at per-request latency in the
compute path; interconnect tuning cannot move it.

Read across a bench's points, lowest load first (concurrency, or else arrival rate): at each step, the share of the
added load that became output, `gain` = (aggregate ratio - 1) / (load ratio - 1) (1: every added request got the
first one's rate; 0: the aggregate did not move). A step below FLAT_GAIN: a shared limit is reached there (the
requests divide one resource: compute, memory bandwidth, a link, the CPU, the engine's batch); the rules beside this
one say which. Otherwise the gain across the whole sweep, lowest load to highest, at IDLE_GAIN or more: idle capacity
at low load, the ceiling is per-request latency (seed 004's own sweep: 0.69 and 0.48 a step, 0.50 across). In between
it cannot tell. The whole sweep, not each step, decides idle capacity because a step's gain is a ratio of two
points' medians: on this project's 2-core machine a point moves by up to ±25% from bench to bench (docs/benchmarks.md
"agreement band"), so one step of a scaling engine can read 0.4 lower or higher than the next.

Each finding gives the per-layer time budget where the model's config gives its layer count (TPOT at the lowest load
/ layers: seed 004's 17.5 ms / 78 = ~225 us), and the decode floor where the class gives its memory bandwidth and the
model the weight bytes one decode step reads (serving/plan/model_facts.py): those bytes per rank (tensor parallelism
splits them; pipeline stages read theirs one after another) over the bandwidth, the time to read the weights once,
and how far TPOT sits above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from serving.diagnose.evidence import Evidence, LoadPoint
from serving.diagnose.model import Figure, Finding
from serving.diagnose.rules import CannotRun, Rule, fig

SEED = "004"
IDLE_GAIN = 0.4
FLAT_GAIN = 0.15


def _load(p: LoadPoint) -> float:
    return float(p.request_rate if p.request_rate is not None else p.concurrency or 0.0)


def _series(ev: Evidence) -> tuple[list[LoadPoint], str]:
    """The points of one kind of load with at least two loads: closed-loop concurrencies, else arrival rates."""
    pts: Sequence[LoadPoint] = ev.points.value if ev.points is not None else []
    closed = [p for p in pts if p.request_rate is None and p.concurrency]
    rates = [p for p in pts if p.request_rate is not None and p.request_rate > 0]
    for series, kind in ((closed, "concurrency"), (rates, "request rate")):
        if len({_load(p) for p in series}) >= 2:
            return sorted(series, key=_load), kind
    if ev.kind == "capture":
        raise CannotRun("a capture offers one load: scaling reads a bench with several (make bench WORKLOAD=default: "
                        "concurrency 1, 2, 4)")  # fmt: skip
    raise CannotRun("the bench has one load point: scaling needs several concurrencies or rates (make bench "
                    "WORKLOAD=default: 1, 2, 4)")  # fmt: skip


def gains(series: Sequence[LoadPoint]) -> list[float]:
    """Each step's share of the added load that became output."""
    return [
        (b.aggregate_tok_s / a.aggregate_tok_s - 1.0) / (_load(b) / _load(a) - 1.0)
        for a, b in pairwise(series)
        if a.aggregate_tok_s > 0 and _load(b) > _load(a)
    ]


def _decode_share(p: LoadPoint, n: int | None) -> float | None:
    """Decode's share of a request's time at a point: (N-1) x TPOT / (TTFT + (N-1) x TPOT)."""
    if not n or p.tpot_ms is None or p.ttft_ms is None:
        return None
    decode = (n - 1) * p.tpot_ms
    return decode / (p.ttft_ms + decode) if p.ttft_ms + decode > 0 else None


def _slower(first: LoadPoint, last: LoadPoint) -> tuple[str, float]:
    """How a request at the highest load took longer than at the lowest (waiting for its first token, or each token
    coming slower), and the share of its time the added load accounts for: 1 - e2e(lowest) / e2e(highest)."""
    parts = []
    if first.ttft_ms and last.ttft_ms:
        parts.append((last.ttft_ms / first.ttft_ms, f"TTFT {first.ttft_ms:.0f} -> {last.ttft_ms:.0f} ms"))
    if first.tpot_ms and last.tpot_ms:
        parts.append((last.tpot_ms / first.tpot_ms, f"TPOT {first.tpot_ms:.2f} -> {last.tpot_ms:.2f} ms"))
    said = ", ".join(text for _r, text in sorted(parts, reverse=True)) or "no per-request times"
    if first.e2el_ms and last.e2el_ms and last.e2el_ms > first.e2el_ms:
        return said, 1.0 - first.e2el_ms / last.e2el_ms
    return said, 0.0


def _figure(name: str, value: float, unit: str, artifact: str) -> Figure:
    return Figure(name=name, value=value, unit=unit, artifact=artifact)


def budget(ev: Evidence, first: LoadPoint) -> tuple[list[Figure], list[str]]:
    """The per-layer budget and the decode floor at the lowest load, as figures and as sentences."""
    figures: list[Figure] = []
    said: list[str] = []
    model = ev.model.value if ev.model is not None else {}
    layers = model.get("layers")
    if first.tpot_ms is None:
        return figures, said
    both = "summary.json, manifest.json"
    if isinstance(layers, int) and layers > 0:
        us = first.tpot_ms * 1000.0 / layers
        figures += [
            fig("decoder layers", ev.model, value=layers),
            _figure("TPOT per layer at the lowest load", round(us, 1), "us", both),
        ]
        said.append(f"{first.tpot_ms:.2f} ms a token over {layers} layers is {us:.0f} us a layer")
    else:
        said.append("no per-layer budget: the bench manifest has no model facts with a layer count")
    active, bw = model.get("active_weight_bytes"), ev.memory_bandwidth_gb_s
    tp, pp = ev.parallel
    if isinstance(active, int) and active > 0 and bw is not None:
        per_rank = active / tp
        floor_ms = per_rank / (float(bw.value) * 1e9) * 1000.0
        figures += [
            _figure("weight bytes a decode step reads, per tensor-parallel rank", round(per_rank / 1e9, 3), "GB",
                    "manifest.json"),
            fig("the class's memory bandwidth", bw, "GB/s"),
            _figure("decode floor: those bytes read once", round(floor_ms, 3), "ms", "manifest.json"),
            _figure("TPOT over the decode floor", round(first.tpot_ms / floor_ms, 1), "x", both),
        ]  # fmt: skip
        stages = f" ({pp} pipeline stages read theirs in turn)" if pp > 1 else ""
        said.append(
            f"reading its {per_rank / 1e9:.2f} GB of weights per rank once at {float(bw.value):g} GB/s takes "
            f"{floor_ms:.2f} ms{stages}: TPOT is {first.tpot_ms / floor_ms:.1f}x that"
        )
    elif bw is None:
        said.append(
            "no decode floor: the bench's class gives no memory bandwidth (gpu_class.reference.memory_bandwidth_gb_s)"
        )
    else:
        said.append("no decode floor: the model facts give no weight bytes a decode step reads")
    return figures, said


def run(ev: Evidence) -> list[Finding]:
    series, kind = _series(ev)
    g = gains(series)
    if not g:
        raise CannotRun("no aggregate output at the lowest load")
    first, last = series[0], series[-1]
    unit = "" if kind == "concurrency" else " req/s"
    loads = ", ".join(f"{_load(p):g}" for p in series)
    aggs = " -> ".join(f"{p.aggregate_tok_s:.1f}" for p in series)
    held = (last.decode_tok_s / first.decode_tok_s) if first.decode_tok_s and last.decode_tok_s else None
    per_req = "no per-request decode rate"
    if held is not None:
        per_req = (
            f"each request's decode rate {first.decode_tok_s:.1f} -> {last.decode_tok_s:.1f} tok/s ({held:.0%} of "
            "the lowest load's)"
        )
    figures = [
        _figure(f"aggregate output at {kind} {_load(p):g}{unit}", round(p.aggregate_tok_s, 1), "tok/s", "summary.json")
        for p in series
    ]
    figures += [
        _figure(f"share of the added load that became output, {_load(a):g} -> {_load(b):g}", round(x, 2), "",
                "summary.json")
        for (a, b), x in zip(pairwise(series), g, strict=True)
    ]  # fmt: skip
    if held is not None:
        figures.append(
            _figure("per-request decode rate at the highest load over the lowest's", round(held, 2), "", "summary.json")
        )
    more, sentences = budget(ev, first)
    figures += more
    n = ev.client.get("output_len").value if ev.client.get("output_len") else None  # type: ignore[union-attr]
    seen = f"{kind} {loads}: aggregate {aggs} tok/s; {per_req}" + "".join(f"; {s}" for s in sentences)
    overall = gains([first, last])[0]
    flat = next((i for i, x in enumerate(g) if x < FLAT_GAIN), None)
    if flat is not None:
        a, b = series[flat], series[flat + 1]
        longer, lost = _slower(first, last)
        return [Finding(
            rule="scaling", seed=SEED, verdict="consistent with",
            title=f"a shared limit from {kind} {_load(a):g}{unit}: aggregate output went {a.aggregate_tok_s:.1f} -> "
                  f"{b.aggregate_tok_s:.1f} tok/s ({g[flat]:.0%} of the added load) while each request took longer "
                  f"({longer}): the requests divide one resource (compute, memory bandwidth, a link, the CPU, or the "
                  "engine's batch)",
            symptom=seen, explains=round(min(1.0, lost), 3), figures=figures,
            not_established="which resource: the rules beside this one read the queue, the CPU, the cgroup, the KV "
                            "cache and the GPU in the same seconds",
            next_steps=[f"make capture WORKLOAD=<this workload at {kind} {_load(b):g}> (what the host does at the "
                        "limit)", "make bench SEARCH=concurrency (the highest load whose SLOs hold)"],
        )]  # fmt: skip
    if overall >= IDLE_GAIN:
        share = _decode_share(first, n)
        return [Finding(
            rule="scaling", seed=SEED, verdict="consistent with",
            title=f"idle capacity at low load: aggregate output kept rising ({aggs} tok/s at {kind} {loads}) with each "
                  "request's rate roughly held, so the ceiling at the lowest load is per-request latency in the "
                  "compute path, not a shared link or bandwidth limit: interconnect tuning will not move it (seed "
                  "004: NCCL settings left its 57.6 tok/s where it was)",
            symptom=seen, explains=round(share or 0.0, 3), figures=figures,
            not_established="which part of a layer's time: attention, MoE/GEMM, dequantisation or collectives",
            next_steps=[
                "make profile (a layer's time split into attention, MoE/GEMM, dequantisation and collective kernels)",
                "make compare VARIABLE=model A=<bench of this quantization> B=<bench of another> (the dequantisation "
                "hypothesis)",
                "an NCCL setting A/B (make compare VARIABLE=env.NCCL_...) only where the profile shows collectives "
                "are a large share of a layer",
            ],
        )]  # fmt: skip
    return [Finding(
        rule="scaling", seed=SEED, verdict="cannot tell",
        title=f"aggregate output rose by {overall:.0%} of the added load across the sweep, no step flat: between "
              "idle capacity and a shared limit, the sweep does not say which",
        symptom=seen, explains=0.0, figures=figures,
        not_established="where the limit is, and what it is",
        next_steps=[f"make bench WORKLOAD=<a workload whose {'concurrencies' if kind == 'concurrency' else 'rates'} go "
                    f"beyond {_load(last):g}>"],
    )]  # fmt: skip


RULE = Rule("scaling", SEED, run)
