"""One bench run read back: its requests (`parse_requests`, with the source's definitions, seed 000 §1:
TTFT = t1 - t0; mean TPOT = (tN - t1)/(N - 1); decode rate = (N - 1)/(tN - t1), N the generated tokens from the
server's usage count, t1 and tN the first and last streamed chunks), the server's side from its /metrics
snapshots, and `summarize_run`: the run's figures and the flags that make it untrustworthy (failed requests,
fewer tokens than asked for, prefix-cache hits where none may be, a server restart, a stream that reached the
client in bursts, an arrival rate the client did not sustain, served files not in the page-cache state asked
for). `pool_point` pools a point's valid runs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.bench.stats import describe
from serving.standalone.knee import meets_slo
from serving.standalone.knee_runs import SEARCH_HITS_MAX_SHARE, goodput_disagreement, hits_flag

# An achieved arrival rate below this share of the requested one means the client, not the server, set the pace.
MIN_ACHIEVED_RATE_RATIO = 0.98
# A client TPOT median below this share of the server's own TPOT (its histogram) means the tokens reached the
# client in bursts: its chunk times are not the server's token times (seed 000 §1: cross-check against the
# server's token metrics). Seen here on 2 shared cores: a client TPOT of 0.0018 ms beside the server's 1.47 ms.
MIN_CLIENT_OVER_SERVER_TPOT = 0.5
# A client TTFT median later than the server's mean TTFT (its histogram) by more than this and by more than this
# factor means the first token waited on its way out (the API server fell behind its engine, or something held the
# stream): the client's TTFT is not the server's. Of the 245 measured runs kept here on 2 shared cores
# (2026-12-02), 17 were that late; 12 of them were flagged for their TPOT already. Seen: 154 ms beside 15.9 ms.
MAX_CLIENT_TTFT_LATE_MS = 50.0
MAX_CLIENT_OVER_SERVER_TTFT = 2.0
BUFFERED_STREAM = "buffered stream"
# A run asked to start cold (warm) whose served files were more (less) resident than this when it began did not
# have the state its workload names: pages mapped or locked by a process cannot be evicted, and a warm read
# can be evicted again under memory pressure before the run starts.
MAX_COLD_RESIDENT = 0.05
MIN_WARM_RESIDENT = 0.95


@dataclass(frozen=True)
class RequestObs:
    index: int
    success: bool
    start_s: float | None  # client send time, seconds after the run's first send
    input_tokens: int | None
    output_tokens: int | None  # N, the server's usage count
    chunks: int  # streamed chunks that carried choices: 1 + the chunk intervals
    ttft_s: float | None  # t1 - t0
    e2el_s: float | None  # tN - t0
    tpot_s: float | None  # (tN - t1) / (N - 1)
    decode_tok_s: float | None  # (N - 1) / (tN - t1)
    chunk_intervals_s: tuple[float, ...]
    error: str
    # A conversation's request (dataset conversations): its conversation (from 0) and turn (from 1); turn 1 carries
    # no history, every later turn the whole conversation before it.
    conversation: int | None = None
    turn: int | None = None

    @property
    def e2e_tok_s(self) -> float | None:
        """N / (tN - t0): tokens over the request's wall time, prefill included (another denominator than the
        decode rate; the source's 57.6 tok/s is this)."""
        if not self.success or not self.output_tokens or not self.e2el_s:
            return None
        return self.output_tokens / self.e2el_s


