"""How often `make compare` calls identical sides different: its intervals' calibration, by Monte-Carlo on runs
recorded on this machine (tests/fixtures/compare-calibration/, RECORDED: six smoke benches of one cpu-tiny deploy).

Each trial draws A's and B's runs, without replacement, from the same pool of one point's recorded runs, so the two
sides are identical by construction (the null hypothesis true), and asks serving.bench.compare.effect, at a 95% level,
whether B differs. Over the trials, the share called different must be at most 5%, within the Monte-Carlo's own
sampling error (two standard errors of a binomial share at 5%). This is the statistical question the integration
test "four benches of one deploy compared A/B/B/A show no difference" asked with one draw per CI run; here it is
asked hundreds of times, in seconds, and a too-narrow interval (a z for a t, requests resampled as if independent,
benches not resampled) fails it.
"""

from __future__ import annotations

import json
import math
import random
import zlib
from pathlib import Path
from typing import Any

import pytest

from serving.bench import compare

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "compare-calibration" / "smoke-benches.json"
LEVEL = 0.95
TRIALS = 300
ITERATIONS = 1000  # the bootstrap's; make compare uses 4000 for its Bonferroni-tightened per-figure levels
RUNS_A_SIDE = 3  # one bench of three measured runs a side, as test_bench's benches


def _pool(point: str, figure: str) -> list[list[float]]:
    recorded = json.loads(FIXTURE.read_text())
    return [run for bench in recorded["benches"] for run in bench[point][figure] if run]


def _false_positive_share(point: str, figure: str, sides: tuple[int, int], seed: int) -> tuple[float, int]:
    """(share of trials called different, trials) for identical sides of `sides` benches each."""
    pool = _pool(point, figure)
    per_side = [n * RUNS_A_SIDE for n in sides]
    assert len(pool) >= sum(per_side), f"{point} {figure}: {len(pool)} recorded runs, {sum(per_side)} needed"
    _, _, higher_is_better, _ = compare.FIGURES[figure]
    rng = random.Random(seed)
    called = 0
    for trial in range(TRIALS):
        draw = rng.sample(pool, sum(per_side))
        a_runs, b_runs = draw[: per_side[0]], draw[per_side[0] :]
        a = [a_runs[i : i + RUNS_A_SIDE] for i in range(0, len(a_runs), RUNS_A_SIDE)]
        b = [b_runs[i : i + RUNS_A_SIDE] for i in range(0, len(b_runs), RUNS_A_SIDE)]
        e: dict[str, Any] | None = compare.effect(a, b, higher_is_better, ITERATIONS, trial, LEVEL)
        assert e is not None
        called += not str(e["verdict"]).startswith(compare.NO_DIFFERENCE)
    return called / TRIALS, TRIALS


def _bound(share: float = 1 - LEVEL, trials: int = TRIALS) -> float:
    return share + 2 * math.sqrt(share * (1 - share) / trials)


def test_the_recording_is_what_it_says() -> None:
    recorded = json.loads(FIXTURE.read_text())
    assert recorded["recorded"].startswith("RECORDED")
    assert len(recorded["benches"]) == 6
    for bench in recorded["benches"]:
        assert set(bench) == {"c1", "c4"}
        assert all(len(bench[p]["tpot_ms"]) == 3 for p in bench)  # three valid measured runs a point


@pytest.mark.parametrize("figure", ["ttft_ms", "tpot_ms", "output_tok_s"])
@pytest.mark.parametrize("point", ["c1", "c4"])
def test_identical_sides_are_called_different_at_most_as_often_as_the_level_allows(point: str, figure: str) -> None:
    share, trials = _false_positive_share(point, figure, (1, 1), seed=zlib.crc32(f"{point} {figure}".encode()))
    assert share <= _bound(), f"{point} {figure}: identical sides called different in {share:.1%} of {trials} trials"
