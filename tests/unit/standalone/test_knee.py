"""The knee search (serving/standalone/knee.py) driven by simulated servers, and its figure
(serving/bench/knee_plot.py).

A simulated server is a function of the load and of how many runs it has served at that load, so a test can make
a border noisy in a known way: a first run that holds and repetitions that fail, say. Noise comes from a fixed
list, taken in turn: every search here is deterministic, and its exact loads can be asserted.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serving.bench import knee_plot, stats
from serving.standalone import knee
from serving.standalone.knee import Outcome, Search, Step

REPO = Path(__file__).resolve().parents[3]
NOISE = (0.0, 0.01, -0.015, 0.02, -0.01)  # added to each run's share met in turn
HOLDS, FAILS = 0.97, 0.85  # share met either side of a simulated border; the searches need 0.95
RESULT_KEYS = {
    "kind", "unit", "status", "knee", "bracket", "summary", "why", "runs", "criteria", "bracket_loads",
    "measurements", "notes",
}  # fmt: skip


class Server:
    """A simulated server. share(load, n) is the share met of its n-th run (from 0) at `load`; ratio(load) the
    achieved/requested rate (None: a concurrency search); valid(load, n) whether that run is valid."""

    def __init__(
        self,
        share: Callable[[float, int], float],
        ratio: Callable[[float], float | None] = lambda load: 1.0,
        valid: Callable[[float, int], bool] = lambda load, n: True,
    ) -> None:
        self.share, self.ratio, self.valid = share, ratio, valid
        self.served: dict[float, int] = {}
        self.loads: list[float] = []  # every run's load, in order

    def __call__(self, load: float) -> Outcome:
        n = self.served.get(load, 0)
        self.served[load] = n + 1
        self.loads.append(load)
        ok = self.valid(load, n)
        share = min(1.0, max(0.0, self.share(load, n)))
        # An invalid run keeps its figures, as the client reports them: the search must leave them out itself.
        return Outcome(share, self.ratio(load), valid=ok, goodput_req_s=share * load)


def border(at: float) -> Callable[[float, int], float]:
    """Holds below `at`, fails from it on, with NOISE taken in turn over all of the server's runs."""
    count = [0]

    def share(load: float, n: int) -> float:
        count[0] += 1
        return (HOLDS if load < at else FAILS) + NOISE[count[0] % len(NOISE)]

    return share


def concurrency_server(most: int) -> Server:
    """Holds up to `most` requests in flight; no requested rate."""
    return Server(lambda c, n: HOLDS if c <= most else FAILS, ratio=lambda c: None)


def drive(search: Search, server: Server) -> dict[str, Any]:
    """Run the search to its end as the client does, checking each step on the way."""
    while (step := search.next_step()) is not None:
        assert step.runs >= 1
        assert search.start <= step.load <= search.limit
        assert search.next_step() == step  # asking again asks the same
        if search.kind == "concurrency":
            assert isinstance(step.load, int)
        for _ in range(step.runs):
            search.record(step.load, server(step.load))
    result = search.result()
    assert len(result["measurements"]) == len(server.loads) == result["runs"]
    return result


def loads_in(result: dict[str, Any], phase: str) -> list[float]:
    return [m["load"] for m in result["measurements"] if m["phase"] == phase]


def runs_at(result: dict[str, Any], load: float, valid: bool = True) -> int:
    return sum(1 for m in result["measurements"] if m["load"] == load and m["valid"] == valid)


# --- a rate search ------------------------------------------------------------------------------------------------


