"""`make compare`: did one change make a measurable difference? (seed 000, §13)

Two sides, A and B, each one or more benches (`make bench` run directories). A comparison changes one thing:
the benches' conditions (serving.bench.conditions.conditions: the workload, the profile, the image, where the
client ran, the host) must be equal within each side, and equal between the sides except for the declared
variables; otherwise it refuses and lists the fields that differ. Several benches per side let an operator run
A/B/B/A, or B before A, so that drift in temperature, caches or background load does not line up with the
change; the report says in which order the benches ran.

For each operating point both sides measured and each figure (TTFT, TPOT, per-request decode rate, e2e latency
per request; aggregate output tok/s per run), the effect is median(B) - median(A) with a bootstrap
confidence interval that resamples benches, then runs, then requests within runs
(serving.bench.protocol.bootstrap_diff_benches); with two or more benches a side, a Welch t interval over the benches'
medians must exclude zero as well. An interval that spans zero is reported as "no measurable difference".

The intervals are simultaneous: a compare reads 5 figures at each point, and "every figure shows no
difference" is the claim an operator acts on, so the 95% is for the whole family (Bonferroni: with m figures,
each interval is at 1 - 0.05/m). At 95% per figure, ten figures of two identical deployments would show at
least one "difference" in up to 40% of compares.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.bench import conditions as bench_conditions
from serving.bench import protocol as bench
from serving.bench import runs as bench_runs
from serving.bench import stats
from serving.errors import InputError
from serving.record.run_dirs import resolve_run_dir

SCHEMA_VERSION = 1
NO_DIFFERENCE = "no measurable difference"

# figure -> (what it is, unit, higher is better, per request (True) or per run (False))
FIGURES: dict[str, tuple[str, str, bool, bool]] = {
    "ttft_ms": ("TTFT", "ms", False, True),
    "tpot_ms": ("TPOT", "ms", False, True),
    "decode_tok_s": ("decode rate per request", "tok/s", True, True),
    "e2el_ms": ("e2e latency", "ms", False, True),
    "output_tok_s": ("aggregate output", "tok/s", True, False),
}


# A side needs this many valid measured runs at a point for its figures there to be compared: the intervals
# resample runs, and one run's requests show that run's spread, not the spread between runs (±12% here); one
# run a side once gave aggregate output an interval of zero width.
MIN_VALID_RUNS = 2


def valid_runs(side: Side, point: str) -> int:
    """The valid measured runs a side has at a point, over its benches."""
    return sum(len(bench) for bench in (side.observations.get(point) or {}).get("ttft_ms", []))


def too_few_runs(sides: Sequence[Side], point: str) -> str | None:
    """Why a point cannot be compared (a side with fewer than MIN_VALID_RUNS valid runs there), or None."""
    short = [f"{s.name} has {valid_runs(s, point)}" for s in sides if valid_runs(s, point) < MIN_VALID_RUNS]
    if not short:
        return None
    return (
        f"not compared: {', '.join(short)} valid measured run(s) here, at least {MIN_VALID_RUNS} a side are needed "
        "(more runs: RUNS=n)"
    )


class CompareRefused(InputError):
    """The two sides cannot be compared: their conditions differ in more than the declared variables."""


@dataclass(frozen=True)
class Side:
    name: str
    dirs: tuple[Path, ...]
    manifests: tuple[dict[str, Any], ...]
    started: tuple[float, ...]  # each bench's first run start, unix s
    # point -> figure -> per bench, one list of observations per measured run
    observations: dict[str, dict[str, list[list[list[float]]]]]
    # measured runs left out because their bench flagged them invalid: "<bench dir> <run id>: <first flag>"
    excluded: tuple[str, ...] = ()
    # the serving container each bench ran against (bench/serving-container.json), None where not recorded
    containers: tuple[str | None, ...] = ()

    def deploys(self) -> int:
        """How many serving containers (deploys, restarts) this side's benches ran against."""
        return len({c for c in self.containers if c})


