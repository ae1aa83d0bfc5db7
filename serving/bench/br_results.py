"""A Benchmark Report document's results.request_performance.aggregate (serving/bench/br_export.py writes the document):
per-request statistics pooled over a point's valid measured runs, computed from their raw result.json with this
project's definitions (DEFINITIONS; serving/bench/runs.py parse_requests), and the runs' throughputs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from llmd_benchmark_report.base import Units

from serving.bench import runs as bench_runs
from serving.standalone.knee import percentile

# Percentiles of per-request figures, by the schema's field names: linear interpolation between order statistics
# (numpy's default). p50 is statistics.median, as serving/bench/stats.py describe computes the summary's medians.
PERCENTILES = (
    ("p0p1", 0.1), ("p1", 1.0), ("p5", 5.0), ("p10", 10.0), ("p25", 25.0), ("p50", 50.0), ("p75", 75.0),
    ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99p9", 99.9),
)  # fmt: skip

DEFINITIONS = {
    "time_to_first_token": "t1 - t0: the first streamed chunk's arrival after the request was sent (ms)",
    "time_per_output_token": "(tN - t1)/(N - 1) per request, N the output tokens by the server's usage count, "
    "t1 and tN the first and last streamed chunks (ms/token)",
    "inter_token_latency": "the intervals between consecutive streamed chunks, over all requests; given only when "
    "every chunk carried one token (ms/token)",
    "normalized_time_per_output_token": "(tN - t0)/N per request, prefill included (ms/token)",
    "request_latency": "tN - t0 (ms)",
    "throughput": "per run: tokens (or requests) of its successful requests over vllm bench serve's duration of "
    "the run; statistics across the pooled runs",
    "percentiles": "linear interpolation between order statistics; p50 is the median",
    "source": "serving/bench/runs.py parse_requests, from each pooled run's runs/<id>/result.json "
    "(vllm bench serve --save-detailed); seed 000 §1",
}


def statistics_of(
    values: Sequence[float | int | None], units: Units, percentiles: bool = True
) -> dict[str, Any] | None:
    """The schema's Statistics of the finite values, or None when there is none.

    `percentiles` False keeps mean, stddev, min, median and max: for figures that are one per run (rates), where
    further percentiles would only interpolate between two or three numbers."""
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if not xs:
        return None
    out: dict[str, Any] = {"units": units, "mean": statistics.fmean(xs), "min": xs[0], "max": xs[-1]}
    if len(xs) > 1:
        out["stddev"] = statistics.stdev(xs)
    for name, q in PERCENTILES if percentiles else ():
        out[name] = percentile(xs, q)
    out["p50"] = statistics.median(xs)  # the summary's median, bit for bit
    return out


def _ms(x: float | None) -> float | None:
    # As bench_runs does (x * 1000.0), so that medians equal the summary's exactly.
    return None if x is None else x * 1000.0


def aggregate(
    runs: Mapping[str, Sequence[bench_runs.RequestObs]], durations: Mapping[str, float | None]
) -> dict[str, Any]:
    """results.request_performance.aggregate from the pooled runs' requests, with the definitions of DEFINITIONS."""
    every = [o for obs in runs.values() for o in obs]
    ok = [o for o in every if o.success]
    latency = {
        "time_to_first_token": statistics_of([_ms(o.ttft_s) for o in ok], Units.MS),
        "normalized_time_per_output_token": statistics_of(
            [_ms(o.e2el_s / o.output_tokens) if o.e2el_s is not None and o.output_tokens else None for o in ok],
            Units.MS_PER_TOKEN,
        ),
        "time_per_output_token": statistics_of([_ms(o.tpot_s) for o in ok], Units.MS_PER_TOKEN),
        "request_latency": statistics_of([_ms(o.e2el_s) for o in ok], Units.MS),
    }
    # A chunk that carried several tokens makes chunk intervals something other than inter-token latency (the
    # report calls them "chunk interval ms (not ITL)" then): ITL is given only when every chunk carried one token.
    if not grouped_requests(ok):
        latency["inter_token_latency"] = statistics_of(
            [x * 1000 for o in ok for x in o.chunk_intervals_s], Units.MS_PER_TOKEN
        )
    rates: dict[str, list[float]] = {"input_token_rate": [], "output_token_rate": [], "total_token_rate": [],
                                     "request_rate": []}  # fmt: skip
    for rid, obs in runs.items():
        duration = durations.get(rid)
        if not duration:
            continue
        done = [o for o in obs if o.success]
        tokens_in = sum(o.input_tokens or 0 for o in done)
        tokens_out = sum(o.output_tokens or 0 for o in done)  # as bench_runs summarize_run's output_tok_s
        rates["input_token_rate"].append(tokens_in / duration)
        rates["output_token_rate"].append(tokens_out / duration)
        rates["total_token_rate"].append((tokens_in + tokens_out) / duration)
        rates["request_rate"].append(len(done) / duration)
    units = {"request_rate": Units.QUERY_PER_S}
    throughput = {k: statistics_of(v, units.get(k, Units.TOKEN_PER_S), percentiles=False) for k, v in rates.items()}
    requests = {
        "total": len(every),
        "failures": len(every) - len(ok),
        "input_length": statistics_of([o.input_tokens for o in ok], Units.COUNT),
        "output_length": statistics_of([o.output_tokens for o in ok], Units.COUNT),
    }

    def present(d: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not None}

    return {"requests": present(requests), "latency": present(latency), "throughput": present(throughput)}


def grouped_requests(ok: Sequence[bench_runs.RequestObs]) -> int:
    """Requests whose streamed chunks carried several tokens (as bench_runs summarize_run counts them)."""
    return sum(1 for o in ok if o.output_tokens is not None and o.chunks < o.output_tokens)