def test_a_rate_search_brackets_bisects_and_confirms_the_knee() -> None:
    result = drive(Search("rate", start=1.0, limit=64.0, min_share=0.95), Server(border(6.3)))
    assert result["status"] == "found"
    lo, hi = result["bracket"]
    assert lo < 6.3 <= hi and hi / lo <= 1.25
    assert result["knee"] == lo == 5.66  # sqrt(4 * 8), to 3 significant digits
    assert loads_in(result, "bracket") == [1.0, 2.0, 4.0, 8.0]  # doubling from start until a load fails
    assert loads_in(result, "bisect") == [5.66, 6.73]  # geometric midpoints: sqrt(4*8), sqrt(5.66*8)
    assert sorted(set(loads_in(result, "confirm"))) == [5.66, 6.73]
    assert result["why"] is None and result["notes"] == []
    assert result["summary"].startswith("knee 5.66 req/s, fails at 6.73 req/s: share met ")
    assert "needs >= 0.95" in result["summary"] and "client sent" in result["summary"]


@pytest.mark.parametrize("confirm_runs", [3, 5])
def test_each_bracketing_load_has_confirm_runs_valid_runs(confirm_runs: int) -> None:
    result = drive(Search("rate", 1.0, 64.0, 0.95, confirm_runs=confirm_runs), Server(border(6.3)))
    assert result["status"] == "found"
    sides = {b["side"]: b for b in result["bracket_loads"]}
    assert set(sides) == {"holds", "fails"}
    for side, verdict in (("holds", "holds"), ("fails", "fails")):
        b = sides[side]
        assert b["verdict"] == verdict and b["confirmed"]
        assert b["valid_runs"] == runs_at(result, b["load"]) == confirm_runs
        s = b["share_met"]
        assert s["n"] == confirm_runs and s["min"] <= s["median"] <= s["max"] and s["min"] < s["max"]  # noise
        assert b["achieved_over_requested"]["n"] == confirm_runs and b["goodput_req_s"]["n"] == confirm_runs


def test_a_load_is_judged_by_the_median_of_its_runs_not_the_mean() -> None:
    # One bad run of three at the knee: the mean (0.75) fails, the median (0.97) holds.
    def share(load: float, n: int) -> float:
        return 0.30 if (load, n) == (5.66, 1) else HOLDS if load < 6.3 else FAILS

    result = drive(Search("rate", 1.0, 64.0, 0.95), Server(share))
    assert result["knee"] == 5.66
    assert result["bracket_loads"][0]["share_met"] == {"n": 3, "median": HOLDS, "min": 0.30, "max": HOLDS}


def test_a_rate_the_client_cannot_send_fails_however_good_the_latency() -> None:
    server = Server(lambda load, n: 1.0, ratio=lambda load: 1.0 if load < 10 else 0.9)
    result = drive(Search("rate", 1.0, 64.0, 0.95), server)
    lo, hi = result["bracket"]
    assert result["status"] == "found" and lo < 10 <= hi
    assert result["bracket_loads"][1]["achieved_over_requested"]["median"] == 0.9
    assert "client sent 100.0% vs 90.0% of the rate, needs >= 98%" in result["summary"]
    # The same server judged with a ratio it meets holds all the way to the limit.
    assert drive(Search("rate", 1.0, 64.0, 0.95, min_rate_ratio=0.85), Server(lambda load, n: 1.0))["knee"] == 64


def test_a_server_failing_at_the_start_load_says_so() -> None:
    result = drive(Search("rate", 2.0, 64.0, 0.95), Server(border(1.0)))
    assert result["status"] == "failed_at_start"
    assert result["knee"] is None and result["bracket"] == [None, 2.0]
    assert set(loads_in(result, "bracket") + loads_in(result, "confirm")) == {2.0}  # nothing above was measured
    assert runs_at(result, 2.0) == 3  # the failure is confirmed, not a single probe
    assert result["summary"].startswith("failed at the start load 2 req/s (the knee is below it)")


def test_a_server_holding_up_to_the_limit_says_so() -> None:
    result = drive(Search("rate", 1.0, 50.0, 0.95), Server(border(1000.0)))
    assert result["status"] == "held_to_limit"
    assert result["knee"] == 50.0 and result["bracket"] == [50.0, None]
    assert loads_in(result, "bracket") == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 50.0]  # capped at the limit
    assert runs_at(result, 50.0) == 3
    assert result["summary"].startswith("held up to the limit 50 req/s (the knee is at or above it)")