def resolve_bench_dir(ref: str, runs_dir: Path) -> Path:
    """A bench directory from a path (runs/<host>/<ts> or its bench/) or a bare run id (<ts>) under runs_dir
    (serving/record/run_dirs.py)."""
    return resolve_run_dir(ref, runs_dir, ("bench",), _is_bench, "bench",
                           "runs/<host>/<timestamp>/bench/ with manifest.json")  # fmt: skip


def _is_bench(d: Path) -> bool:
    return (d / "manifest.json").is_file() and (d / "runs").is_dir()


# What an operator can do about a bench whose record is damaged: the bench's own files are never touched.
_REBENCH = "restore it from a copy, or run the bench again (make bench) and compare that run"


def _json(path: Path, what: str) -> Any:
    """A bench's JSON file, or one line naming it and what to do when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror}: {_REBENCH}") from None
    except ValueError as e:
        raise InputError(f"{path}: {what} is not valid JSON ({e}): truncated or corrupt; {_REBENCH}") from None


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _load_bench(d: Path) -> tuple[dict[str, Any], float, dict[str, dict[str, list[list[float]]]], list[str]]:
    """A bench's manifest, first start, the observations of its valid measured runs, and the runs it flagged.

    A run is pooled only when its own bench judged it valid (serving.bench.protocol.summarize_run: no failed or short
    requests, no prefix-cache hits, server and client tokens agree, the arrival rate sustained, the stream not
    buffered): a comparison keeps the validity rules its benches keep.
    """
    manifest = _json(d / "manifest.json", "the bench manifest")
    if not isinstance(manifest, dict) or manifest.get("kind") != "bench":
        raise InputError(f"{d / 'manifest.json'}: not a bench manifest (no kind: bench): {_REBENCH}")
    runs = manifest.get("runs")
    fields = {"id", "phase", "point"}
    if not isinstance(runs, list) or not all(isinstance(r, dict) and fields <= r.keys() for r in runs):
        raise InputError(f"{d / 'manifest.json'}: the bench manifest's runs are missing or malformed: {_REBENCH}")
    obs: dict[str, dict[str, list[list[float]]]] = {}
    excluded: list[str] = []
    first_start = math.inf
    for run in manifest["runs"]:
        run_dir = d / "runs" / run["id"]
        try:
            status = json.loads((run_dir / "status.json").read_text())
            result = json.loads((run_dir / bench.RESULT_FILE).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(status.get("started_unix_s"), int | float):
            first_start = min(first_start, float(status["started_unix_s"]))
        if run["phase"] != "measured" or status.get("status") != "ok":
            continue
        judged = bench_runs.summarize_run(
            run, status, result, _text(run_dir / "metrics-before.txt"), _text(run_dir / "metrics-after.txt"),
            manifest["workload"],
        )  # fmt: skip
        if not judged["valid"]:
            excluded.append(f"{d} {run['id']}: {judged['flags'][0] if judged['flags'] else 'invalid'}")
            continue
        reqs = [o for o in bench_runs.parse_requests(result) if o.success]
        figures = obs.setdefault(run["point"], {k: [] for k in FIGURES})
        ms = 1000.0
        figures["ttft_ms"].append([o.ttft_s * ms for o in reqs if o.ttft_s is not None])
        figures["tpot_ms"].append([o.tpot_s * ms for o in reqs if o.tpot_s is not None])
        figures["decode_tok_s"].append([o.decode_tok_s for o in reqs if o.decode_tok_s is not None])
        figures["e2el_ms"].append([o.e2el_s * ms for o in reqs if o.e2el_s is not None])
        duration = result.get("duration")
        if isinstance(duration, int | float) and duration > 0:
            figures["output_tok_s"].append([sum(o.output_tokens or 0 for o in reqs) / duration])
    return manifest, first_start, obs, excluded


def load_side(name: str, refs: Sequence[str], runs_dir: Path) -> Side:
    if not refs:
        raise InputError(f"side {name}: give at least one bench run")
    dirs, manifests, started, excluded, containers = [], [], [], [], []
    observations: dict[str, dict[str, list[list[list[float]]]]] = {}
    for ref in refs:
        d = resolve_bench_dir(ref, runs_dir)
        manifest, first, obs, left_out = _load_bench(d)
        excluded += left_out
        containers.append(_container(d))
        dirs.append(d)
        manifests.append(manifest)
        started.append(first)
        for point, figures in obs.items():
            into = observations.setdefault(point, {k: [] for k in FIGURES})
            for k, runs in figures.items():
                into[k].append(runs)
    return Side(name, tuple(dirs), tuple(manifests), tuple(started), observations, tuple(excluded), tuple(containers))


def _container(d: Path) -> str | None:
    """The serving container's id a bench ran against (bench/serving-container.json), or None."""
    try:
        data = json.loads((d / "serving-container.json").read_text())
        return str((data.get("before") or {}).get("id") or "") or None
    except (OSError, ValueError, AttributeError):
        return None


