"""The statistics the bench report and `make compare` print: `describe` (median, min, max, n),
`bootstrap_diff` and `bootstrap_diff_benches` (a bench-then-run-then-request resampling of the difference of
medians), and Welch's t interval over benches' medians."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence


def describe(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """median, min, max and n of the finite values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def bootstrap_diff(
    a_runs: Sequence[Sequence[float]],
    b_runs: Sequence[Sequence[float]],
    stat: Callable[[Sequence[float]], float] = statistics.median,
    iterations: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """stat(B) - stat(A) and its bootstrap confidence interval, for one bench per side (runs of requests).

    Two-level resampling: runs with replacement, then observations within each chosen run. Requests of one
    run share its conditions, so resampling requests alone would ignore the run-to-run spread (REFERENCE §1:
    about ±12% here) and call noise a difference.
    """
    return bootstrap_diff_benches([a_runs], [b_runs], stat, iterations, level, seed)


def bootstrap_diff_benches(
    a: Sequence[Sequence[Sequence[float]]],
    b: Sequence[Sequence[Sequence[float]]],
    stat: Callable[[Sequence[float]], float] = statistics.median,
    iterations: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """stat(B) - stat(A) with its bootstrap interval when each side is several benches (of runs of requests).

    Three levels: benches, then runs within a bench, then requests within a run. Runs of one bench are not
    independent either: on this shared machine, back-to-back benches of one deploy differed by ~20% while the
    runs inside each agreed, so with several benches per side the bench is the unit that is resampled. With
    one bench per side that level is fixed, and drift between the two benches is inside the effect.
    """
    return bootstrap_contrast([b, a], [1.0, -1.0], stat, iterations, level, seed)


def bootstrap_contrast(
    sides: Sequence[Sequence[Sequence[Sequence[float]]]],
    weights: Sequence[float],
    stat: Callable[[Sequence[float]], float] = statistics.median,
    iterations: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """sum(w_i * stat(side_i)) with its bootstrap interval, each side several benches of runs of requests and
    resampled on its own, as bootstrap_diff_benches does (a difference is the contrast B - A). A 2x2 design's
    interaction is the contrast D - B - C + A (serving/bench/compare.py design_2x2)."""
    pools = [[x for x in ([list(r) for r in bench if r] for bench in side) if x] for side in sides]
    if any(not p for p in pools):
        raise ValueError("every side needs at least one run with observations")
    rng = random.Random(seed)

    def resample(benches: list[list[list[float]]]) -> list[float]:
        pooled: list[float] = []
        for _ in benches:
            bench = benches[rng.randrange(len(benches))] if len(benches) > 1 else benches[0]
            for _ in bench:
                run = bench[rng.randrange(len(bench))]
                pooled.extend(run[rng.randrange(len(run))] for _ in run)
        return pooled

    def flat(benches: list[list[list[float]]]) -> list[float]:
        return [x for bench in benches for r in bench for x in r]

    est = sum(w * stat(flat(p)) for w, p in zip(weights, pools, strict=True))
    values = sorted(sum(w * stat(resample(p)) for w, p in zip(weights, pools, strict=True)) for _ in range(iterations))
    lo_i = math.floor((1 - level) / 2 * iterations)
    hi_i = min(iterations - 1, math.ceil((1 + level) / 2 * iterations) - 1)
    return est, values[lo_i], values[hi_i]


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df degrees of freedom (df >= 1, 0.5 <= p < 1; Welch's df is
    fractional): scipy's, imported here because only a comparison with several benches a side needs it."""
    if not 0.5 <= p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and df >= 1, got p={p}, df={df}")
    from scipy import stats

    return float(stats.t.ppf(p, df))


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """mean(b) - mean(a) and its Welch t interval, over per-bench figures; None with fewer than 2 a side.

    The bootstrap cannot say how far two or three benches a side may drift apart by chance (it underestimates
    spread at such small n); Student's t with Welch's degrees of freedom can, and is wide when it should be.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.mean(b) - statistics.mean(a)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / ((va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0))
    t = t_quantile(1 - (1 - level) / 2, max(1.0, df))
    return diff, diff - t * se, diff + t * se
