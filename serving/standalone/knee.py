"""The knee search: the highest load at which a workload's per-request SLOs still hold, and how sure that is.

`make bench WORKLOAD=<w> SEARCH=rate|concurrency` measures one load at a time; this module is the decision
logic and nothing else: which load to measure next, how many runs of it, and what the runs say. It runs inside
the benchmark client container (copied next to images/vllm/bench_client.py and run by the image's Python), and
the controller imports it to write the report, so it is standard library only and imports nothing of the serving
package. It never measures anything itself, which is what lets the tests drive it with simulated servers. Being on
both sides, it holds the one per-request SLO rule (`meets_slo`, the report's serving/bench/runs.py slo_figures
judges by it too) and the one percentile (`percentile`) of the project's figures.

Two kinds of load:
  rate         requests/s sent open-loop (no concurrency cap), a float. A load HOLDS when the median share of
               requests meeting every SLO >= min_share AND the client kept up: median achieved/requested rate
               >= min_rate_ratio (a client that could not send the rate did not test it).
  concurrency  requests in flight (request rate inf, a concurrency cap), an integer. HOLDS on share met alone.

The algorithm (deterministic, no randomness):
  1. bracket  measure start, 2*start, 4*start, ... (capped at limit) until a load fails or the limit holds.
  2. bisect   between the highest holding and the lowest failing load (geometric midpoint for rate, integer
              midpoint for concurrency) until hi/lo <= 1 + resolution (rate) or hi - lo == 1 (concurrency).
  3. confirm  repeat the lower, then the upper bracketing load until each has confirm_runs valid runs; judge each
              by the MEDIAN of its valid runs (invalid runs are left out and reported; < 2 valid: not judged).
  4. a contradiction (the lower load fails on repetition, or the upper one holds) moves the bracket to the
              measured loads that agree, and the search goes on from 1 or 2 with the new bracket.
  5. it stops after max_runs runs, or at a load it cannot measure (max_invalid invalid runs), and says why.
A load is always judged by all of its valid runs so far: a load measured in one phase is not measured afresh in
another, so probe runs count towards its confirmation.

The client drives it:

    search = Search("rate", start=1.0, limit=64.0, min_share=0.95)
    while (step := search.next_step()) is not None:
        for _ in range(step.runs):
            search.record(step.load, Outcome(share_met=..., achieved_over_requested=..., valid=...))
    report = search.result()  # JSON-serialisable; result()["summary"] is the line an SRE reads
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["rate", "concurrency"]
Phase = Literal["bracket", "bisect", "confirm"]
State = Literal["holds", "fails", "undecided"]
# "running" until next_step() returns None; then one of the other four.
Status = Literal["running", "found", "held_to_limit", "failed_at_start", "inconclusive"]

# The per-request SLO thresholds a workload may set (any subset), in ms; a request meets one at <= the threshold.
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")
# Confirming a load takes at least two valid runs: the median of one run is that run, which is all a probe said.
MIN_VALID_TO_CONFIRM = 2
# next_step() moves through phases without measuring when a load already has the runs it needs; each move narrows
# the bracket or adds a run, so it ends long before this. Reaching it is a bug, and is said instead of looping.
_MAX_MOVES = 10_000
_DOING: dict[Phase, str] = {"bracket": "bracketing", "bisect": "bisecting", "confirm": "confirming"}


@dataclass(frozen=True)
class Outcome:
    """One measured run, as the client computes it from the run's result.

    share_met: fraction of the run's requests that met every SLO (failed requests count as not met), 0..1.
    achieved_over_requested: achieved request rate / requested rate (rate search); None for a concurrency search.
    valid: False when the run failed or was flagged untrustworthy; its figures are kept but judge nothing.
    goodput_req_s: requests/s that met every SLO, when the client computed it (reported, never judged).
    note: why a run is invalid, for the report.
    held_s: how long the run held its load after its ramp-up (serving/standalone/knee_runs.py; reported, never judged).
    """

    share_met: float | None
    achieved_over_requested: float | None = None
    valid: bool = True
    goodput_req_s: float | None = None
    note: str = ""
    held_s: float | None = None


@dataclass(frozen=True)
class Step:
    """What to measure next: `runs` more measured runs at `load` (an int for concurrency), in `phase`."""

    load: float
    runs: int
    phase: Phase


@dataclass(frozen=True)
class Verdict:
    """A load judged by the median of its valid runs."""

    load: float
    state: State
    valid_runs: int
    invalid_runs: int
    share_met: float | None  # the median of the valid runs
    achieved_over_requested: float | None  # the median of the valid runs; None for concurrency
    reason: str  # why it holds, fails or is undecided, in words


# --- per request -------------------------------------------------------------------------------------------------


def meets_slo(request: Mapping[str, Any], slo: Mapping[str, float]) -> bool:
    """Whether one request met every threshold of `slo` ({"ttft_ms": .., "tpot_ms": .., "e2e_ms": ..}, any subset).

    A request is a dict with ttft_ms, tpot_ms and e2e_ms. A failed request (no first token or no end: ttft_ms or
    e2e_ms None, or "success" False) meets nothing. A finished request with tpot_ms None, or with "output_tokens"
    <= 1, had one output token: it has no time per output token, so its TPOT threshold counts as met.
    """
    unknown = sorted(set(slo) - set(SLO_KEYS))
    if unknown:
        raise ValueError(f"unknown SLO thresholds {unknown}; known: {list(SLO_KEYS)}")
    if request.get("success") is False or request.get("ttft_ms") is None or request.get("e2e_ms") is None:
        return False
    one_token = request.get("tpot_ms") is None or (request.get("output_tokens") or 2) <= 1
    for key, threshold in slo.items():
        if key == "tpot_ms" and one_token:
            continue
        if float(request[key]) > float(threshold):
            return False
    return True


def share_met(requests: Sequence[Mapping[str, Any]], slo: Mapping[str, float]) -> float:
    """The fraction of `requests` that met every SLO (see meets_slo). A run with no requests measured nothing:
    ValueError, and the client marks that run invalid."""
    if not requests:
        raise ValueError("no requests: a run without requests has no share met")
    return sum(meets_slo(r, slo) for r in requests) / len(requests)


# The share of the requested rate a client must send for the load to count as tested (a client that sent less
# did not test it); serving/standalone/knee_runs.py's "arrivals bunched" note uses it too.
MIN_RATE_RATIO = 0.98


def holds(share: float, rate_ratio: float | None, min_share: float, min_rate_ratio: float | None) -> bool:
    """The SLO test of one load's figures: share met >= min_share and, when a rate is judged (min_rate_ratio not
    None), achieved/requested >= min_rate_ratio."""
    if share < min_share:
        return False
    return min_rate_ratio is None or (rate_ratio is not None and rate_ratio >= min_rate_ratio)


def spread(values: Iterable[float | None]) -> dict[str, Any]:
    """n, median, min, max of the values that are not None (the shape of serving/bench/stats.py `describe`)."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def percentile(xs: Iterable[float], p: float) -> float:
    """The p-th percentile (0 <= p <= 100) of xs, at least one value: linear interpolation between the two order
    statistics around it, numpy's default, as vLLM reports its p50, p90 and p99. The one percentile of the project's
    figures: the bench client's conversations results (images/vllm/bench_conversations.py, on the host) and the
    Benchmark Report's statistics (serving/bench/br_results.py, on the controller)."""
    ordered = sorted(xs)
    h = (len(ordered) - 1) * p / 100.0
    lo = int(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


# --- the search --------------------------------------------------------------------------------------------------


class Search:
    """The knee search's state machine: next_step() says what to measure, record() takes each run's Outcome,
    result() says what was found. See the module docstring for the algorithm."""

    def __init__(
        self,
        kind: Kind,
        start: float,
        limit: float,
        min_share: float,
        min_rate_ratio: float = MIN_RATE_RATIO,
        probe_runs: int = 1,
        confirm_runs: int = 3,
        resolution: float | None = None,
        max_runs: int = 30,
        max_invalid: int = 2,
    ) -> None:
        """kind: "rate" (req/s) or "concurrency"; start, limit: the lowest and highest load to measure; min_share:
        the share of requests that must meet the SLOs; min_rate_ratio: the achieved/requested rate a rate load
        needs (unused for concurrency); probe_runs: runs per load while bracketing and bisecting; confirm_runs:
        valid runs each bracketing load needs at the end; resolution: bisect a rate bracket until hi/lo <= 1 +
        resolution (0.25 when None); a concurrency bracket until its loads are adjacent integers or, where a
        resolution is given for it, hi/lo <= 1 + resolution (adjacent integers near a noisy knee are a
        difference no check can confirm); max_runs: runs in all, invalid ones
        too; max_invalid: invalid runs at one load after which that load is judged on what it has."""
        if kind not in ("rate", "concurrency"):
            raise ValueError(f"kind must be 'rate' or 'concurrency', not {kind!r}")
        if not (math.isfinite(start) and math.isfinite(limit) and 0 < start <= limit):
            raise ValueError(f"need 0 < start <= limit, both finite; start={start}, limit={limit}")
        if kind == "concurrency" and (start != int(start) or limit != int(limit)):
            raise ValueError(f"a concurrency search has integer loads; start={start}, limit={limit}")
        if not 0 < min_share <= 1:
            raise ValueError(f"min_share must be in (0, 1], not {min_share}")
        if kind == "rate" and not 0 < min_rate_ratio <= 1:
            raise ValueError(f"min_rate_ratio must be in (0, 1], not {min_rate_ratio}")
        if probe_runs < 1 or max_invalid < 1:
            raise ValueError(f"probe_runs and max_invalid must be >= 1; {probe_runs}, {max_invalid}")
        if confirm_runs < MIN_VALID_TO_CONFIRM:
            raise ValueError(f"confirm_runs must be >= {MIN_VALID_TO_CONFIRM}: one run is a probe, not a confirmation")
        if resolution is not None and not resolution > 0:
            raise ValueError(f"resolution must be > 0, not {resolution}")
        if max_runs < 1:
            raise ValueError(f"max_runs must be >= 1, not {max_runs}")
        self.kind: Kind = kind
        self.start: float = int(start) if kind == "concurrency" else float(start)
        self.limit: float = int(limit) if kind == "concurrency" else float(limit)
        self.min_share = float(min_share)
        self.min_rate_ratio = float(min_rate_ratio) if kind == "rate" else None
        self.probe_runs = probe_runs
        self.confirm_runs = confirm_runs
        # None: 0.25 for a rate search, adjacent integers alone for a concurrency search.
        self.resolution = float(resolution) if resolution is not None else (0.25 if kind == "rate" else None)
        self.max_runs = max_runs
        self.max_invalid = max_invalid

        # Every run in the order measured, and each load's runs (the same dicts).
        self._measurements: list[dict[str, Any]] = []
        self._by_load: dict[float, list[dict[str, Any]]] = {}
        # The bracket: the highest load that holds, the lowest that fails; None where none is known yet.
        self._lo: float | None = None
        self._hi: float | None = None
        self._phase: Phase = "bracket"
        self._probe: float = self.start  # the load the phase is measuring
        self._pending: Step | None = None  # what next_step() last asked for
        self._status: Status = "running"
        self._why: str | None = None
        self._notes: list[str] = []  # the contradictions and how each moved the bracket
        self._confirmed: set[float] = set()  # the loads judged in the confirm phase

    # --- the client's three calls -------------------------------------------------------------------------------

    def next_step(self) -> Step | None:
        """The load to measure next and how many measured runs of it; None when the search is over. Asking again
        before recording anything asks the same."""
        wanted = self._settle()
        if self._status != "running":
            self._pending = None
            return None
        left = self.max_runs - len(self._measurements)
        self._pending = Step(self._probe, min(wanted, left), self._phase)
        return self._pending

    def record(self, load: float, outcome: Outcome) -> None:
        """One measured run at `load`, which must be the load the last next_step() asked for (more runs than it
        asked for are kept too)."""
        if self._pending is None or load != self._pending.load:
            asked = "nothing" if self._pending is None else self._fmt(self._pending.load)
            raise ValueError(f"record() for {load}: next_step() asked for {asked}")
        self._check(outcome)
        load = self._pending.load  # as asked: an int for concurrency
        run = {
            "run": len(self._measurements) + 1,
            "load": load,
            "phase": self._pending.phase,
            "share_met": None if outcome.share_met is None else float(outcome.share_met),
            "achieved_over_requested": (
                None if outcome.achieved_over_requested is None else float(outcome.achieved_over_requested)
            ),
            "goodput_req_s": None if outcome.goodput_req_s is None else float(outcome.goodput_req_s),
            "held_s": None if outcome.held_s is None else float(outcome.held_s),
            "valid": bool(outcome.valid),
            "note": outcome.note,
        }
        self._measurements.append(run)
        self._by_load.setdefault(load, []).append(run)
        self._settle()  # so that result() says what the runs so far say

    def result(self) -> dict[str, Any]:
        """What was found, JSON-serialisable (at any time; status "running" until next_step() returned None):

        kind, unit; status: found | held_to_limit | failed_at_start | inconclusive | running; knee: the highest
        load that holds (found, held_to_limit), else None; bracket: [highest holding, lowest failing], either None
        where there is none ("held up to the limit": [limit, None]; "failed at the start": [None, start]);
        summary: the one line an SRE reads; why: why it could not conclude, else None; runs: how many in all;
        criteria: the search's settings; bracket_loads: per bracketing load its side, verdict (by the median of
        its valid runs), whether it was confirmed, its run counts and the spread (n, median, min, max) of
        share_met, achieved_over_requested (None for concurrency) and goodput_req_s; measurements: every run in
        order (run, load, phase, share_met, achieved_over_requested, goodput_req_s, valid, note); notes: each
        contradiction and how it moved the bracket."""
        found = self._status in ("found", "held_to_limit")
        sides = [("holds", self._lo), ("fails", self._hi)]
        return {
            "kind": self.kind,
            "unit": self._unit(),
            "status": self._status,
            "knee": self._lo if found else None,
            "bracket": [self._lo, self._hi],
            "summary": self._summary(),
            "why": self._why,
            "runs": len(self._measurements),
            "criteria": {
                "min_share": self.min_share,
                "min_rate_ratio": self.min_rate_ratio,
                "start": self.start,
                "limit": self.limit,
                "resolution": self.resolution,
                "probe_runs": self.probe_runs,
                "confirm_runs": self.confirm_runs,
                "max_runs": self.max_runs,
                "max_invalid": self.max_invalid,
            },
            "bracket_loads": [self._load_report(load, side) for side, load in sides if load is not None],
            "measurements": [dict(m) for m in self._measurements],
            "notes": list(self._notes),
        }

    @property
    def status(self) -> Status:
        return self._status

    def verdict(self, load: float, min_valid: int = 1) -> Verdict:
        """`load` judged by the median of its valid runs so far; undecided with fewer than `min_valid` of them."""
        runs = self._by_load.get(load, [])
        valid = [r for r in runs if r["valid"]]
        invalid = len(runs) - len(valid)
        share = spread(r["share_met"] for r in valid)["median"]
        ratio = spread(r["achieved_over_requested"] for r in valid)["median"] if self.kind == "rate" else None
        if len(valid) < max(1, min_valid):
            reason = f"{len(valid)} valid run{'s' if len(valid) != 1 else ''}"
            reason += f" ({invalid} invalid)" if invalid else ""
            reason += f"; judging a load needs at least {max(1, min_valid)}"
            return Verdict(load, "undecided", len(valid), invalid, share, ratio, reason)
        assert share is not None
        state: State = "holds" if holds(share, ratio, self.min_share, self.min_rate_ratio) else "fails"
        reasons = [f"median share met {share:.3f} {'>=' if share >= self.min_share else '<'} {self.min_share:g}"]
        if self.min_rate_ratio is not None and ratio is not None:
            sign = ">=" if ratio >= self.min_rate_ratio else "<"
            reasons.append(f"client sent {ratio:.1%} of the rate {sign} {self.min_rate_ratio:.0%}")
        reasons.append(
            f"{len(valid)} valid run{'s' if len(valid) != 1 else ''}" + (f", {invalid} invalid" if invalid else "")
        )
        return Verdict(load, state, len(valid), invalid, share, ratio, ", ".join(reasons))

    # --- the state machine --------------------------------------------------------------------------------------

    def _settle(self) -> int:
        """Judge every load that has the runs it needs and move on, until one needs more: how many (0 when the
        search is over). Stops the search when that is more than max_runs leaves."""
        for _ in range(_MAX_MOVES):
            if self._status != "running":
                return 0
            wanted = self._runs_wanted()
            if wanted > 0 and len(self._measurements) >= self.max_runs:
                self._stop(
                    f"stopped after max_runs={self.max_runs} runs, {_DOING[self._phase]} at {self._fmt(self._probe)}"
                )
                return 0
            if wanted > 0:
                return wanted
            self._move()  # this load has what it needs: judge it and move on
        raise RuntimeError(
            f"the knee search made {_MAX_MOVES} moves without measuring: a bug in serving/standalone/knee.py"
        )

    def _runs_wanted(self) -> int:
        """More runs the phase's load needs before it can be judged: valid runs up to probe_runs (bracket,
        bisect) or confirm_runs (confirm), until max_invalid of its runs were invalid."""
        runs = self._by_load.get(self._probe, [])
        valid = sum(1 for r in runs if r["valid"])
        if len(runs) - valid >= self.max_invalid:
            return 0
        need = self.confirm_runs if self._phase == "confirm" else self.probe_runs
        return max(0, need - valid)

    def _move(self) -> None:
        """Judge the load the phase measured and move the bracket and the phase on."""
        confirming = self._phase == "confirm"
        v = self.verdict(self._probe, MIN_VALID_TO_CONFIRM if confirming else 1)
        if v.state == "undecided":
            self._stop(f"could not judge {self._fmt(self._probe)}: {v.reason}")
            return
        if confirming:
            self._confirmed.add(self._probe)
        if self._phase == "bracket":
            if v.state == "holds":
                self._lo = self._probe
                if self._probe >= self.limit:
                    self._confirm()
                else:
                    self._probe = self._double(self._probe)
            else:
                self._hi = self._probe
                self._bracket_moved()
        elif self._phase == "bisect":
            if v.state == "holds":
                self._lo = self._probe
            else:
                self._hi = self._probe
            self._bracket_moved()
        elif self._probe == self._lo:  # confirming the lower load: the one the knee would be
            if v.state == "holds" and self._hi is None:
                self._finish("held_to_limit")
            elif v.state == "holds":
                assert self._hi is not None
                self._probe = self._hi
            else:
                self._notes.append(f"{self._fmt(self._probe)} failed on repetition ({v.reason}): bracket moved down")
                # The bracket becomes the measured loads that agree: the highest that holds below this one, and
                # the lowest that fails above that (this one, unless a load between failed its probe).
                self._lo = self._highest(below=self._probe, state="holds")
                lowest = self._lowest(above=-math.inf if self._lo is None else self._lo, state="fails")
                self._hi = self._probe if lowest is None else lowest
                self._bracket_moved()
        else:  # confirming the upper load
            if v.state == "fails":
                self._finish("found" if self._lo is not None else "failed_at_start")
            else:
                self._notes.append(f"{self._fmt(self._probe)} held on repetition ({v.reason}): bracket moved up")
                self._lo = self._probe
                self._hi = self._lowest(above=self._probe, state="fails")
                self._bracket_moved()

    def _bracket_moved(self) -> None:
        """The phase that follows a new bracket: bracket upwards when nothing above fails, bisect while the
        bracket is wider than the resolution, confirm once it is not (or when nothing below holds)."""
        lo, hi = self._lo, self._hi
        if hi is None:
            assert lo is not None
            if lo >= self.limit:
                self._confirm()
            else:
                self._phase, self._probe = "bracket", self._double(lo)
        elif lo is None or self._narrow(lo, hi):
            self._confirm()
        else:
            self._phase, self._probe = "bisect", self._midpoint(lo, hi)

    def _confirm(self) -> None:
        self._phase = "confirm"
        probe = self._lo if self._lo is not None else self._hi
        assert probe is not None
        self._probe = probe

    def _finish(self, status: Status) -> None:
        self._status = status

    def _stop(self, why: str) -> None:
        self._status, self._why = "inconclusive", why

    # --- loads --------------------------------------------------------------------------------------------------

    def _double(self, load: float) -> float:
        return min(load * 2, self.limit)

    def _narrow(self, lo: float, hi: float) -> bool:
        """Whether the bracket is within the resolution: adjacent integers (concurrency), or hi/lo <= 1 +
        resolution (rate; concurrency where one is given)."""
        if self.kind == "concurrency" and hi - lo <= 1:
            return True
        return self.resolution is not None and hi / lo <= 1 + self.resolution + 1e-12

    def _midpoint(self, lo: float, hi: float) -> float:
        """The next load inside (lo, hi): the integer midpoint for concurrency; for rate the geometric one (rate
        scales by factors: halfway from 4 to 16 req/s is 8), to 3 significant digits so it reads as it is sent."""
        if self.kind == "concurrency":
            return (int(lo) + int(hi)) // 2
        mid = math.sqrt(lo * hi)
        short = float(f"{mid:.3g}")
        return short if lo < short < hi else mid

    def _highest(self, below: float, state: State) -> float | None:
        loads = [x for x in self._by_load if x < below and self.verdict(x).state == state]
        return max(loads) if loads else None

    def _lowest(self, above: float, state: State) -> float | None:
        loads = [x for x in self._by_load if x > above and self.verdict(x).state == state]
        return min(loads) if loads else None

    # --- checks and words ---------------------------------------------------------------------------------------

    def _check(self, outcome: Outcome) -> None:
        """A run's figures are finite and in range, and a valid run has the ones its load is judged by."""
        for name in ("share_met", "achieved_over_requested", "goodput_req_s"):
            value = getattr(outcome, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0 or None, not {value}")
        if outcome.share_met is not None and outcome.share_met > 1:
            raise ValueError(f"share_met is a fraction in 0..1, not {outcome.share_met}")
        if self.kind == "concurrency" and outcome.achieved_over_requested is not None:
            raise ValueError("a concurrency search requests no rate: achieved_over_requested must be None")
        if outcome.valid and outcome.share_met is None:
            raise ValueError("a valid run needs share_met")
        if outcome.valid and self.kind == "rate" and outcome.achieved_over_requested is None:
            raise ValueError("a valid run of a rate search needs achieved_over_requested")

    def _unit(self) -> str:
        return "req/s" if self.kind == "rate" else "concurrent requests"

    def _fmt(self, load: float | None) -> str:
        if load is None:
            return "-"
        return f"{load:.3g} req/s" if self.kind == "rate" else f"concurrency {int(load)}"

    def _figure(self, load: float, key: str, counts: bool = True) -> str:
        """One figure of a load's valid runs in words: median (min-max, n runs[, k invalid])."""
        runs = self._by_load.get(load, [])
        s = spread(r[key] for r in runs if r["valid"])
        if not s["n"]:
            return "no valid run"
        pct = key == "achieved_over_requested"
        med, lo, hi = (f"{x:.1%}" if pct else f"{x:.3f}" for x in (s["median"], s["min"], s["max"]))
        invalid = sum(1 for r in runs if not r["valid"])
        n = f"{s['n']} run{'s' if s['n'] != 1 else ''}" + (f", {invalid} invalid" if invalid else "")
        inside = [f"{lo}-{hi}"] if lo != hi else []
        inside += [n] if counts else []
        return f"{med} ({', '.join(inside)})" if inside else med

    def _figures(self, *loads: float) -> str:
        """The figures a load is judged by, for one load or a bracket's two ("x vs y"), with what they need."""
        text = " vs ".join(self._figure(x, "share_met") for x in loads)
        text = f"share met {text}, needs >= {self.min_share:g}"
        if self.min_rate_ratio is not None:
            sent = " vs ".join(self._figure(x, "achieved_over_requested", counts=False) for x in loads)
            text += f"; client sent {sent} of the rate, needs >= {self.min_rate_ratio:.0%}"
        return text

    def _summary(self) -> str:
        """The line an SRE reads: what was found, the bracket it stands on, and the figures behind both sides."""
        n = len(self._measurements)
        tail = f"; {n} run{'s' if n != 1 else ''}"
        lo, hi = self._lo, self._hi
        if self._status == "found":
            assert lo is not None and hi is not None
            return f"knee {self._fmt(lo)}, fails at {self._fmt(hi)}: {self._figures(lo, hi)}{tail}"
        if self._status == "held_to_limit":
            assert lo is not None
            return f"held up to the limit {self._fmt(lo)} (the knee is at or above it): {self._figures(lo)}{tail}"
        if self._status == "failed_at_start":
            assert hi is not None
            return f"failed at the start load {self._fmt(hi)} (the knee is below it): {self._figures(hi)}{tail}"
        held = "nothing held" if lo is None else f"holds at {self._fmt(lo)}"
        failed = "nothing failed" if hi is None else f"fails at {self._fmt(hi)}"
        known = f"last bracket: {held}, {failed}"
        if self._status == "inconclusive":
            return f"no knee: {self._why}; {known}{tail}"
        return f"searching ({_DOING[self._phase]} at {self._fmt(self._probe)}); {known}{tail}"

    def _load_report(self, load: float, side: str) -> dict[str, Any]:
        """One bracketing load: the side it stands for, its verdict, and the spread of its runs' figures."""
        runs = self._by_load.get(load, [])
        valid = [r for r in runs if r["valid"]]
        v = self.verdict(load)
        return {
            "load": load,
            "side": side,
            "verdict": v.state,
            "confirmed": load in self._confirmed,
            "reason": v.reason,
            "runs": len(runs),
            "valid_runs": len(valid),
            "invalid_runs": len(runs) - len(valid),
            "share_met": spread(r["share_met"] for r in valid),
            "achieved_over_requested": (
                spread(r["achieved_over_requested"] for r in valid) if self.kind == "rate" else None
            ),
            "goodput_req_s": spread(r["goodput_req_s"] for r in valid),
        }