def check_restarts(sides: Sequence[Side]) -> None:
    """DESIGN=restarts: each side's benches ran against as many serving containers as there are benches (a deploy
    or restart before each), so the interval over benches carries restart-to-restart variation."""
    for s in sides:
        if len(s.dirs) < 2 or s.deploys() < len(s.dirs):
            raise CompareRefused(
                f"DESIGN=restarts: side {s.name} has {len(s.dirs)} bench(es) from {s.deploys()} serving "
                "container(s); give each side two or more benches, each after its own deploy (make deploy "
                "ANSIBLE_ARGS='-e serve_force_replace=true' restarts the same profile)"
            )


def _declared(key: str, variables: Sequence[str]) -> bool:
    return any(key == v or key.startswith(v + ".") or ("." not in v and key.endswith("." + v)) for v in variables)


def differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def check_conditions(a: Side, b: Side, variables: Sequence[str]) -> dict[str, Any]:
    """The declared differences, or CompareRefused listing every field that differs besides them."""
    for side in (a, b):
        base = bench_conditions.conditions(side.manifests[0])
        for d, m in zip(side.dirs[1:], side.manifests[1:], strict=True):
            diff = differing(base, bench_conditions.conditions(m))
            if diff:
                raise CompareRefused(
                    f"side {side.name}: {side.dirs[0]} and {d} were not run under the same conditions: "
                    + "; ".join(f"{k}: {x!r} vs {y!r}" for k, x, y in diff)
                )
    diff = differing(bench_conditions.conditions(a.manifests[0]), bench_conditions.conditions(b.manifests[0]))
    profiled = [(k, x, y) for k, x, y in diff if k == "profiler"]
    if profiled:
        _, x, y = profiled[0]
        raise CompareRefused(
            f"refusing to compare: profiler: A={x!r} B={y!r}: a bench of an engine running with a profiler "
            "configured (make profile) measures the profiler too, so its figures are not results (seed 000 §6); "
            "compare profiled benches only with profiled ones"
        )
    undeclared = [(k, x, y) for k, x, y in diff if not _declared(k, variables)]
    if undeclared:
        declared = f" (declared: {', '.join(variables)})" if variables else " (no variable declared: VARIABLE=...)"
        raise CompareRefused(
            f"refusing to compare: A and B differ in more than the declared variable{declared}: "
            + "; ".join(f"{k}: A={x!r} B={y!r}" for k, x, y in undeclared)
        )
    return {k: {"A": x, "B": y} for k, x, y in diff}


