"""A searched load's runs (serving/standalone/knee.py decides which load): how many prompts a run sends so that it holds
its load for the stated duration, what one run says once its ramp-up is left out, and the steady runs that check the
search's answer.

Seed 000 §4: a fixed-rate test reproduces "a production queue fed at a fixed arrival rate". A run of 16 requests
at 64 req/s is a quarter-second burst that an engine running 8 sequences absorbs before a queue forms, so the search
once called 64 req/s held where a plain `vllm bench serve --goodput` held 16 and failed 32 (issue 29). So a run
sends `rate x duration` prompts (a concurrency run, enough for its concurrency to be held that long, sized from the
throughput the last run measured), the first `ramp_up_s` of sends are kept out of the figures, and a run that did
not hold its load long enough, or completed too few requests after the ramp-up, is invalid and says so.

Goodput is vLLM's definition (vllm/benchmarks/serve.py calculate_metrics, 0.32.0): completed requests meeting every
SLO, a metric meeting its SLO at <= the threshold, a request with one output token meeting TPOT, per second of the
run. It is given twice: over the whole run, which must equal what `vllm bench serve --goodput` printed for the
same run (a disagreement is flagged: the two would not be judging the same thing), and over the measured interval,
which is what the search judges.

Standard library only: copied beside images/vllm/bench_client.py into the client container (as knee.py is), and
imported by the controller.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

try:  # in the client container, knee.py sits beside this file; on the controller it is serving.standalone.knee
    import knee  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - the controller's import
    from serving.standalone import knee  # type: ignore[no-redef,unused-ignore]

# A concurrency run sends at least this many waves of its concurrency.
MIN_WAVES = 4
# A run whose sends after the ramp-up span less than this share of the stated duration did not hold its load.
MIN_HELD_SHARE = 0.5
# A rate run's sends are evenly spaced (the search needs burstiness .inf), the i-th due i/rate after the first; vllm
# bench serve sends a late one as soon as it can, so a client that stalls sends its backlog in one burst. A run whose
# client fell further behind than this says so: its share met is that of bunched arrivals. Not invalid: where the
# client shares the server's CPUs (this 2-core machine) the stall is the load's own effect, and here it came in two
# of two runs at 20 req/s (0.26 s and 0.96 s; shares met 0.950 and 0.558), and in one of three at 33.9 req/s
# (1.17 s; 0.029, where the other two had 0.97 and 1.0).
MAX_SEND_LAG_S = 0.25
# The engine's running count (vllm:num_requests_running, read twice a second into gauges.log by the client) over a
# run's measured interval: with fewer readings than this the run is too short to tell a steady state (plateau_note).
PLATEAU_MIN_READINGS = 4


def prompts_for(
    kind: str, load: float, duration_s: float, min_prompts: int, measured: Sequence[tuple[float, float]] = ()
) -> int:
    """The prompts a run at `load` sends to hold it for `duration_s`: a rate sends rate x duration; a concurrency
    sends what a measured request throughput (`measured`: (load, req/s) of the runs so far, oldest first) says
    fills the duration. The newest run at this load says it best. Otherwise the newest run's throughput is scaled
    by the square root of the load ratio, at most twice and at least half: a closed loop's throughput grows at most
    in proportion to its concurrency and not at all once the engine is full, so the run lasts between 0.7 and 1.4
    times the duration. Proportional scaling up made a saturated engine's run at twice the concurrency last twice
    it (1,207 prompts for a 15 s load at concurrency 16 here); proportional scaling down made the 30 s check at
    concurrency 16, sized from a saturated concurrency 32 (about 50 req/s at both), end after 12 s, too short to
    count. At least MIN_WAVES waves, and never fewer than `min_prompts`."""
    if kind == "rate":
        return max(math.ceil(load * duration_s), min_prompts)
    waves = int(load) * MIN_WAVES
    known = [(lo, r) for lo, r in measured if r > 0]
    if not known:
        return max(waves, min_prompts)
    same = [r for lo, r in known if lo == load]
    if same:
        est = same[-1]
    else:
        last_load, last_req_s = known[-1]
        est = last_req_s * min(2.0, max(0.5, math.sqrt(load / last_load)))
    return max(math.ceil(est * duration_s), waves, min_prompts)


def _requests(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """vLLM's detailed result as one dict per request: start (s, vLLM's clock), success, ttft_ms, tpot_ms (TPOT =
    (e2e - TTFT)/(N - 1); None for one token), e2e_ms, output_tokens."""
    n = max(len(result.get(k) or []) for k in ("ttfts", "latencies", "errors", "start_times"))

    def at(key: str, i: int) -> Any:
        seq = result.get(key) or []
        return seq[i] if i < len(seq) else None

    def ms(x: Any) -> float | None:
        # NaN or inf is no measurement: the request has no figure, so it failed (the controller reads it so too).
        return float(x) * 1000.0 if isinstance(x, int | float) and math.isfinite(x) else None

    out = []
    for i in range(n):
        ttft, e2e, tokens, start = (
            ms(at("ttfts", i)),
            ms(at("latencies", i)),
            at("output_lens", i),
            at("start_times", i),
        )
        ok = not at("errors", i) and ttft is not None and e2e is not None
        tpot = None
        if ok and ttft is not None and e2e is not None and isinstance(tokens, int) and tokens > 1:
            tpot = (e2e - ttft) / (tokens - 1)
        out.append({"start": start if isinstance(start, int | float) else None, "success": ok, "ttft_ms": ttft,
                    "tpot_ms": tpot, "e2e_ms": e2e, "output_tokens": tokens})  # fmt: skip
    return out


def run_outcome(
    result: Mapping[str, Any],
    slo_ms: Mapping[str, float],
    request_rate: float | None,
    duration_s: float,
    ramp_up_s: float,
    min_completed: int,
    running: Sequence[tuple[float, float]] = (),
) -> dict[str, Any]:
    """What one searched run says (serving/standalone/knee.py Outcome's fields, and the figures the report shows).

    Measured: the requests sent at least `ramp_up_s` after the run's first send. share_met: the share of them
    meeting every SLO (a failed request meets none); achieved_over_requested (a rate): their achieved arrival rate
    ((n - 1)/(last send - first)) over the requested; goodput_req_s: those meeting every SLO per second of the
    measured interval (from ramp-up's end to the last of them finishing). goodput_run_req_s: vLLM's figure
    recomputed over the whole run (met / the result's duration); vllm_goodput_req_s: what vLLM printed.
    held_s: how long the measured sends spanned. Invalid, with a note naming why: no request, fewer than
    `min_completed` completed after the ramp-up, or sends after the ramp-up spanning under MIN_HELD_SHARE of
    duration_s - ramp_up_s (the run ended before the load was held), or an engine whose running count (`running`:
    (CLOCK_MONOTONIC s, count), the clock of vLLM's send times) had no plateau over the measured interval
    (plateau_note; not judged without readings). A valid rate run whose client fell more than
    MAX_SEND_LAG_S behind its schedule and caught up says so in its note (send_lag_s: the most it fell behind)."""
    reqs = _requests(result)
    starts = [r["start"] for r in reqs if r["start"] is not None]
    out: dict[str, Any] = {"prompts": len(reqs), "ramp_up_s": ramp_up_s, "duration_s": duration_s}
    whole = result.get("duration")
    met_all = sum(1 for r in reqs if knee.meets_slo(r, slo_ms))
    out["goodput_run_req_s"] = met_all / whole if isinstance(whole, int | float) and whole > 0 else None
    vllm = result.get("request_goodput")
    out["vllm_goodput_req_s"] = float(vllm) if isinstance(vllm, int | float) else None
    out["goodput_flag"] = goodput_disagreement(out["goodput_run_req_s"], out["vllm_goodput_req_s"])
    blank = {"share_met": None, "achieved_over_requested": None, "goodput_req_s": None, "held_s": None,
             "measured": 0, "completed_after_ramp_up": 0, "running_level": None}  # fmt: skip
    if not reqs or not starts:
        return {**out, **blank, "valid": False, "note": "no request with a send time: nothing measured"}
    t0 = min(starts)
    measured = [r for r in reqs if r["start"] is not None and r["start"] - t0 >= ramp_up_s]
    completed = [r for r in measured if r["success"]]
    sends = sorted(r["start"] for r in measured)
    held = sends[-1] - sends[0] if len(sends) > 1 else 0.0
    out.update(blank, measured=len(measured), completed_after_ramp_up=len(completed), held_s=held)
    if measured:
        met = sum(1 for r in measured if knee.meets_slo(r, slo_ms))
        out["share_met"] = met / len(measured)
        ends = [r["start"] + r["e2e_ms"] / 1000.0 for r in completed]
        span = (max(ends) if ends else sends[-1]) - (t0 + ramp_up_s)
        out["goodput_req_s"] = met / span if span > 0 else None
        if request_rate and len(sends) > 1 and held > 0:
            out["achieved_over_requested"] = (len(sends) - 1) / held / request_rate
    lag = send_lag(starts, request_rate) if request_rate else None
    wanted_held = MIN_HELD_SHARE * (duration_s - ramp_up_s)
    if len(completed) < min_completed:
        note = (f"too short for a steady state: {len(completed)} request(s) completed after the {ramp_up_s:g} s "
                f"ramp-up, needs {min_completed}")  # fmt: skip
    elif held < wanted_held:
        note = (f"too short for a steady state: the load was held {held:.1f} s after the {ramp_up_s:g} s ramp-up, "
                f"under half the stated {duration_s - ramp_up_s:g} s")  # fmt: skip
    else:
        ends = [r["start"] + r["e2e_ms"] / 1000.0 for r in completed]
        note, out["running_level"] = plateau_note(running, t0, t0 + ramp_up_s, max(ends) if ends else sends[-1])
    out["send_lag_s"] = None if lag is None else lag[0]
    valid = not note and out["share_met"] is not None
    kept_up = (out["achieved_over_requested"] or 0) >= knee.MIN_RATE_RATIO
    if valid and lag is not None and lag[0] > MAX_SEND_LAG_S and kept_up:
        note = (f"arrivals bunched: the client fell {lag[0]:.2f} s behind its schedule at {lag[1]:.1f} s and caught "
                "up (a stall on its CPUs)")  # fmt: skip
    valid = valid and (request_rate is None or out["achieved_over_requested"] is not None)
    return {**out, "valid": bool(valid), "note": note}


def plateau_note(
    running: Sequence[tuple[float, float]], t0: float, start: float, end: float
) -> tuple[str, float | None]:
    """Whether the engine's running count reached its plateau in time: its level is the median of the readings in
    the second half of the measured interval (start to end); the run reached it when a reading from the run's first
    send (t0) on was at that level by the interval's midpoint. ("", the level) when it did; a note naming why not
    otherwise; ("", None) without any reading. A count that reached its level and then dipped (a client or API
    server starved of CPU, here) has reached it: this judges a load still building when the run ended."""
    if not running:
        return "", None
    window = [v for t, v in running if start <= t <= end]
    if len(window) < PLATEAU_MIN_READINGS:
        return (f"too short for a steady state: {len(window)} reading(s) of the engine's running count after the "
                f"ramp-up, {PLATEAU_MIN_READINGS} needed"), None  # fmt: skip
    middle = (start + end) / 2
    level = float(statistics.median(v for t, v in running if middle <= t <= end))
    reached = next((t for t, v in running if t >= t0 and v >= level), None)
    if reached is None or reached > middle:
        when = "never" if reached is None else f"{reached - t0:.1f} s into the run, after"
        return (f"no steady state: the engine's running count reached its level ({level:g}, the median of the "
                f"measured interval's second half) {when} the interval's midpoint ({middle - t0:.1f} s): the load "
                "was still building"), level  # fmt: skip
    return "", level


def running_counts(lines: Iterable[str]) -> list[tuple[float, float]]:
    """gauges.log's vllm:num_requests_running readings ("mono\twall\tname{labels} value"), engines summed, by
    time."""
    by_time: dict[float, float] = {}
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or not parts[2].startswith("vllm:num_requests_running{"):
            continue
        try:
            mono, value = float(parts[0]), float(parts[2].rsplit(" ", 1)[1])
        except (ValueError, IndexError):
            continue
        by_time[mono] = by_time.get(mono, 0.0) + value
    return sorted(by_time.items())


def send_lag(starts: Sequence[float], rate: float) -> tuple[float, float] | None:
    """How far the client fell behind its schedule of evenly spaced sends, and when (s from the first send): the
    i-th send is due i/rate after the first. None with fewer than two sends."""
    xs = sorted(starts)
    if len(xs) < 2:
        return None
    lags = [(x - xs[0] - i / rate, x - xs[0]) for i, x in enumerate(xs)]
    return max(lags)


def goodput_disagreement(ours: float | None, vllm: float | None) -> str:
    """A flag when our whole-run goodput is not vLLM's own for the same run ("" when they agree or either is
    missing): the same requests, thresholds and duration must give the same figure to well within rounding."""
    if ours is None or vllm is None or math.isclose(ours, vllm, rel_tol=1e-6, abs_tol=1e-9):
        return ""
    return (
        f"goodput disagrees with vllm bench serve's own for this run: {ours:.4g} req/s recomputed, {vllm:.4g} "
        "printed (the SLO or the request definitions differ)"
    )


# vLLM's random dataset makes each prompt of consecutive token ids from a random offset (vllm/benchmarks/datasets/
# datasets.py generate_token_sequence, 0.32.0), so prompts of one run whose offsets coincide are the same prompt and
# the prefix cache serves the later one, which no per-run cache salt can stop: pairs grow as n^2/vocabulary, their
# share of a run's prompt tokens as n/vocabulary. On the tiny model's 4,096-token vocabulary a 12 s check at 28.3
# req/s (340 prompts of 64 tokens) met 1,152 tokens of hits, 5.3%; a 30 s check at 30 req/s sends 900. A searched
# run is sized by time, so long enough to meet them: it keeps its figures while the hits stay under this share of
# its prompt tokens (its prefill work lessened by at most that much), and says their share; a plain bench's run
# tolerates none. On a real model's vocabulary (150,000 tokens) the same runs meet a few pairs.
SEARCH_HITS_MAX_SHARE = 0.2


def hits_flag(hits: float | None, prompt_tokens: float | None, tolerated_share: float = 0.0) -> str:
    """The flag for prefix-cache hits where the workload intends none ("" when there is none to raise): any hit,
    or for a searched run (tolerated_share SEARCH_HITS_MAX_SHARE) hits above that share of the run's prompt tokens
    (any hit when the prompt tokens are unknown)."""
    if not hits:
        return ""
    share = hits / prompt_tokens if prompt_tokens else None
    if tolerated_share and share is not None and share <= tolerated_share:
        return ""
    said = f"prefix-cache hits where none may be: {hits:g} tokens (the cache served part of the prefill)"
    if tolerated_share and share is not None:
        said += f", {share:.1%} of the run's prompt tokens, above the {tolerated_share:.0%} a searched run tolerates"
    return said


# --- the steady runs that check the answer --------------------------------------------------------------------


def checks_for(result: Mapping[str, Any]) -> list[tuple[float, str]]:
    """The steady runs that check a finished search: the knee must hold; the lowest failing load must fail. None
    for a search that found nothing to check."""
    lo, hi = result.get("bracket") or [None, None]
    if result.get("status") not in ("found", "held_to_limit") or lo is None:
        return []
    return [(lo, "holds")] + ([(hi, "fails")] if hi is not None and result.get("status") == "found" else [])


def conclude(result: dict[str, Any], checks: Sequence[Mapping[str, Any]], verify_s: float) -> dict[str, Any]:
    """The search's result with its steady checks (each: load, expect, run, valid, share_met,
    achieved_over_requested, note): their verdicts (knee.holds on the search's criteria), and, when one did not
    come out as expected or could not be judged, status "not_converged" with why. The summary says which."""
    crit = result["criteria"]

    def fmt(load: float) -> str:
        return f"{load:.3g} req/s" if result["kind"] == "rate" else f"concurrency {int(load)}"

    judged, wrong = [], []
    for c in checks:
        state = "undecided"
        if c.get("valid") and c.get("share_met") is not None:
            ok = knee.holds(c["share_met"], c.get("achieved_over_requested"), crit["min_share"], crit["min_rate_ratio"])
            state = "holds" if ok else "fails"
        words = f"{fmt(c['load'])} {state}" + (
            f" (share met {c['share_met']:.3f})"
            if c.get("share_met") is not None
            else f" ({c.get('note') or 'no run'})"
        )
        judged.append({**c, "state": state, "words": words})
        if state != c["expect"]:
            wrong.append(f"{words}, expected to {c['expect'][:-1]}")
    out = {**result, "checks": judged, "check_duration_s": verify_s}
    if not checks:
        return out
    if wrong:
        why = f"the steady runs of {verify_s:g} s did not confirm it: {'; '.join(wrong)}"
        out.update(status="not_converged", why=why, knee=None,
                   summary=f"no settled knee: {why}; the search had said: {result['summary']}")  # fmt: skip
    else:
        out["summary"] = f"{result['summary']}; confirmed by steady runs of {verify_s:g} s: " + ", ".join(
            j["words"] for j in judged
        )
    return out


def report_lines(result: Mapping[str, Any], search: Mapping[str, Any] | None) -> list[str]:
    """The knee section's lines on how each load was held and how the answer was checked (serving/bench/report.py
    prints them under the summary): the duration and ramp-up, how long the valid runs held their loads, each run
    too short for a steady state by name, and each steady check with its verdict."""
    if not search or search.get("duration_s") is None:
        return []  # a search from before runs were sized by time
    runs = result.get("measurements") or []
    held = [m["held_s"] for m in runs if m.get("valid") and m.get("held_s") is not None]
    line = f"  each load held for {search['duration_s']:g} s, its first {search['ramp_up_s']:g} s left out as ramp-up"
    if held:
        line += f" (the valid runs held it {min(held):.1f}-{max(held):.1f} s after that)"
    lines = [line + f"; a run counts with {search['min_completed']} requests completed after the ramp-up"]
    lines += [f"  invalid: {m['note']}" for m in runs if "too short for a steady state" in (m.get("note") or "")]
    lines += [f"  {m['note']}" for m in runs if "arrivals bunched" in (m.get("note") or "")]
    for c in result.get("checks") or []:
        verdict = "as expected" if c.get("state") == c.get("expect") else f"expected to {str(c.get('expect'))[:-1]}"
        lines.append(
            f"  steady check of {result.get('check_duration_s'):g} s: {c.get('words')}, {verdict} (run {c.get('run')})"
        )
    return lines