# --- contradictions at confirmation ---------------------------------------------------------------------------


def test_a_lower_load_that_fails_on_repetition_moves_the_bracket_down() -> None:
    # Loads in [5, 6.3) hold on their first run and fail on every repetition: 5.66 looks like the knee until
    # it is confirmed, then the search bisects again between 4 (held) and 5.66 (failed).
    def share(load: float, n: int) -> float:
        return HOLDS if load < 5 or (load < 6.3 and n == 0) else FAILS

    result = drive(Search("rate", 1.0, 64.0, 0.95), Server(share))
    assert result["status"] == "found"
    assert result["knee"] == 4.76 and result["bracket"] == [4.76, 5.66]  # 4.76 = sqrt(4 * 5.66)
    assert loads_in(result, "bisect") == [5.66, 6.73, 4.76]
    assert len(result["notes"]) == 1 and result["notes"][0].startswith("5.66 req/s failed on repetition")
    assert runs_at(result, 4.76) == 3 and runs_at(result, 5.66) == 3


def test_an_upper_load_that_holds_on_repetition_moves_the_bracket_up() -> None:
    # Loads in [6.3, 7) fail on their first run and hold on every repetition.
    def share(load: float, n: int) -> float:
        return HOLDS if load < 6.3 or (load < 7 and n > 0) else FAILS

    result = drive(Search("rate", 1.0, 64.0, 0.95), Server(share))
    assert result["status"] == "found"
    assert result["knee"] == 6.73 and result["bracket"] == [6.73, 8.0]
    assert len(result["notes"]) == 1 and result["notes"][0].startswith("6.73 req/s held on repetition")
    assert runs_at(result, 8.0) == 3  # the new upper load is confirmed too


def test_a_border_that_never_settles_stops_at_max_runs_and_says_why() -> None:
    # Every load holds on its first run and fails on its repetitions: each confirmation contradicts its probe.
    result = drive(Search("rate", 1.0, 64.0, 0.95), Server(lambda load, n: HOLDS if n == 0 else FAILS))
    assert result["status"] == "inconclusive" and result["knee"] is None
    assert result["runs"] == 30
    assert len(result["notes"]) >= 2 and all("failed on repetition" in n for n in result["notes"])
    assert result["why"].startswith("stopped after max_runs=30 runs")
    assert result["summary"].startswith(f"no knee: {result['why']}; last bracket: ")


@pytest.mark.parametrize("max_runs", [1, 5, 9])
def test_max_runs_is_respected(max_runs: int) -> None:
    search = Search("rate", 1.0, 64.0, 0.95, max_runs=max_runs)  # this server needs 10 runs
    server = Server(border(6.3))
    while (step := search.next_step()) is not None:
        assert step.runs <= max_runs - len(server.loads)
        for _ in range(step.runs):
            search.record(step.load, server(step.load))
    result = search.result()
    assert result["runs"] == max_runs == len(server.loads)
    assert result["status"] == "inconclusive" and result["knee"] is None
    assert result["why"].startswith(f"stopped after max_runs={max_runs} runs")
    assert drive(Search("rate", 1.0, 64.0, 0.95, max_runs=10), Server(border(6.3)))["status"] == "found"


# --- invalid runs -------------------------------------------------------------------------------------------------


def test_invalid_runs_are_left_out_of_the_median_repeated_and_reported() -> None:
    # The first repetition at 5.66 is invalid, with a share met that would fail the load if it counted.
    def valid(load: float, n: int) -> bool:
        return (load, n) != (5.66, 1)

    server = Server(lambda load, n: 0.0 if (load, n) == (5.66, 1) else HOLDS if load < 6.3 else FAILS, valid=valid)
    result = drive(Search("rate", 1.0, 64.0, 0.95), server)
    assert result["knee"] == 5.66
    b = result["bracket_loads"][0]
    assert (b["runs"], b["valid_runs"], b["invalid_runs"]) == (4, 3, 1)
    assert b["share_met"]["min"] == HOLDS
    assert [m["valid"] for m in result["measurements"] if m["load"] == 5.66] == [True, False, True, True]
    assert "3 runs, 1 invalid" in result["summary"]