def order(a: Side, b: Side) -> str:
    """The order the benches ran in, and whether a steady drift (load, temperature) falls equally on A and B.

    A/B/A/B alternates, but B runs one place later on average, so a steady drift lands on B; A/B/B/A puts both
    sides at the same mean position, and a linear drift cancels.
    """
    seq = sorted([(t, "A") for t in a.started] + [(t, "B") for t in b.started])
    letters = "".join(s for _, s in seq)
    if len(letters) == 2:
        return "A then B" if letters == "AB" else "B then A"
    runs = letters.count("AB") + letters.count("BA")
    kind = "interleaved" if runs >= len(letters) - 1 else "blocked"
    pos = {side: statistics.mean(i for i, x in enumerate(letters) if x == side) for side in "AB"}
    if abs(pos["A"] - pos["B"]) < 1e-9:
        return f"balanced: {'/'.join(letters)} (a steady drift falls equally on A and B)"
    later = "B" if pos["B"] > pos["A"] else "A"
    return f"{kind}: {'/'.join(letters)} ({later} ran later on average; A/B/B/A would cancel a steady drift)"


def effect(
    a_benches: list[list[list[float]]],
    b_benches: list[list[list[float]]],
    higher_is_better: bool,
    iterations: int,
    seed: int,
    level: float,
) -> dict[str, Any] | None:
    a_runs = [r for bench_runs in a_benches for r in bench_runs if r]
    b_runs = [r for bench_runs in b_benches for r in bench_runs if r]
    if not a_runs or not b_runs:
        return None
    est, lo, hi = stats.bootstrap_diff_benches(a_benches, b_benches, iterations=iterations, level=level, seed=seed)
    med_a = statistics.median([x for r in a_runs for x in r])
    med_b = statistics.median([x for r in b_runs for x in r])
    # With several benches a side, the difference must also stand out from the drift between benches.
    per_bench_a = [statistics.median([x for r in runs for x in r]) for runs in a_benches if any(runs)]
    per_bench_b = [statistics.median([x for r in runs for x in r]) for runs in b_benches if any(runs)]
    welch = stats.welch_interval(per_bench_a, per_bench_b, level)
    # And from the spread between runs: the bootstrap resamples a side's two or three runs, which at that n
    # understates how far runs spread (identical sides, one bench of 3 runs each, were called different in 8.5
    # to 14.5% of trials at 95%: tests/unit/bench/test_compare_calibration.py); Welch's t over the runs' medians is wide
    # when it should be.
    per_run_a = [statistics.median(r) for r in a_runs]
    per_run_b = [statistics.median(r) for r in b_runs]
    welch_runs = stats.welch_interval(per_run_a, per_run_b, level)
    if lo <= 0 <= hi:
        verdict = NO_DIFFERENCE
    elif welch is not None and welch[1] <= 0 <= welch[2]:
        verdict = f"{NO_DIFFERENCE} (between benches: the benches of one side drift as far apart)"
    elif welch_runs is not None and welch_runs[1] <= 0 <= welch_runs[2]:
        verdict = f"{NO_DIFFERENCE} (between runs: the runs of one side spread as far apart)"
    else:
        better = (est > 0) == higher_is_better
        verdict = f"B {'higher' if est > 0 else 'lower'} ({'better' if better else 'worse'})"
    return {
        "median_a": med_a,
        "median_b": med_b,
        "n_runs_a": len(a_runs),
        "n_runs_b": len(b_runs),
        "n_benches_a": sum(1 for x in a_benches if any(x)),
        "n_benches_b": sum(1 for x in b_benches if any(x)),
        "n_a": sum(len(r) for r in a_runs),
        "n_b": sum(len(r) for r in b_runs),
        "diff": est,
        "ci": [lo, hi],
        "bench_medians_a": per_bench_a,
        "bench_medians_b": per_bench_b,
        "welch_ci_over_benches": list(welch[1:]) if welch else None,
        "welch_ci_over_runs": list(welch_runs[1:]) if welch_runs else None,
        "relative": est / med_a if med_a else None,
        "verdict": verdict,
    }


FAMILY_LEVEL = 0.95


def check_level(level: float) -> None:
    """The family's confidence an operator asked for (make compare LEVEL=): 0.95 unless a decision needs more."""
    if not 0.5 <= level < 1:
        raise CompareRefused(f"LEVEL={level:g}: give the family's confidence as a fraction in [0.5, 1), e.g. 0.99")


