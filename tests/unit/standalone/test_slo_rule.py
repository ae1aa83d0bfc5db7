"""The one per-request SLO rule (serving/standalone/knee.py meets_slo) and the one percentile (knee.percentile), as both
sides use them: the client's knee search on the host (serving/standalone/knee_runs.py run_outcome, reading vLLM's
result.json) and the controller's report (serving/bench/runs.py parse_requests into RequestObs, then slo_figures,
reading the same file).

The run is a recorded one of vLLM 0.32 (tests/fixtures/vllm-bench-serve-0.32.0/goodput-r16: 240 requests, 32 output
tokens each); the counts each side must reach are counted here from its raw arrays, apart from either side's code."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from llmd_benchmark_report.base import Units

from serving.bench import br_results
from serving.bench import runs as bench_runs
from serving.standalone import knee, knee_runs
from tests.helpers.image_scripts import image_script

RESULT = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-bench-serve-0.32.0" / "goodput-r16" / "result.json"
# The workload's SLO as its YAML gives it (the controller's), and in ms (the client's plan, serving/bench/protocol.py).
SLOS: list[dict[str, str]] = [
    {"ttft": "20ms"},
    {"tpot": "4ms"},
    {"e2e": "150ms"},
    {"ttft": "300ms", "tpot": "100ms"},  # what vLLM recorded this run's goodput with
    {"ttft": "20ms", "tpot": "5ms", "e2e": "200ms"},
    {"e2e": "2s"},  # every request
    {"ttft": "5ms"},  # none
]


def in_ms(slo: dict[str, str]) -> dict[str, float]:
    return {f"{k}_ms": float(v[:-2]) if v.endswith("ms") else float(v[:-1]) * 1000 for k, v in slo.items()}


def counted_here(result: dict[str, Any], slo_ms: dict[str, float]) -> int:
    """The requests meeting every threshold, from the raw arrays: a failed request meets none; TPOT is
    (e2e - TTFT)/(N - 1), and a request of one output token has none to judge."""
    met = 0
    rows = zip(result["errors"], result["ttfts"], result["latencies"], result["output_lens"], strict=True)
    for error, ttft, e2e, n in rows:
        if error:
            continue
        ok = ttft * 1000 <= slo_ms.get("ttft_ms", float("inf")) and e2e * 1000 <= slo_ms.get("e2e_ms", float("inf"))
        if n > 1:
            ok = ok and (e2e - ttft) * 1000 / (n - 1) <= slo_ms.get("tpot_ms", float("inf"))
        met += ok
    return met


def both_sides(result: dict[str, Any], slo: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """(the count met on the host, its outcome, the controller's figures) of one run against one SLO. The host's
    run has no ramp-up to leave out, so it measures every request, as the controller does."""
    host = knee_runs.run_outcome(result, in_ms(slo), None, result["duration"], 0.0, 1)
    assert host["measured"] == len(result["ttfts"])
    controller = bench_runs.slo_figures(bench_runs.parse_requests(result), result["duration"], slo)
    return round(host["share_met"] * host["measured"]), host, controller


@pytest.mark.parametrize("failed", [(), (3, 77, 200)], ids=["as recorded", "three failed"])
def test_the_host_and_the_controller_count_the_same_requests_as_meeting_the_slo(failed: tuple[int, ...]) -> None:
    result = copy.deepcopy(json.loads(RESULT.read_text()))
    for i in failed:
        result["errors"][i] = "aiohttp.ClientPayloadError: Response payload is not completed"
    n = len(result["ttfts"])
    counts = []
    for slo in SLOS:
        want = counted_here(result, in_ms(slo))
        host_met, host, controller = both_sides(result, slo)
        assert (host_met, controller["met_all"]) == (want, want), slo
        assert host["share_met"] == controller["share_met"] == want / n, slo
        assert host["goodput_run_req_s"] == controller["goodput_req_s"], slo
        counts.append(want)
    # Not vacuous: some thresholds split the run, and the last two meet every request and none.
    assert all(0 < c < n for c in counts[:5]) and counts[5:] == [n - len(failed), 0], counts


def test_the_edge_cases_are_judged_alike_on_both_sides() -> None:
    """Three requests the two readers once judged differently (the last stop's note): one whose 32 tokens all came
    with its first (e2e = TTFT: TPOT 0, which meets the TPOT threshold, as in vLLM's goodput), one with a NaN TTFT (no
    measurement: a failure), one failed; and an SLO that sets no threshold, which every successful request meets."""
    result = copy.deepcopy(json.loads(RESULT.read_text()))
    n = len(result["ttfts"])
    result["latencies"][5] = result["ttfts"][5]  # buffered to the end: every token with the first
    result["ttfts"][9] = float("nan")
    result["errors"][11] = "aiohttp.ClientPayloadError: Response payload is not completed"
    slo = {"tpot": "4ms"}
    host_met, host, controller = both_sides(result, slo)
    want = counted_here({**result, "errors": [e or (i == 9) for i, e in enumerate(result["errors"])]}, in_ms(slo))
    assert (host_met, controller["met_all"]) == (want, want)
    assert 0 < want < n, want
    # Request 5 meets the TPOT threshold on both sides; 9 and 11 meet nothing.
    one = {k: [v[i] for i in (5, 9, 11)] for k, v in result.items() if isinstance(v, list) and len(v) == n}
    one["duration"] = result["duration"]
    host_met, _, controller = both_sides(one, slo)
    assert (host_met, controller["met_all"]) == (1, 1)
    # No threshold: the one successful request of the three (5; the NaN one failed), on both sides.
    host = knee_runs.run_outcome(one, {}, None, one["duration"], 0.0, 1)
    controller = bench_runs.slo_figures(bench_runs.parse_requests(one), one["duration"], {"min_share": 0.9})
    assert (round(host["share_met"] * 3), controller["met_all"]) == (1, 1)


def test_the_one_percentile_interpolates_between_order_statistics() -> None:
    """numpy's default (linear), as vLLM reports its p50, p90 and p99: the bench client's conversations results
    and the Benchmark Report's statistics are this one function."""
    xs = [4.0, 1.0, 3.0, 2.0]
    assert [knee.percentile(xs, p) for p in (0, 50, 90, 100)] == [1.0, 2.5, pytest.approx(3.7), 4.0]
    assert knee.percentile([7.0], 99) == 7.0
    assert br_results.percentile is knee.percentile
    conversations = image_script("bench_conversations")
    figures: dict[str, Any] = {}
    conversations._metric(figures, "ttft", [x / 1000 for x in xs])
    assert figures["p90_ttft_ms"] == pytest.approx(3.7)
    assert (br_results.statistics_of(xs, Units.MS) or {})["p90"] == pytest.approx(3.7)
