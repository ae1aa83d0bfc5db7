"""The knee search on the real CPU deployment: `make bench WORKLOAD=knee SEARCH=rate` finds the highest arrival
rate at which the workload's SLO holds and the client sustains the rate, measures the bracketing rates again, and
states the spread; the figure is looked at in headless Chromium (tests/integration/test_report_screenshot.py's
screenshot): its latency and goodput series, the bracket band and the knee line are drawn.

The shipped `knee` workload with fewer prompts per run, longer answers and fewer runs in all, so that the search fits
CI and its knee lies well inside the limit; the note of issue 15 holds the full search on this machine and how long
it took.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.knee_plot import BRACKET, GOODPUT, KNEE, LATENCY
from tests.integration.conftest import REPO, make
from tests.integration.test_report_screenshot import pixels_of, read_png, screenshot

# The search's fixture holds a deploy and up to 24 runs (its make is bounded at 1500 s).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
ENGINE_STARTS = 0


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = make("deploy")
    assert r.rc == 0, r.output[-3000:]
    w = yaml.safe_load((REPO / "serving" / "workloads" / "knee.yaml").read_text())
    # From 8 req/s with a coarser bisection and 2 runs per bracketing load; 24 runs at most leaves room for the
    # border's contradictions. 12 prompts a run (with 48, the random prompts' token runs collided on the tiny
    # model's vocabulary and the prefix cache hit), and 96-token answers: past the server's rate the 9th request
    # waits for the first wave of 8 sequences, ~0.5 s, beyond the SLO's 300 ms TTFT, so 4 of 12 miss it (a run
    # here: knee 16 req/s, 22.6 failing at a share of 0.667). With 32-token answers that wait was ~250 ms, and
    # whether 128 req/s "held" depended on the machine's minute (knees of 45.3 and 90.5 req/s here, and a CI-like
    # run that held to the limit).
    w["num_prompts"] = 12
    w["output_len"] = 96
    w["search"] = {**w["search"], "rate": {"start": 8.0, "limit": 128.0}, "resolution": 0.5, "confirm_runs": 2,
                   "max_runs": 24}  # fmt: skip
    path = tmp_path_factory.mktemp("knee") / "knee.yaml"
    path.write_text(yaml.safe_dump(w))
    b = make("bench", f"WORKLOAD={path}", "SEARCH=rate", timeout=1500)
    assert b.rc == 0, b.output[-4000:]
    m = re.search(r"report: (\S+)/report\.txt", b.output)
    assert m, f"the search printed no report path: {b.output[-3000:]}"
    return Path(m.group(1))


def test_the_search_reports_a_rate_the_runs_around_it_and_their_spread(searched: Path) -> None:
    result: dict[str, Any] = json.loads((searched / "search.json").read_text())
    assert result["status"] == "found", result["summary"]
    lo, hi = result["bracket"]
    assert result["knee"] == lo and lo < hi
    sides = {b["load"]: b for b in result["bracket_loads"]}
    for load, verdict in ((lo, "holds"), (hi, "fails")):
        assert sides[load]["verdict"] == verdict and sides[load]["valid_runs"] >= 2
        assert sides[load]["share_met"]["n"] >= 2 and sides[load]["share_met"]["min"] is not None
    text = (searched / "report.txt").read_text()
    assert f"knee search (SEARCH=rate): {result['summary']}" in text
    assert re.search(rf"bracket {lo:g} req/s: holds .* over \d+ valid run\(s\)", text), text
    # Every run the search made is a run of the bench, with its own directory, seed and figures.
    s = json.loads((searched / "summary.json").read_text())
    measured = [r for r in s["runs"] if r["phase"] == "measured"]
    assert len(measured) == len(result["measurements"])
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
