"""A searched run sized by time and judged after its ramp-up (serving/standalone/knee_runs.py), on results in vLLM
0.32's format: the recorded runs of tests/fixtures/vllm-bench-serve-0.32.0, and constructed ones whose every request is
stated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.standalone import knee_runs

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-bench-serve-0.32.0"
SLO = {"ttft_ms": 300.0, "tpot_ms": 100.0}


def result(starts: list[float], ttfts: list[float], e2e: float = 1.0, tokens: int = 32) -> dict[str, Any]:
    """vLLM's detailed result for requests sent at `starts` (s) with the given TTFTs (s), each `e2e` s long."""
    n = len(starts)
    return {
        "duration": max(starts) + e2e - min(starts) + 0.01, "start_times": starts, "ttfts": ttfts,
        "latencies": [e2e] * n, "output_lens": [tokens] * n, "errors": [""] * n, "request_goodput": None,
    }  # fmt: skip


def test_a_rate_run_sends_rate_times_duration_and_a_concurrency_run_what_fills_it() -> None:
    assert knee_runs.prompts_for("rate", 16.0, 15.0, 32) == 240
    assert knee_runs.prompts_for("rate", 1.0, 15.0, 32) == 32  # the engine's batch, filled many times, at least
    assert knee_runs.prompts_for("concurrency", 4, 15.0, 8) == 16  # nothing measured yet: 4 waves
    # The last run, concurrency 2, completed 10 req/s: concurrency 4 completes between that (a full engine) and
    # twice that (an idle one); sized for sqrt(2) times, the run lasts between 0.7 and 1.4 times the duration.
    assert knee_runs.prompts_for("concurrency", 4, 15.0, 8, [(2, 10.0)]) == 213
    assert knee_runs.prompts_for("concurrency", 16, 15.0, 8, [(2, 10.0)]) == 300  # at most twice the last
    assert knee_runs.prompts_for("concurrency", 1, 15.0, 8, [(16, 10.0)]) == 75  # at least half
    # Down by the square root too: a saturated concurrency 32 (50 req/s) sizes a 30 s run at 16 for 35 req/s,
    # where proportional scaling (25 req/s) ended the real check after 12 s of 27 (2026-12-05).
    assert knee_runs.prompts_for("concurrency", 16, 30.0, 8, [(32, 50.0)]) == 1061
    # A load measured before is sized from its own newest run, whatever ran since.
    assert knee_runs.prompts_for("concurrency", 16, 30.0, 8, [(16, 48.0), (32, 50.0), (16, 51.0), (8, 30.0)]) == 1530


def test_the_ramp_up_is_kept_out_and_goodput_is_over_the_measured_interval() -> None:
    # 4 req/s for 10 s: the first 2 s of sends see a cold engine (TTFT 900 ms), the rest 50 ms.
    starts = [i / 4 for i in range(40)]
    ttfts = [0.9 if s < 2 else 0.05 for s in starts]
    got = knee_runs.run_outcome(result(starts, ttfts), SLO, 4.0, duration_s=10, ramp_up_s=2, min_completed=20)
    assert got["valid"] and got["note"] == ""
    assert (got["measured"], got["completed_after_ramp_up"], got["share_met"]) == (32, 32, 1.0)
    assert got["held_s"] == pytest.approx(7.75) and got["achieved_over_requested"] == pytest.approx(1.0)
    # 32 met between ramp-up's end (2 s) and the last one's end (9.75 + 1 s).
    assert got["goodput_req_s"] == pytest.approx(32 / 8.75)
    # The whole run, as vLLM counts it: the 8 cold requests missed the TTFT.
    assert got["goodput_run_req_s"] == pytest.approx(32 / (9.75 + 1 + 0.01))
    without = knee_runs.run_outcome(result(starts, ttfts), SLO, 4.0, duration_s=10, ramp_up_s=0, min_completed=20)
    assert without["share_met"] == pytest.approx(0.8)