def test_a_load_with_fewer_than_two_valid_runs_is_not_judged() -> None:
    server = Server(border(6.3), valid=lambda load, n: not (load == 5.66 and n > 0))
    result = drive(Search("rate", 1.0, 64.0, 0.95, max_invalid=2), server)
    assert result["status"] == "inconclusive" and result["knee"] is None
    assert runs_at(result, 5.66) == 1 and runs_at(result, 5.66, valid=False) == 2
    assert result["why"] == "could not judge 5.66 req/s: 1 valid run (2 invalid); judging a load needs at least 2"
    assert result["bracket"] == [5.66, 6.73]  # the last bracket is still reported


def test_a_start_load_with_no_valid_run_stops_the_search() -> None:
    result = drive(Search("rate", 1.0, 64.0, 0.95, max_invalid=3), Server(border(6.3), valid=lambda load, n: False))
    assert result["status"] == "inconclusive" and result["runs"] == 3
    assert result["why"].startswith("could not judge 1 req/s: 0 valid runs (3 invalid)")


# --- concurrency --------------------------------------------------------------------------------------------------


def test_a_concurrency_search_steps_in_integers() -> None:
    result = drive(Search("concurrency", 1, 64, 0.95), concurrency_server(13))
    assert result["status"] == "found"
    assert result["knee"] == 13 and result["bracket"] == [13, 14]  # adjacent integers
    assert loads_in(result, "bracket") == [1, 2, 4, 8, 16]
    assert loads_in(result, "bisect") == [12, 14, 13]  # integer midpoints
    assert all(type(m["load"]) is int for m in result["measurements"])
    assert result["bracket_loads"][0]["achieved_over_requested"] is None
    assert result["summary"].startswith("knee concurrency 13, fails at concurrency 14: share met 0.970 ")
    assert "client sent" not in result["summary"]


def test_a_concurrency_search_from_a_start_that_is_not_a_power_of_two() -> None:
    result = drive(Search("concurrency", 3, 40, 0.95), concurrency_server(19))
    assert loads_in(result, "bracket") == [3, 6, 12, 24]
    assert result["bracket"] == [19, 20]


def test_a_concurrency_search_given_a_resolution_stops_at_that_ratio_not_at_adjacent_integers() -> None:
    """With resolution 1.0 (hi/lo <= 2), the knee at 13 is bracketed [8, 16] and not bisected further: the steady
    checks then compare loads a factor 2 apart, not 13 and 14."""
    result = drive(Search("concurrency", 1, 64, 0.95, resolution=1.0), concurrency_server(13))
    assert result["status"] == "found"
    assert result["knee"] == 8 and result["bracket"] == [8, 16]
    assert loads_in(result, "bisect") == []
    assert result["criteria"]["resolution"] == 1.0
    coarse = drive(Search("concurrency", 1, 64, 0.95, resolution=0.5), concurrency_server(13))
    assert coarse["bracket"] == [12, 16] and loads_in(coarse, "bisect") == [12]  # 16/12 <= 1.5


# --- the result ---------------------------------------------------------------------------------------------------


def _scenarios() -> dict[str, tuple[Search, Server]]:
    return {
        "found": (Search("rate", 1.0, 64.0, 0.95), Server(border(6.3))),
        "failed_at_start": (Search("rate", 2.0, 64.0, 0.95), Server(border(1.0))),
        "held_to_limit": (Search("rate", 1.0, 50.0, 0.95), Server(border(1000.0))),
        "inconclusive": (Search("rate", 1.0, 64.0, 0.95, max_runs=4), Server(border(6.3))),
        "concurrency": (Search("concurrency", 1, 64, 0.95), concurrency_server(13)),
    }