def _pct(level: float) -> str:
    """95%, 99.9%: as many decimals as the level has."""
    return f"{round(level * 100, 6):g}%"


def compare(
    a: Side,
    b: Side,
    variables: Sequence[str],
    iterations: int = 4000,
    seed: int = 0,
    hypothesis: Mapping[str, Any] | None = None,
    restarts: bool = False,
    family_level: float = FAMILY_LEVEL,
) -> dict[str, Any]:
    """The effects at each point both sides measured; with a recorded hypothesis (serving/bench/hypothesis.py), its
    verdict. restarts: the design DESIGN=restarts (check_restarts) is required of both sides. family_level: the
    simultaneous confidence of all the intervals (check_level)."""
    check_level(family_level)
    declared = check_conditions(a, b, variables)
    if restarts:
        check_restarts([a, b])
    points = [p for p in a.observations if p in b.observations]
    if not points:
        raise CompareRefused(
            "A and B have no operating point with valid measured runs on both sides"
            + "".join(f"; {s.name} left out {x}" for s in (a, b) for x in s.excluded[:3])
        )
    tested = len(points) * len(FIGURES)
    level = 1 - (1 - family_level) / tested
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "a": [str(d) for d in a.dirs],
        "b": [str(d) for d in b.dirs],
        "variables": list(variables),
        "declared_differences": declared,
        "order": order(a, b),
        "family_level": family_level,
        "figures_tested": tested,
        "level_per_figure": level,
        "excluded": {"A": list(a.excluded), "B": list(b.excluded)},
        "deploys": {"A": a.deploys(), "B": b.deploys()},
        "design": "restarts" if restarts else None,
        "too_few_runs": {},
        "points": {},
    }
    if variables and not declared:
        result["note"] = f"the declared variable ({', '.join(variables)}) is the same on both sides"
    for p in points:
        why = too_few_runs([a, b], p)
        if why:
            result["too_few_runs"][p] = why
            result["points"][p] = dict.fromkeys(FIGURES)
            continue
        result["points"][p] = {
            k: effect(a.observations[p][k], b.observations[p][k], hib, iterations, seed, level)
            for k, (_, _, hib, _) in FIGURES.items()
        }
    if hypothesis is not None:
        from serving.bench import hypothesis as hyp

        result["hypothesis"] = hyp.judge(hypothesis, result["points"], min(a.started + b.started), list(FIGURES))
        for point, why in result["too_few_runs"].items():  # say why a point has no effect to judge
            if point in result["hypothesis"]["points"]:
                result["hypothesis"]["points"][point]["why"] = why
    return result