# 16 req/s for 10 s whose client stalled at 2 s and sent what fell due until 3.2 s at once, then kept its schedule.
STALLED = [3.2 if 2.0 <= i / 16 < 3.2 else i / 16 for i in range(160)]


@pytest.mark.parametrize(
    ("starts", "rate", "note"),
    [
        # 16 requests at 64 req/s: the quarter-second burst of issue 29.
        ([i / 64 for i in range(16)], 64.0,
         "too short for a steady state: 0 request(s) completed after the 1 s ramp-up, needs 20"),
        # 40 requests in 2.5 s when the run was to hold its load for 15 s.
        ([i / 16 for i in range(40)], 16.0,
         "too short for a steady state: the load was held 1.4 s after the 1 s ramp-up, under half the stated 14 s"),
    ],
    ids=["a burst", "held too briefly"],
)  # fmt: skip
def test_a_run_that_did_not_hold_its_load_is_invalid_by_name(starts: list[float], rate: float, note: str) -> None:
    got = knee_runs.run_outcome(result(starts, [0.05] * len(starts)), SLO, rate, 15.0, 1.0, 20)
    assert got["valid"] is False and got["note"] == note


def test_a_client_that_stalled_and_caught_up_is_said_and_its_run_kept() -> None:
    """Where the client shares the server's CPUs, its stall is the load's own effect: the run counts, and says its
    arrivals were bunched."""
    got = knee_runs.run_outcome(result(STALLED, [0.05] * len(STALLED)), SLO, 16.0, 10.0, 1.0, 20)
    assert got["valid"] is True and got["send_lag_s"] == pytest.approx(1.2)
    assert got["note"] == (
        "arrivals bunched: the client fell 1.20 s behind its schedule at 3.2 s and caught up (a stall on its CPUs)"
    )
    steady = knee_runs.run_outcome(result([i / 16 for i in range(160)], [0.05] * 160), SLO, 16.0, 10.0, 1.0, 20)
    assert steady["note"] == "" and steady["send_lag_s"] == pytest.approx(0.0)


def test_a_client_that_cannot_send_the_rate_fails_the_load_and_is_not_called_a_stall() -> None:
    """Falling ever further behind is the search's own verdict (achieved < 98% of the rate: the load fails)."""
    slow = [i / 12 for i in range(160)]  # asked 16 req/s, sent 12
    got = knee_runs.run_outcome(result(slow, [0.05] * 160), SLO, 16.0, 10.0, 1.0, 20)
    assert got["valid"] is True and got["achieved_over_requested"] == pytest.approx(0.75) and got["note"] == ""


def test_our_goodput_is_vllms_own_on_a_recorded_run() -> None:
    """A run vLLM 0.32 recorded with --goodput ttft:300 tpot:100 (its request_goodput): the same requests, the same
    thresholds and the run's duration give the same figure, and no disagreement is flagged."""
    recorded = json.loads((FIX / "goodput-r16" / "result.json").read_text())
    assert recorded["request_goodput"] is not None and recorded["completed"] > 100
    got = knee_runs.run_outcome(recorded, SLO, 16.0, 15.0, 3.0, 20)
    assert got["goodput_run_req_s"] == pytest.approx(recorded["request_goodput"], rel=1e-9)
    assert got["vllm_goodput_req_s"] == recorded["request_goodput"] and got["goodput_flag"] == ""
    # A definition that drifted (here: a TTFT bound 100 ms tighter) is flagged.
    tighter = knee_runs.run_outcome(recorded, {**SLO, "ttft_ms": 1.0}, 16.0, 15.0, 3.0, 20)
    assert tighter["goodput_flag"].startswith("goodput disagrees with vllm bench serve's own for this run: ")


def _search(status: str = "found", bracket: tuple[float | None, float | None] = (4.0, 5.0)) -> dict[str, Any]:
    return {"kind": "rate", "status": status, "bracket": list(bracket), "knee": bracket[0], "why": None,
            "summary": "knee 4 req/s, fails at 5 req/s: ...",
            "criteria": {"min_share": 0.9, "min_rate_ratio": 0.98}}  # fmt: skip