@pytest.mark.parametrize("name", list(_scenarios()))
def test_the_result_is_json_serialisable(name: str) -> None:
    search, server = _scenarios()[name]
    result = drive(search, server)
    assert set(result) == RESULT_KEYS
    assert json.loads(json.dumps(result, allow_nan=False)) == result
    assert result["status"] == ("found" if name == "concurrency" else name)


def test_a_running_search_has_a_result_too() -> None:
    search, server = Search("rate", 1.0, 64.0, 0.95), Server(border(6.3))
    for _ in range(3):
        step = search.next_step()
        assert step is not None
        search.record(step.load, server(step.load))
    result = search.result()
    assert result["status"] == "running" and result["knee"] is None and result["runs"] == 3
    assert (
        result["summary"] == "searching (bracketing at 8 req/s); last bracket: holds at 4 req/s, nothing failed; 3 runs"
    )
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_the_search_is_deterministic() -> None:
    first = drive(Search("rate", 1.0, 64.0, 0.95), Server(border(6.3)))
    assert drive(Search("rate", 1.0, 64.0, 0.95), Server(border(6.3))) == first


def test_record_takes_only_the_load_it_was_asked_for() -> None:
    search = Search("rate", 1.0, 64.0, 0.95)
    with pytest.raises(ValueError, match="asked for nothing"):
        search.record(1.0, Outcome(1.0, 1.0))
    assert search.next_step() == Step(1.0, 1, "bracket")
    with pytest.raises(ValueError, match="asked for 1 req/s"):
        search.record(2.0, Outcome(1.0, 1.0))
    search.record(1.0, Outcome(1.0, 1.0))
    assert search.next_step() == Step(2.0, 1, "bracket")


@pytest.mark.parametrize(
    ("kind", "outcome", "message"),
    [
        ("rate", Outcome(1.5, 1.0), "share_met is a fraction"),
        ("rate", Outcome(math.nan, 1.0), "share_met must be a finite number"),
        ("rate", Outcome(0.9, None), "needs achieved_over_requested"),
        ("rate", Outcome(None, 1.0), "a valid run needs share_met"),
        ("concurrency", Outcome(0.9, 1.0), "requests no rate"),
    ],
)
def test_record_refuses_figures_it_cannot_judge(kind: knee.Kind, outcome: Outcome, message: str) -> None:
    search = Search(kind, 1, 64, 0.95)
    step = search.next_step()
    assert step is not None
    with pytest.raises(ValueError, match=message):
        search.record(step.load, outcome)
    search.record(step.load, Outcome(None, None, valid=False))  # an invalid run may have no figures


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"kind": "latency"}, "kind must be"),
        ({"start": 0.0}, "0 < start <= limit"),
        ({"start": 8.0, "limit": 4.0}, "0 < start <= limit"),
        ({"kind": "concurrency", "start": 1.5}, "integer loads"),
        ({"min_share": 0.0}, "min_share"),
        ({"confirm_runs": 1}, "confirm_runs must be >= 2"),
        ({"resolution": 0.0}, "resolution"),
        ({"max_runs": 0}, "max_runs"),
    ],
)
def test_settings_that_cannot_work_are_refused(args: dict[str, Any], message: str) -> None:
    settings: dict[str, Any] = {"kind": "rate", "start": 1.0, "limit": 64.0, "min_share": 0.95, **args}
    with pytest.raises(ValueError, match=message):
        Search(**settings)


# --- share met ----------------------------------------------------------------------------------------------------

SLO = {"ttft_ms": 500.0, "tpot_ms": 50.0, "e2e_ms": 10_000.0}


def request(ttft: float | None, tpot: float | None, e2e: float | None, **more: Any) -> dict[str, Any]:
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, **more}