def _float(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(float(x)) else None


def _at(data: Mapping[str, Any], key: str, i: int) -> Any:
    seq = data.get(key)
    return seq[i] if isinstance(seq, list) and i < len(seq) else None


def _whole(x: Any) -> int | None:
    return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def parse_requests(result: Mapping[str, Any]) -> list[RequestObs]:
    """Per-request observations from a `vllm bench serve --save-detailed` result (or a conversations run's, in the
    same format, whose `conversation` and `turn` lists say where each request stood)."""
    lists = [result.get(k) for k in ("ttfts", "latencies", "errors")]
    n = max((len(v) for v in lists if isinstance(v, list)), default=0)
    starts = [_float(s) for s in result.get("start_times") or []]
    t_first = min((s for s in starts if s is not None), default=None)
    out: list[RequestObs] = []
    for i in range(n):
        error = str(_at(result, "errors", i) or "")
        ttft = _float(_at(result, "ttfts", i))
        e2el = _float(_at(result, "latencies", i))
        n_out = _at(result, "output_lens", i)
        n_out = int(n_out) if isinstance(n_out, int | float) else None
        itls = _at(result, "itls", i)
        intervals = tuple(float(x) for x in itls) if isinstance(itls, list) else ()
        success = not error and ttft is not None and e2el is not None
        tpot = rate = None
        if success and n_out is not None and n_out > 1 and ttft is not None and e2el is not None and e2el > ttft:
            tpot = (e2el - ttft) / (n_out - 1)
            rate = (n_out - 1) / (e2el - ttft)
        start = starts[i] if i < len(starts) else None
        n_in = _at(result, "input_lens", i)
        out.append(
            RequestObs(
                index=i,
                success=success,
                start_s=(start - t_first) if start is not None and t_first is not None else None,
                input_tokens=int(n_in) if isinstance(n_in, int | float) else None,
                output_tokens=n_out,
                chunks=(len(intervals) + 1) if success else 0,
                ttft_s=ttft,
                e2el_s=e2el,
                tpot_s=tpot,
                decode_tok_s=rate,
                chunk_intervals_s=intervals,
                error=error.strip().splitlines()[-1][:300] if error.strip() else "",
                conversation=_whole(_at(result, "conversation", i)),
                turn=_whole(_at(result, "turn", i)),
            )
        )
    return out


def outstanding(obs: Sequence[RequestObs]) -> dict[str, float | None]:
    """Requests in flight as the client saw them: the maximum and the time-weighted mean over the run."""
    events: list[tuple[float, int]] = []
    for o in obs:
        if o.start_s is None:
            continue
        end = o.start_s + (o.e2el_s if o.e2el_s is not None else 0.0)
        events += [(o.start_s, 1), (end, -1)]
    if not events:
        return {"max": None, "mean": None}
    events.sort(key=lambda e: (e[0], e[1]))
    level = peak = 0
    area = 0.0
    last = events[0][0]
    for t, step in events:
        area += level * (t - last)
        last = t
        level += step
        peak = max(peak, level)
    span = events[-1][0] - events[0][0]
    return {"max": float(peak), "mean": area / span if span > 0 else float(peak)}


def achieved_rate(obs: Sequence[RequestObs]) -> float | None:
    """Requests sent per second between the first and the last send: (n - 1) / (t_last - t_first)."""
    starts = sorted(o.start_s for o in obs if o.start_s is not None)
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return None
    return (len(starts) - 1) / (starts[-1] - starts[0])


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000.0


def server_figures(before_text: str, after_text: str) -> dict[str, Any]:
    """The server's side of a run: histogram and counter deltas between the two /metrics snapshots."""
    from probes.readers import metrics as m

    d = m.delta(m.snapshot_from_text(before_text, 0.0, 0.0), m.snapshot_from_text(after_text, 0.0, 0.0))

    def hist(name: str) -> dict[str, float | None]:
        hs = m.find_histograms(d, name)
        count = sum(h.count for h in hs)
        total = sum(h.sum_s for h in hs)
        p50 = hs[0].p50_s if len(hs) == 1 else None
        return {"count": count, "mean_ms": _ms(total / count) if count else None, "p50_ms": _ms(p50)}

    success = m.counter_by_label(d, m.REQUEST_SUCCESS, "finished_reason")
    return {
        "restarted": d.reset_detected,
        "requests_finished": sum(success.values()),
        "finished_reason": success,
        "prompt_tokens": m.counter_sum(d, m.PROMPT_TOKENS),
        "generation_tokens": m.counter_sum(d, m.GENERATION_TOKENS),
        "prefix_cache_queries": m.counter_sum(d, m.PREFIX_CACHE_QUERIES),
        "prefix_cache_hits": m.counter_sum(d, m.PREFIX_CACHE_HITS),
        "preemptions": m.counter_sum(d, m.PREEMPTIONS),
        "ttft": hist("vllm:time_to_first_token_seconds"),
        "itl": hist("vllm:inter_token_latency_seconds"),
        "tpot": hist("vllm:request_time_per_output_token_seconds"),
        "e2e": hist("vllm:e2e_request_latency_seconds"),
        "queue": hist("vllm:request_queue_time_seconds"),
        "prefill": hist("vllm:request_prefill_time_seconds"),
        "decode": hist("vllm:request_decode_time_seconds"),
    }


def _request_flags(
    obs: Sequence[RequestObs],
    result: Mapping[str, Any] | None,
    workload: Mapping[str, Any],
    data: Mapping[str, Any] | None = None,
    prompts: int | None = None,
) -> list[str]:
    """What the client's own record says is wrong: failed requests, a request count or output length other
    than the workload's (the denominators would differ). A trace's requests each have their own output length,
    in the trace's order (`data`: the manifest's workload_data); a searched run sends the prompts the client sized
    it with (`prompts`, serving/standalone/knee_runs.py)."""
    flags: list[str] = []
    ok = [o for o in obs if o.success]
    failed = len(obs) - len(ok)
    if result is not None and failed:
        errs = sorted({o.error for o in obs if not o.success and o.error})[:3]
        flags.append(f"{failed} of {len(obs)} requests failed" + (f" ({'; '.join(errs)})" if errs else ""))
    conversations = workload.get("dataset") == "conversations"
    not_sent = int((result or {}).get("not_sent") or 0) if conversations else 0
    if not_sent:
        flags.append(f"{not_sent} turns not sent (a failed turn ends its conversation; stdout.log says which)")
    if conversations:
        requested = int(workload["turns"]) * int(workload["num_conversations"])
    else:
        requested = int(prompts or (data or {}).get("requests") or workload["num_prompts"])
    if result is not None and len(obs) + not_sent != requested:
        flags.append(f"{len(obs)} requests recorded, {requested} requested")
    expected = list((data or {}).get("expected_output_lens") or [])
    if workload.get("output_len") is not None:
        short = [o for o in ok if o.output_tokens != int(workload["output_len"])]
        asked = f"{workload['output_len']}"
    else:
        short = [o for o in ok if o.index < len(expected) and o.output_tokens != expected[o.index]]
        asked = "the trace's lengths"
    if short:
        got = sorted({o.output_tokens for o in short}, key=lambda x: -1 if x is None else x)
        flags.append(
            f"output length mismatch: {len(short)} of {len(ok)} requests returned {got} tokens, {asked} requested "
            "(the denominators differ)"
        )
    return flags


def slo_request(o: RequestObs) -> dict[str, Any]:
    """A request as the one per-request SLO rule takes it (serving/standalone/knee.py meets_slo, by which the client's
    knee search judges its runs too), in ms. With one output token (or none counted) it has no TPOT to judge: None,
    which meets the TPOT threshold. With more, TPOT is (e2e - TTFT)/(N - 1) as vLLM's goodput and the client
    (knee_runs._requests) compute it, even where the last token came with the first (0, which meets it), unlike
    RequestObs.tpot_s, which has no interval to report there. parse_requests' success implies a TTFT and an e2e."""
    tpot = None
    if (o.output_tokens or 0) > 1 and o.ttft_s is not None and o.e2el_s is not None:
        tpot = (o.e2el_s - o.ttft_s) * 1000.0 / ((o.output_tokens or 2) - 1)
    return {"success": o.success, "ttft_ms": _ms(o.ttft_s), "tpot_ms": tpot, "e2e_ms": _ms(o.e2el_s),
            "output_tokens": o.output_tokens}  # fmt: skip


def slo_figures(
    obs: Sequence[RequestObs], duration_s: float | None, slo: Mapping[str, Any], vllm_goodput: Any = None
) -> dict[str, Any]:
    """The run against its per-request SLOs: the share of its requests meeting each, and all (a failed request
    meets none), and goodput, the requests meeting all per second of the run (vLLM's definition; a request with
    one output token meets the TPOT objective), beside what `vllm bench serve --goodput` printed for the run
    (`vllm_goodput`, its request_goodput) and a flag when the two differ (serving/standalone/knee_runs.py). Each request
    is judged by serving/standalone/knee.py meets_slo (slo_request)."""
    from serving.config.workload import Slo

    limits = Slo.model_validate(dict(slo)).thresholds_ms()
    reqs = [slo_request(o) for o in obs]
    n = len(obs)
    # An SLO that sets no threshold has nothing to miss, but a failed request still meets none (as on the host).
    met_all = sum(1 for r in reqs if meets_slo(r, limits))
    return {
        "thresholds_ms": limits,
        "min_share": float(slo.get("min_share", 0.9)),
        "requests": n,
        "met_all": met_all,
        "share_met": met_all / n if n else None,
        "share_met_each": {
            k: (sum(1 for r in reqs if meets_slo(r, {k: v})) / n if n else None) for k, v in limits.items()
        },
        "goodput_req_s": met_all / duration_s if duration_s else None,
        "vllm_goodput_req_s": _float(vllm_goodput),
        "goodput_flag": goodput_disagreement(met_all / duration_s if duration_s else None, _float(vllm_goodput)),
    }


def _server_flags(
    server: Mapping[str, Any],
    obs: Sequence[RequestObs],
    counted: bool,
    hits_intended: bool = False,
    prompt_tokens: float | None = None,
    tolerated_hits: float = 0.0,
) -> list[str]:
    """What the server's side says of the client's figures: a restart, prefix-cache hits (unless the workload
    shares prefixes on purpose; a searched run tolerates what chance gives, serving/standalone/knee_runs.py), a stream
    that reached the client in bursts (its TPOT beside the server's) or late
    (its TTFT beside the server's), tokens the client did not count."""
    flags: list[str] = []
    if server["restarted"]:
        flags.append("the server restarted during the run")
    hits = server["prefix_cache_hits"]
    if hits and not hits_intended:
        flags += [f for f in [hits_flag(hits, prompt_tokens, tolerated_hits)] if f]
    client_tpot = describe([_ms(o.tpot_s) for o in obs if o.success])["median"]
    server_tpot = server["tpot"]["mean_ms"]
    if client_tpot is not None and server_tpot and client_tpot < MIN_CLIENT_OVER_SERVER_TPOT * server_tpot:
        flags.append(
            f"{BUFFERED_STREAM}: the client's TPOT median {client_tpot:.3g} ms is under "
            f"{MIN_CLIENT_OVER_SERVER_TPOT:.0%} of the server's {server_tpot:.3g} ms "
            "(vllm:request_time_per_output_token_seconds): the tokens reached the client in bursts, so its chunk "
            "intervals, TPOT and decode rate are not the server's"
        )
    client_ttft = describe([_ms(o.ttft_s) for o in obs if o.success])["median"]
    server_ttft = server["ttft"]["mean_ms"]
    if (
        client_ttft is not None
        and server_ttft
        and client_ttft - server_ttft > MAX_CLIENT_TTFT_LATE_MS
        and client_ttft > MAX_CLIENT_OVER_SERVER_TTFT * server_ttft
    ):
        flags.append(
            f"{BUFFERED_STREAM}: the client's TTFT median {client_ttft:.3g} ms is {client_ttft - server_ttft:.3g} ms "
            f"after the server's mean {server_ttft:.3g} ms (vllm:time_to_first_token_seconds; tolerance "
            f"{MAX_CLIENT_TTFT_LATE_MS:g} ms and {MAX_CLIENT_OVER_SERVER_TTFT:g}x): the first token waited on its "
            "way to the client, so the client's TTFT is not the server's"
        )
    client_tokens = sum(o.output_tokens or 0 for o in obs)
    gen = server["generation_tokens"]
    if counted and gen is not None and gen != client_tokens:
        flags.append(
            f"the server generated {gen:g} tokens in the window, the client counted {client_tokens}: "
            "other traffic reached the server, or requests were cut off"
        )
    return flags


# A run whose wall clock moved this much more (or less) than CLOCK_MONOTONIC did stepped its wall clock (NTP, a
# VM's clock sync): `vllm bench serve` schedules arrivals on time.time(), so it sent them off their schedule.
# Seen here: a trace replay whose wall clock jumped 2.74 s mid-run sent its last 16 requests 2.7 s early.
MAX_WALL_CLOCK_STEP_S = 0.25


def wall_clock_step(status: Mapping[str, Any]) -> float | None:
    """How far the wall clock moved beyond the monotonic clock over the run (s), from status.json's two stamps of
    each clock; None where they were not recorded."""
    from datetime import datetime

    try:
        mono = float(status["ended_mono_s"]) - float(status["started_mono_s"])
        wall = (
            datetime.fromisoformat(str(status["ended_wall"])) - datetime.fromisoformat(str(status["started_wall"]))
        ).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None
    return wall - mono


def page_cache_figures(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The served files' page-cache state the run asked for and had: residency before and after (fincore), and
    the engine processes' read volume over the run (/proc/<pid>/io, summed over the pids read both times).
    None for a run recorded before the client made and read it."""
    cache = status.get("page_cache")
    if not isinstance(cache, Mapping):
        return None
    before, after = cache.get("before") or {}, cache.get("after") or {}
    io_a, io_b = status.get("engine_io_before") or {}, status.get("engine_io_after") or {}
    pids_a, pids_b = io_a.get("pids") or {}, io_b.get("pids") or {}
    both = sorted(set(pids_a) & set(pids_b), key=int)

    def delta(key: str) -> int | None:
        got = [(pids_b[p].get(key), pids_a[p].get(key)) for p in both]
        return sum(b - a for b, a in got if b is not None and a is not None) if both else None

    return {
        "state": (cache.get("made") or {}).get("state"),
        "made": cache.get("made"),
        "files": before.get("files"),
        "size_bytes": before.get("size_bytes"),
        "resident_before": before.get("fraction"),
        "resident_after": after.get("fraction"),
        "resident_bytes_before": before.get("resident_bytes"),
        "resident_bytes_after": after.get("resident_bytes"),
        "residency_error": before.get("error") or after.get("error"),
        "engine_read_bytes": delta("read_bytes"),
        "engine_rchar": delta("rchar"),
        "engine_pids": len(both),
        "engine_pids_unreadable": sorted(set(io_a.get("unreadable") or {}) | set(io_b.get("unreadable") or {})),
    }


def _page_cache_flags(cache: Mapping[str, Any] | None) -> list[str]:
    """A run whose served files were not in the state its workload asked for, or whose state nobody could read."""
    if not cache or cache["state"] not in ("cold", "warm"):
        return []
    made = cache.get("made") or {}
    if made.get("errors"):
        return [f"page cache not made {cache['state']}: {'; '.join(made['errors'][:3])}"]
    got = cache["resident_before"]
    if got is None:
        return [f"page cache {cache['state']} asked for, residency not read: {cache['residency_error']}"]
    if cache["state"] == "cold" and got > MAX_COLD_RESIDENT:
        return [
            f"page cache not cold: {got:.0%} of the served files were resident when the run began (at most "
            f"{MAX_COLD_RESIDENT:.0%}; a process maps or locks them)"
        ]
    if cache["state"] == "warm" and got < MIN_WARM_RESIDENT:
        return [
            f"page cache not warm: {got:.0%} of the served files were resident when the run began (at least "
            f"{MIN_WARM_RESIDENT:.0%}; memory pressure evicted them after the read)"
        ]
    return []


def _server_side(
    state: str, metrics_before: str | None, metrics_after: str | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """The server's figures over the run from its two /metrics snapshots, or why there are none."""
    if metrics_before and metrics_after:
        try:
            return server_figures(metrics_before, metrics_after), []
        except ValueError as exc:
            return None, [f"metrics snapshots unreadable: {exc}"]
    if state != "not run":
        return None, ["no metrics snapshot pair: the server's side of this run is unknown"]
    return None, []


def summarize_run(
    run: Mapping[str, Any],
    status: Mapping[str, Any],
    result: Mapping[str, Any] | None,
    metrics_before: str | None,
    metrics_after: str | None,
    workload: Mapping[str, Any],
    data: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One run's figures and flags, from its raw artifacts (status.json, result.json, the two snapshots);
    `data` is the manifest's workload_data (a trace's request count and output lengths)."""
    from serving.config.workload import intends_prefix_hits

    state = str(status.get("status", "not run"))
    flags = [f"run {state}: {status.get('reason', 'no reason recorded')}"] if state != "ok" else []
    obs = parse_requests(result) if result else []
    ok = [o for o in obs if o.success]
    flags += _request_flags(obs, result, workload, data, run.get("prompts"))
    grouped_requests = sum(1 for o in ok if o.output_tokens is not None and o.chunks < o.output_tokens)
    server, missing = _server_side(state, metrics_before, metrics_after)
    flags += missing
    if server is not None:
        tolerated = SEARCH_HITS_MAX_SHARE if run.get("search_phase") else 0.0
        prompt_tokens = _float((result or {}).get("total_input_tokens"))
        flags += _server_flags(
            server, obs, result is not None, intends_prefix_hits(workload, data), prompt_tokens, tolerated
        )
    cache = page_cache_figures(status)
    flags += _page_cache_flags(cache)
    step = wall_clock_step(status)
    if step is not None and abs(step) > MAX_WALL_CLOCK_STEP_S:
        flags.append(
            f"the wall clock stepped {step:+.2f} s during the run (beside CLOCK_MONOTONIC): vllm bench serve "
            "schedules arrivals on it, so its requests left off their schedule"
        )
    rate = achieved_rate(obs)
    requested = run.get("request_rate")
    rate_ratio = rate / requested if rate is not None and requested else None
    # Only evenly spaced arrivals (burstiness .inf, null in JSON) test the client. With drawn gaps (Poisson,
    # bursty) vLLM rescales them so the last request leaves at n/rate, but the first gap is drawn too, so
    # (n - 1)/(last - first) is (n - 1)/(n - rate * gap1): for 24 Poisson arrivals under 0.98 in 41% of runs by
    # chance. There the ratio is reported, not judged.
    evenly = workload.get("burstiness") in (None, math.inf)
    if evenly and rate_ratio is not None and rate_ratio < MIN_ACHIEVED_RATE_RATIO:
        flags.append(
            f"achieved arrival rate {rate:.3g} req/s is {rate_ratio:.1%} of the requested {requested:g}: "
            "the client did not sustain it"
        )
    duration = _float((result or {}).get("duration"))
    slo = (
        slo_figures(obs, duration, workload["slo"], (result or {}).get("request_goodput"))
        if workload.get("slo")
        else None
    )
    flags += [slo["goodput_flag"]] if slo and slo["goodput_flag"] else []
    out_tokens = sum(o.output_tokens or 0 for o in ok)
    intervals = [x for o in ok for x in o.chunk_intervals_s]
    return {
        "id": run["id"],
        "point": run["point"],
        "phase": run["phase"],
        "seed": run.get("seed"),
        "max_concurrency": run.get("max_concurrency"),
        "request_rate": requested,
        "status": state,
        "valid": state == "ok" and not flags,
        "flags": flags,
        "started_unix_s": status.get("started_unix_s"),
        "wall_clock_step_s": step,
        "ended_unix_s": status.get("ended_unix_s"),
        "requests": len(obs),
        "requests_ok": len(ok),
        "requests_failed": len(obs) - len(ok),
        "duration_s": duration,
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / duration if duration else None,
        "request_s": len(ok) / duration if duration else None,
        "ttft_ms": describe([_ms(o.ttft_s) for o in ok]),
        "tpot_ms": describe([_ms(o.tpot_s) for o in ok]),
        "decode_tok_s": describe([o.decode_tok_s for o in ok]),
        "e2el_ms": describe([_ms(o.e2el_s) for o in ok]),
        "chunk_interval_ms": describe([x * 1000 for x in intervals]),
        "grouped_streaming": grouped_requests > 0,
        "grouped_requests": grouped_requests,
        "tokens_per_chunk": describe([o.output_tokens / o.chunks for o in ok if o.output_tokens and o.chunks]),
        "achieved_rate_req_s": rate,
        "achieved_over_requested": rate_ratio,
        "outstanding": outstanding(obs),
        "vllm_reported": {
            k: (result or {}).get(k)
            for k in ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "median_e2el_ms", "output_throughput")
        },
        "server": server,
        "prefix_cache_hit_rate": _hit_rate(server),
        "page_cache": cache,
        "slo": slo,
    }


def _hit_rate(server: Mapping[str, Any] | None) -> float | None:
    """Prefix-cache hits over queries in the run's window (tokens; vllm:prefix_cache_*_total deltas)."""
    if not server or not server.get("prefix_cache_queries"):
        return None
    return float(server.get("prefix_cache_hits") or 0) / float(server["prefix_cache_queries"])


def pool_point(
    point_id: str, runs: Sequence[Mapping[str, Any]], obs: Mapping[str, Sequence[RequestObs]]
) -> dict[str, Any]:
    """A point's VALID measured runs pooled: per-request figures over all their requests, per-run rates across runs.

    A flagged run (a failed or short run, a buffered stream, a missed arrival rate, a stepped clock: see
    summarize_run) is left out of the pool, as make compare and the llm-d documents leave it out; `left_out` says
    which and why, and the per-run table still shows its figures."""
    measured = [r for r in runs if r["point"] == point_id and r["phase"] == "measured"]
    usable = [r for r in measured if r["valid"]]
    left_out = [
        f"{r['id']}: {r['flags'][0] if r['flags'] else 'run ' + str(r['status'])}" for r in measured if not r["valid"]
    ]
    reqs = [o for r in usable for o in obs.get(r["id"], []) if o.success]
    first = measured[0] if measured else {}
    return {
        "point": point_id,
        "max_concurrency": first.get("max_concurrency"),
        "request_rate": first.get("request_rate"),
        "runs": len(measured),
        "runs_ok": sum(1 for r in measured if r["status"] == "ok"),
        "runs_valid": len(usable),
        "left_out": left_out,
        "ttft_ms": describe([_ms(o.ttft_s) for o in reqs]),
        "tpot_ms": describe([_ms(o.tpot_s) for o in reqs]),
        "decode_tok_s": describe([o.decode_tok_s for o in reqs]),
        "e2e_tok_s": describe([o.e2e_tok_s for o in reqs]),
        "e2el_ms": describe([_ms(o.e2el_s) for o in reqs]),
        "chunk_interval_ms": describe([x * 1000 for o in reqs for x in o.chunk_intervals_s]),
        "output_tok_s": describe([r["output_tok_s"] for r in usable]),
        "request_s": describe([r["request_s"] for r in usable]),
        "achieved_over_requested": describe([r["achieved_over_requested"] for r in usable]),
        "outstanding_max": describe([r["outstanding"]["max"] for r in usable]),
        "grouped_streaming": any(r["grouped_streaming"] for r in usable),
        "grouped_requests": sum(r["grouped_requests"] for r in usable),
        "requests_ok": len(reqs),
        "server_ttft_mean_ms": describe([(r["server"] or {}).get("ttft", {}).get("mean_ms") for r in usable]),
        "server_tpot_mean_ms": describe([(r["server"] or {}).get("tpot", {}).get("mean_ms") for r in usable]),
        "server_queue_mean_ms": describe([(r["server"] or {}).get("queue", {}).get("mean_ms") for r in usable]),
        "prefix_cache_hit_rate": describe([r.get("prefix_cache_hit_rate") for r in usable]),
        "slo_share_met": describe([(r.get("slo") or {}).get("share_met") for r in usable]),
        "goodput_req_s": describe([(r.get("slo") or {}).get("goodput_req_s") for r in usable]),
        "ttft_ms_by_turn": ttft_by_turn(reqs),
    }


def ttft_by_turn(reqs: Sequence[RequestObs]) -> dict[str, dict[str, Any]]:
    """TTFT per turn number of conversations' requests ({"1": describe(...), ...}; {} for other datasets): turn 1
    prefills its own message, a later turn the whole history, most of it cached by the turn before."""
    turns = sorted({o.turn for o in reqs if o.turn is not None})
    return {str(t): describe([_ms(o.ttft_s) for o in reqs if o.turn == t]) for t in turns}