def render_text(r: Mapping[str, Any]) -> str:
    lines = [f"A: {', '.join(r['a'])}", f"B: {', '.join(r['b'])}", f"order: {r['order']}"]
    if r["declared_differences"]:
        lines.append(
            "conditions equal except: "
            + "; ".join(f"{k} (A {v['A']!r}, B {v['B']!r})" for k, v in r["declared_differences"].items())
        )
    else:
        lines.append("conditions equal on both sides")
    if r.get("note"):
        lines.append(f"note: {r['note']}")
    for side, left_out in (r.get("excluded") or {}).items():
        for x in left_out:
            lines.append(f"left out of {side} (its bench flagged it): {x}")
    lines.append(
        "effect = median(B) - median(A), CI from resampling benches (when a side has several), runs, requests;"
    )
    lines.append("  with 2+ benches a side, also a Welch t interval over the benches' medians: both must exclude 0")
    lines.append(
        f"  intervals are simultaneous at {_pct(r['family_level'])} over the {r['figures_tested']} figures below "
        f"(Bonferroni: each at {_pct(r['level_per_figure'])})"
    )
    if len(r["a"]) == 1 or len(r["b"]) == 1:
        lines.append(
            "note: one bench on a side: drift between benches (load, temperature) is not in the interval; "
            "run several a side, A/B/B/A, for that"
        )
    deploys = r.get("deploys") or {}
    if deploys:
        restart = (
            "restart-to-restart variation is in the interval over benches"
            if r.get("design")
            else ("DESIGN=restarts requires a deploy before each bench")
        )
        lines.append(
            f"deploys: A's {len(r['a'])} bench(es) ran against {deploys.get('A')} serving container(s), B's "
            f"{len(r['b'])} against {deploys.get('B')}: {restart}"
        )
    for point, figures in r["points"].items():
        lines += ["", f"{point}:"]
        if (r.get("too_few_runs") or {}).get(point):
            lines.append(f"  {r['too_few_runs'][point]}")
            continue
        for k, e in figures.items():
            what, unit, _, _ = FIGURES[k]
            if e is None:
                lines.append(f"  {what:24} no observations on one side")
                continue
            rel = f" ({e['relative']:+.1%})" if e["relative"] is not None else ""
            lines.append(
                f"  {what:24} A {e['median_a']:.4g} {unit} (n={e['n_a']}, {e['n_runs_a']} runs)  "
                f"B {e['median_b']:.4g} {unit} (n={e['n_b']}, {e['n_runs_b']} runs)  "
                f"B-A {e['diff']:+.4g}{rel} [{e['ci'][0]:+.4g}, {e['ci'][1]:+.4g}]"
                + (
                    f" benches [{e['welch_ci_over_benches'][0]:+.4g}, {e['welch_ci_over_benches'][1]:+.4g}]"
                    if e["welch_ci_over_benches"]
                    else ""
                )
                + (
                    f" runs [{e['welch_ci_over_runs'][0]:+.4g}, {e['welch_ci_over_runs'][1]:+.4g}]"
                    if e.get("welch_ci_over_runs")
                    else ""
                )
                + f"  {e['verdict']}"
            )
    if r.get("hypothesis"):
        from serving.bench import hypothesis as hyp

        lines += ["", *hyp.render(r["hypothesis"])]
    return "\n".join(lines) + "\n"


# A 2x2 design (seed 000 §8, §13: "each change alone had a small effect, but together they substantially reduced
# latency"): A the base, B with change 1, C with change 2, D with both. Each contrast is a weighted sum of the
# sides' medians: (weights of A, B, C, D).
CONTRASTS: dict[str, tuple[str, tuple[float, float, float, float]]] = {
    "change1": ("change 1 alone (B - A)", (-1.0, 1.0, 0.0, 0.0)),
    "change2": ("change 2 alone (C - A)", (-1.0, 0.0, 1.0, 0.0)),
    "both": ("both together (D - A)", (-1.0, 0.0, 0.0, 1.0)),
    "interaction": ("interaction (D - B - C + A)", (1.0, -1.0, -1.0, 1.0)),
}


def _differs_in(x: Side, y: Side, variables: Sequence[str], what: str) -> dict[str, Any]:
    """x and y differ in exactly the variables named (CompareRefused otherwise): their declared differences."""
    declared = check_conditions(x, y, variables)
    for v in variables:
        if not any(_declared(k, [v]) for k in declared):
            raise CompareRefused(f"refusing the 2x2 design: {x.name} and {y.name} do not differ in {v} ({what})")
    return declared