def test_share_met_counts_requests_meeting_every_threshold() -> None:
    requests = [
        request(100, 20, 2000),  # met
        request(500, 50, 10_000),  # met: on the threshold is within it
        request(501, 20, 2000),  # TTFT too slow
        request(100, 51, 2000),  # TPOT too slow
        request(100, 20, 10_001),  # too long in all
        request(None, None, None),  # failed: meets nothing
        request(100, None, 150),  # one output token: no TPOT, met
        request(100, 80, 150, output_tokens=1),  # one output token whatever its tpot says: met
        request(100, 20, 2000, success=False),  # failed: meets nothing
    ]
    assert knee.share_met(requests, SLO) == 4 / 9
    assert knee.share_met(requests, {"ttft_ms": 500.0}) == 6 / 9  # a subset judges only its own
    assert knee.share_met([request(None, None, None)], {}) == 0.0  # a failed request, even with no thresholds


def test_share_met_refuses_what_it_cannot_judge() -> None:
    with pytest.raises(ValueError, match="unknown SLO thresholds"):
        knee.share_met([request(1, 1, 1)], {"itl_ms": 5.0})
    with pytest.raises(ValueError, match="no requests"):
        knee.share_met([], SLO)


def test_holds_needs_the_share_and_for_a_rate_the_rate() -> None:
    assert knee.holds(0.95, None, 0.95, None)
    assert not knee.holds(0.949, None, 0.95, None)
    assert knee.holds(0.99, 0.98, 0.95, 0.98)
    assert not knee.holds(0.99, 0.97, 0.95, 0.98)
    assert not knee.holds(0.99, None, 0.95, 0.98)


def test_spread_has_the_shape_of_the_reports_describe() -> None:
    for values in ([0.9, 0.5, 0.7, 0.8], [1.0], []):
        assert knee.spread(values) == stats.describe(values)