def test_steady_checks_that_agree_confirm_the_knee_and_one_that_does_not_says_so() -> None:
    assert knee_runs.checks_for(_search()) == [(4.0, "holds"), (5.0, "fails")]
    assert knee_runs.checks_for(_search("held_to_limit", (64.0, None))) == [(64.0, "holds")]
    assert knee_runs.checks_for(_search("inconclusive", (None, None))) == []
    holds = {"load": 4.0, "expect": "holds", "valid": True, "share_met": 0.97, "achieved_over_requested": 1.0}
    fails = {"load": 5.0, "expect": "fails", "valid": True, "share_met": 0.41, "achieved_over_requested": 1.0}
    ok = knee_runs.conclude(_search(), [holds, fails], 30.0)
    assert ok["status"] == "found" and ok["knee"] == 4.0
    assert ok["summary"].endswith(
        "; confirmed by steady runs of 30 s: 4 req/s holds (share met 0.970), 5 req/s fails (share met 0.410)"
    )
    slipped = knee_runs.conclude(_search(), [{**holds, "share_met": 0.62}, fails], 30.0)
    assert slipped["status"] == "not_converged" and slipped["knee"] is None
    assert slipped["why"] == (
        "the steady runs of 30 s did not confirm it: 4 req/s fails (share met 0.620), expected to hold"
    )
    assert slipped["summary"].startswith("no settled knee: the steady runs of 30 s did not confirm it")
    short = knee_runs.conclude(_search(), [{**holds, "valid": False, "share_met": None, "note": "too short"}, fails],
                               30.0)  # fmt: skip
    assert short["status"] == "not_converged" and "4 req/s undecided (too short), expected to hold" in short["why"]


def test_a_searched_run_tolerates_the_random_prompts_chance_hits_and_a_plain_run_none() -> None:
    """The tiny model's 4,096-token vocabulary gives a 480-prompt run of 64-token prompts about 28 colliding pairs,
    32 tokens each: 896 of 30,720 prompt tokens (2.9%)."""
    assert knee_runs.hits_flag(896, 30_720, knee_runs.SEARCH_HITS_MAX_SHARE) == ""
    assert knee_runs.hits_flag(896, 30_720) == (
        "prefix-cache hits where none may be: 896 tokens (the cache served part of the prefill)"
    )
    assert knee_runs.hits_flag(8192, 30_720, knee_runs.SEARCH_HITS_MAX_SHARE).endswith(
        ", 26.7% of the run's prompt tokens, above the 20% a searched run tolerates"
    )
    assert knee_runs.hits_flag(64, None, knee_runs.SEARCH_HITS_MAX_SHARE).startswith("prefix-cache hits where")
    assert knee_runs.hits_flag(0, 30_720) == ""


def test_the_report_says_how_long_each_load_was_held_and_how_the_answer_was_checked() -> None:
    search = {"duration_s": 4.0, "ramp_up_s": 1.0, "min_completed": 10}
    holds = {"load": 32.0, "expect": "holds", "valid": True, "share_met": 0.815, "achieved_over_requested": 1.0,
             "run": "r32-m4"}  # fmt: skip
    result = knee_runs.conclude(
        {**_search(bracket=(32.0, 45.3)), "measurements": [
            {"valid": True, "held_s": 2.94, "note": "r32-m1 ok"},
            {"valid": True, "held_s": 2.75, "note": "r8-m1 ok"},
            {"valid": False, "held_s": 0.3, "note": "r64-m1 too short for a steady state: the load was held 0.3 s"},
        ]},
        [holds],
        8.0,
    )  # fmt: skip
    assert knee_runs.report_lines(result, search) == [
        "  each load held for 4 s, its first 1 s left out as ramp-up (the valid runs held it 2.8-2.9 s after that); "
        "a run counts with 10 requests completed after the ramp-up",
        "  invalid: r64-m1 too short for a steady state: the load was held 0.3 s",
        "  steady check of 8 s: 32 req/s fails (share met 0.815), expected to hold (run r32-m4)",
    ]
    assert knee_runs.report_lines(result, {"kind": "rate"}) == []  # a search from before runs were sized by time