def design_2x2(
    sides: Sequence[Side],
    variables: Sequence[str],
    iterations: int = 4000,
    seed: int = 0,
    family_level: float = FAMILY_LEVEL,
) -> dict[str, Any]:
    """Four sides A, B = A + change 1, C = A + change 2, D = A + both; variables: (change 1's, change 2's).

    Every pair is checked: B and D differ from A and C in change 1 only, C and D from A and B in change 2 only.
    Per point all four measured and per figure: each change alone, both together, and the interaction, each with
    a bootstrap interval that resamples every side on its own (serving.bench.stats.bootstrap_contrast). The intervals
    are simultaneous over every contrast of every figure and point, as compare's are. An interaction whose
    interval excludes 0 means the changes do not add up: together they did more (or less) than each alone.
    """
    check_level(family_level)
    if len(sides) != 4 or len(variables) != 2:
        raise CompareRefused("a 2x2 design takes four sides (A, B, C, D) and two variables (change 1, change 2)")
    a, b, c, d = sides
    v1, v2 = variables
    declared = {
        "change1": _differs_in(a, b, [v1], "B is A with change 1"),
        "change2": _differs_in(a, c, [v2], "C is A with change 2"),
    }
    _differs_in(a, d, [v1, v2], "D is A with both")
    _differs_in(b, d, [v2], "D is B with change 2")
    _differs_in(c, d, [v1], "D is C with change 1")
    points = [p for p in a.observations if all(p in s.observations for s in (b, c, d))]
    if not points:
        raise CompareRefused("A, B, C and D have no operating point with valid measured runs on all four sides")
    tested = len(points) * len(FIGURES) * len(CONTRASTS)
    level = 1 - (1 - family_level) / tested
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "design": "2x2",
        "sides": {s.name: [str(x) for x in s.dirs] for s in sides},
        "variables": list(variables),
        "declared_differences": declared,
        "family_level": family_level,
        "figures_tested": tested,
        "level_per_figure": level,
        "excluded": {s.name: list(s.excluded) for s in sides},
        "too_few_runs": {},
        "points": {},
    }
    for p in points:
        why = too_few_runs(sides, p)
        if why:
            result["too_few_runs"][p] = why
            result["points"][p] = dict.fromkeys(FIGURES)
            continue
        cells: dict[str, Any] = {}
        for k in FIGURES:
            benches = [s.observations[p][k] for s in sides]
            if any(not any(r for bench in side for r in bench) for side in benches):
                cells[k] = None
                continue
            medians = [statistics.median([x for bench in side for r in bench for x in r]) for side in benches]
            effects = {}
            for name, (_, weights) in CONTRASTS.items():
                est, lo, hi = stats.bootstrap_contrast(benches, weights, iterations=iterations, level=level, seed=seed)
                effects[name] = {"estimate": est, "ci": [lo, hi], "excludes_zero": not lo <= 0 <= hi}
            cells[k] = {"medians": dict(zip("ABCD", medians, strict=True)), "effects": effects}
        result["points"][p] = cells
    return result


def render_2x2(r: Mapping[str, Any]) -> str:
    v1, v2 = r["variables"]
    lines = [f"{name}: {', '.join(dirs)}" for name, dirs in r["sides"].items()]
    lines.append(f"design 2x2: change 1 = {v1} (A -> B), change 2 = {v2} (A -> C), both (A -> D)")
    for side, left_out in (r.get("excluded") or {}).items():
        lines += [f"left out of {side} (its bench flagged it): {x}" for x in left_out]
    lines.append(
        f"  intervals are simultaneous at {_pct(r['family_level'])} over the {r['figures_tested']} contrasts below "
        f"(Bonferroni: each at {_pct(r['level_per_figure'])}); an interaction outside 0 means the changes do not add up"
    )
    for point, cells in r["points"].items():
        lines += ["", f"{point}:"]
        if (r.get("too_few_runs") or {}).get(point):
            lines.append(f"  {r['too_few_runs'][point]}")
            continue
        for k, cell in cells.items():
            what, unit, _, _ = FIGURES[k]
            if cell is None:
                lines.append(f"  {what:24} no observations on a side")
                continue
            m = cell["medians"]
            lines.append(f"  {what} ({unit}): A {m['A']:.4g}  B {m['B']:.4g}  C {m['C']:.4g}  D {m['D']:.4g}")
            for name, (label, _) in CONTRASTS.items():
                e = cell["effects"][name]
                mark = "" if e["excludes_zero"] else f"  {NO_DIFFERENCE}"
                lines.append(f"    {label:30} {e['estimate']:+.4g} [{e['ci'][0]:+.4g}, {e['ci'][1]:+.4g}]{mark}")
    return "\n".join(lines) + "\n"