def test_the_module_imports_only_the_standard_library() -> None:
    # The client container copies serving/standalone/knee.py next to bench_client.py and runs it with the image's
    # Python.
    tree = ast.parse((REPO / "serving" / "standalone" / "knee.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))
    assert {n for n in names if n.split(".")[0] not in sys.stdlib_module_names | {"__future__"}} == set()


def test_the_module_runs_alone_next_to_the_bench_client(tmp_path: Path) -> None:
    # As the client container has it: a copy of the file beside the driver, no serving package on the path.
    (tmp_path / "knee.py").write_bytes((REPO / "serving" / "standalone" / "knee.py").read_bytes())
    script = (
        "import json, knee\n"
        "s = knee.Search('concurrency', 1, 8, 0.9)\n"
        "while (step := s.next_step()) is not None:\n"
        "    for _ in range(step.runs):\n"
        "        s.record(step.load, knee.Outcome(0.95 if step.load <= 5 else 0.5))\n"
        "print(json.dumps(s.result()))\n"
    )
    (tmp_path / "driver.py").write_text(script)
    out = subprocess.run([sys.executable, "-E", "-s", "driver.py"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["bracket"] == [5, 6]


# --- the figure ---------------------------------------------------------------------------------------------------


def plot_runs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures per run the controller would compute, made up from the search's measurements."""
    return [
        {
            "load": m["load"],
            "share_met": m["share_met"],
            "goodput_req_s": m["goodput_req_s"],
            "ttft_p50_ms": 40.0 * m["load"],
            "ttft_p90_ms": 90.0 * m["load"],
            "tpot_p50_ms": 10.0 + m["load"] + i,  # differs per run, so a median is not any run's figure
            "valid": m["valid"],
        }
        for i, m in enumerate(result["measurements"])
    ]


def gids(fig: Any) -> dict[str, Any]:
    return {str(a.get_gid()): a for a in fig.findobj() if a.get_gid()}


def test_the_figure_marks_the_knee_and_shades_the_bracket() -> None:
    result = drive(Search("rate", 1.0, 64.0, 0.95), Server(border(6.3)))
    runs = plot_runs(result)
    drawn = gids(knee_plot.knee_figure(result, runs))
    for panel in ("latency", "goodput"):
        assert list(drawn[f"knee-line-{panel}"].get_xdata()) == [5.66, 5.66]
        band = drawn[f"knee-bracket-{panel}"]
        assert (band.get_x(), band.get_x() + band.get_width()) == pytest.approx((5.66, 6.73))
    assert drawn["knee-title"].get_text().startswith("knee 5.66 req/s")
    # The median line per load: one point per load, the median of that load's runs.
    xs, ys = drawn["knee-tpot_p50_ms-median"].get_data()
    assert list(xs) == [1.0, 2.0, 4.0, 5.66, 6.73, 8.0]
    tpots = [r["tpot_p50_ms"] for r in runs if r["load"] == 5.66]
    assert len(tpots) == 3 and ys[3] == sorted(tpots)[1]
    assert len(drawn["knee-tpot_p50_ms-runs"].get_xdata()) == len(runs)


def test_an_invalid_run_is_drawn_apart_and_in_no_median() -> None:
    result = drive(Search("rate", 1.0, 64.0, 0.95), Server(border(6.3)))
    runs = plot_runs(result)
    runs[-1] = {**runs[-1], "valid": False, "tpot_p50_ms": 1e6}
    assert runs[-1]["load"] == 6.73
    drawn = gids(knee_plot.knee_figure(result, runs))
    assert list(drawn["knee-tpot_p50_ms-invalid"].get_ydata()) == [1e6]
    xs, ys = drawn["knee-tpot_p50_ms-median"].get_data()
    valid = [r["tpot_p50_ms"] for r in runs if r["load"] == 6.73 and r["valid"]]
    assert len(valid) == 2 and ys[list(xs).index(6.73)] == sum(valid) / 2  # the median of the two valid runs


def test_a_start_that_failed_is_drawn_as_a_dashed_line_and_no_knee() -> None:
    result = drive(Search("rate", 2.0, 64.0, 0.95), Server(border(1.0)))
    drawn = gids(knee_plot.knee_figure(result, plot_runs(result)))
    assert "knee-fails-latency" in drawn and list(drawn["knee-fails-goodput"].get_xdata()) == [2.0, 2.0]
    assert not any(g.startswith(("knee-line", "knee-bracket")) for g in drawn)


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_draw_knee_writes_an_image_that_parses(tmp_path: Path, suffix: str) -> None:
    result = drive(Search("concurrency", 1, 64, 0.95), concurrency_server(13))
    path = knee_plot.draw_knee(result, plot_runs(result), tmp_path / f"knee{suffix}")
    assert path == tmp_path / f"knee{suffix}"
    data = path.read_bytes()
    assert len(data) > 5000
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        root = ET.fromstring(data)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        ids = {e.get("id") for e in root.iter()}
        assert {"knee-line-latency", "knee-bracket-goodput", "knee-title"} <= ids
        assert "knee concurrency 13" in data.decode()
        assert knee_plot.draw_knee(result, plot_runs(result), tmp_path / "again.svg").read_bytes() == data


def test_draw_knee_with_no_run_says_so(tmp_path: Path) -> None:
    result = Search("rate", 1.0, 64.0, 0.95).result()
    path = knee_plot.draw_knee(result, [], tmp_path / "empty.svg")
    assert "no measured run" in path.read_text()


def test_draw_knee_refuses_what_it_cannot_draw(tmp_path: Path) -> None:
    result = drive(Search("rate", 1.0, 64.0, 0.95), Server(border(6.3)))
    with pytest.raises(ValueError, match=r"\.svg or \.png"):
        knee_plot.draw_knee(result, plot_runs(result), tmp_path / "knee.pdf")
    runs = plot_runs(result)
    del runs[0]["ttft_p90_ms"]
    with pytest.raises(ValueError, match=r"run 0 lacks \['ttft_p90_ms'\]"):
        knee_plot.draw_knee(result, runs, tmp_path / "knee.svg")