# --- the engine's running count: a plateau reached in time ----------------------------------------------------------

# The c4-m1 readings of a real concurrency search here (2026-12-05, gauges.log, seconds from the run's first send):
# the count reached 4 at once, then read 0 for 5 s while the client still had 4 requests out (the API server and the
# client starved of CPU on 2 cores), then came back. It reached its level: a plateau, not a load still building.
C4_DIPPED = [(0.2, 4.0), (0.7, 4.0), (1.2, 4.0), (1.9, 0.0), (2.5, 0.0), (3.7, 0.0), (4.5, 0.0), (5.2, 0.0),
             (5.7, 4.0), (6.5, 0.0), (7.2, 0.0), (7.8, 1.0), (8.3, 4.0), (8.8, 4.0), (9.3, 1.0), (9.8, 3.0),
             (10.3, 1.0), (10.8, 4.0), (11.3, 4.0), (11.9, 1.0), (12.4, 4.0), (12.9, 4.0), (13.4, 4.0),
             (13.9, 4.0)]  # fmt: skip


def _closed_loop(n: int = 240, every: float = 0.05) -> dict[str, Any]:
    return result([i * every for i in range(n)], [0.05] * n, e2e=0.2)


def test_a_count_that_reached_its_level_and_dipped_has_a_plateau() -> None:
    got = knee_runs.run_outcome(_closed_loop(), SLO, None, 15.0, 3.0, 20, C4_DIPPED)
    # Level 3: the median of the readings from the measured interval's midpoint (7.6 s) to its end (12.15 s).
    assert got["valid"] and got["note"] == "" and got["running_level"] == 3.0


def test_a_count_still_climbing_through_the_measured_interval_is_no_steady_state() -> None:
    # 12 s of sends: the count climbs 1 a second from 0 and sits at 8 only from 9 s, past the midpoint (7.6 s).
    climbing = [(t / 2, float(min(8, int(t / 2) - 1))) for t in range(2, 28)]
    got = knee_runs.run_outcome(_closed_loop(), SLO, None, 15.0, 3.0, 20, climbing)
    assert not got["valid"] and got["running_level"] == 8.0
    assert got["note"] == (
        "no steady state: the engine's running count reached its level (8, the median of the measured interval's "
        "second half) 9.0 s into the run, after the interval's midpoint (7.6 s): the load was still building"
    )


def test_too_few_readings_after_the_ramp_up_is_too_short_and_none_is_not_judged() -> None:
    got = knee_runs.run_outcome(_closed_loop(), SLO, None, 15.0, 3.0, 20, [(3.5, 4.0), (6.0, 4.0), (9.0, 4.0)])
    assert not got["valid"]
    assert got["note"] == (
        "too short for a steady state: 3 reading(s) of the engine's running count after the ramp-up, 4 needed"
    )
    unread = knee_runs.run_outcome(_closed_loop(), SLO, None, 15.0, 3.0, 20)
    assert unread["valid"] and unread["running_level"] is None


def test_the_running_count_is_read_from_the_clients_gauges_log_engines_summed() -> None:
    lines = [
        '100.5\t2026-12-05T01:34:06+00:00\tvllm:num_requests_running{engine="0",model_name="m"} 3.0',
        '100.5\t2026-12-05T01:34:06+00:00\tvllm:num_requests_running{engine="1",model_name="m"} 2.0',
        '100.5\t2026-12-05T01:34:06+00:00\tvllm:num_requests_waiting{engine="0",model_name="m"} 9.0',
        "101.0\t2026-12-05T01:34:07+00:00\t# no metrics: 0 URLError: refused",
        '101.5\t2026-12-05T01:34:07+00:00\tvllm:num_requests_running{engine="0",model_name="m"} 4.0',
    ]
    assert knee_runs.running_counts(lines) == [(100.5, 5.0), (101.5, 4.0)]
