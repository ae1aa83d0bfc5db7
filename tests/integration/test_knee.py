"""The knee search on the real CPU deployment: `make bench WORKLOAD=knee SEARCH=rate` finds the highest arrival
rate at which the workload's SLO holds and the client sustains the rate, measures the bracketing rates again, and
states the spread; the figure is looked at in headless Chromium (tests/helpers/screenshots.py's screenshot):
its latency and goodput series, the bracket band and the knee line are drawn.

The shipped `knee` workload with its loads held 8 s instead of 15 s, and fewer runs in all, so that the search
fits CI; the note of issue 29 holds the full search on this machine, how long it took, and where a plain `vllm bench
serve` puts the knee.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.bench.knee_plot import BRACKET, GOODPUT, KNEE, LATENCY
from tests.helpers.screenshots import pixels_of, read_png, screenshot
from tests.integration.conftest import REPO, make

# The search's fixture holds a deploy and up to 24 runs (its make is bounded at 1500 s).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
ENGINE_STARTS = 0


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]
    w = yaml.safe_load((REPO / "serving" / "workloads" / "knee.yaml").read_text())
    # The shipped workload's requests (64 in, 32 out) with its loads held 8 s (2 s of ramp-up) instead of 15 s (3 s),
    # checked by 12 s steady runs instead of 30 s, 2 runs per bracketing load, loads 9, 18, 36, 72 with no
    # bisection (hi/lo 2 is the resolution), and a first-token SLO of 4 s instead of 300 ms. What it shows is the
    # mechanism (loads held, runs judged after their ramp-up, the answer checked by longer steady runs), so its
    # loads must keep clear of the edge, and on this machine they did not with a tighter bound or other loads:
    # - the client shares the server's 2 CPUs and stalls for 0.3 to 2.35 s above ~11 req/s, then sends its backlog
    #   at once (the README's figures): under 300 ms, that alone fails runs at 20 req/s;
    # - the engine serves a little under 48 req/s here, and 48 was the third load until 2026-12-07: it held in
    #   every search run (1.000) and then failed or passed its steady check by chance (0.648 on 2026-12-05, 0.260
    #   on 2026-12-07; 1.000 in between): a queue that grows slowly outlasts 8 s and not 12. At 36 the engine keeps
    #   up and at 72 it cannot (2026-12-07, this module alone: 36 met 1.000 in 3 runs and its check, 72 met 0.252
    #   to 0.315 and 0.428 in its check; 156 s). In that day's phase-3 run the 36 req/s check then failed on the
    #   client, not the engine: it sent 93.3% of the rate (98% needed), 94% of it within the SLO. Out of make test
    #   again until its loads or the client's placement keep clear of the client's limit (tests/schedule.py OPT_IN).
    w["slo"] = {**w["slo"], "ttft": "4000ms"}
    w["search"] = {**w["search"], "rate": {"start": 9.0, "limit": 72.0}, "resolution": 1.0, "confirm_runs": 2,
                   "max_runs": 12, "duration_s": 8, "ramp_up_s": 2, "min_completed": 20,
                   "check_duration_s": 12}  # fmt: skip
    path = tmp_path_factory.mktemp("knee") / "knee.yaml"
    path.write_text(yaml.safe_dump(w))
    b = make("bench", f"WORKLOAD={path}", "SEARCH=rate", timeout=1500)
    assert b.rc == 0, b.output[-4000:]
    m = re.search(r"report: (\S+)/report\.txt", b.output)
    assert m, f"the search printed no report path: {b.output[-3000:]}"
    return Path(m.group(1))


@pytest.mark.timing(
    margin=(
        "36 req/s met 1.000 in 3 runs and in its 12 s check against 0.9; 72 req/s 0.252-0.315 and 0.428 (this"
        " module alone, 2026-12-07)"
    )
)
def test_the_search_reports_a_rate_the_runs_around_it_and_their_spread(searched: Path) -> None:
    result: dict[str, Any] = json.loads((searched / "search.json").read_text())
    assert result["status"] == "found", result["summary"]
    # Each load held for its duration, and the answer checked by the two steady runs, as the report says.
    assert all(m["held_s"] is not None and m["held_s"] >= 1.5 for m in result["measurements"] if m["valid"])
    assert [(c["expect"], c["state"]) for c in result["checks"]] == [("holds", "holds"), ("fails", "fails")]
    lo, hi = result["bracket"]
    assert result["knee"] == lo and lo < hi
    sides = {b["load"]: b for b in result["bracket_loads"]}
    for load, verdict in ((lo, "holds"), (hi, "fails")):
        assert sides[load]["verdict"] == verdict and sides[load]["valid_runs"] >= 2
        assert sides[load]["share_met"]["n"] >= 2 and sides[load]["share_met"]["min"] is not None
    text = (searched / "report.txt").read_text()
    assert f"knee search (SEARCH=rate): {result['summary']}" in text
    assert "  each load held for 8 s, its first 2 s left out as ramp-up (the valid runs held it " in text, text
    assert f"  steady check of 12 s: {lo:g} req/s holds (share met " in text
    assert re.search(rf"bracket {lo:g} req/s: holds .* over \d+ valid run\(s\)", text), text
    # Every run the search made is a run of the bench, with its own directory, seed and figures.
    s = json.loads((searched / "summary.json").read_text())
    measured = [r for r in s["runs"] if r["phase"] == "measured"]
    assert len(measured) == len(result["measurements"]) + len(result["checks"])
    assert len({r["seed"] for r in measured}) == len(measured)
    assert {p["request_rate"] for p in s["points"]} >= {lo, hi}


def test_the_figure_is_seen_in_headless_chromium(searched: Path, tmp_path: Path) -> None:
    svg = searched / "knee.svg"
    assert svg.is_file()
    page = (searched / "report.html").read_text()
    assert '<div id="knee">' in page and "knee-line-" in page
    png = tmp_path / "knee.png"
    screenshot(svg, png, tmp_path / "chromium-profile")
    counts = read_png(png.read_bytes()).rgb_counts()
    # The latency medians (TTFT p50's red), goodput (teal), the bracket band and the black knee line: each drawn.
    assert pixels_of(counts, LATENCY[0][2]) > 100, "no TTFT line"
    assert pixels_of(counts, GOODPUT[2]) > 100, "no goodput line"
    assert pixels_of(counts, BRACKET) > 500, "no bracket band"
    assert pixels_of(counts, KNEE) > 200, "no knee line"
