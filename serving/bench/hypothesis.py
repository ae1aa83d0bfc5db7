"""A hypothesis and its prediction, written down before the runs, and the verdict a compare gives it (seed 000 §13:
"write the hypothesis and the expected result before running the experiment").

    make hypothesis HYPOTHESIS='max_num_seqs=1 queues requests' PREDICT='ttft_ms up >= 50% at c4'
        -> runs/hypotheses/<UTC>.json, stamped with when it was written
    make compare A=... B=... VARIABLE=max_num_seqs HYPOTHESIS=<that file, or its timestamp>
        -> "hypothesis: confirmed / refuted / inconclusive", per point, with the interval

A prediction: `<figure> up|down [>= <amount>[%]] [at <point>]`. The figure is one of compare's (ttft_ms,
tpot_ms, decode_tok_s, e2el_ms, output_tok_s); up means B - A > 0; the amount is in the figure's unit, or with %
relative to median(A); without `at`, every point both sides measured. The verdict reads the effect's whole
interval (the bootstrap interval, widened to the Welch interval over benches where there is one):

  confirmed     all of it lies where the prediction said (the effect is there, at least as large)
  refuted       none of it does (no effect that large in that direction, or one the other way)
  inconclusive  it straddles the predicted bound: more runs, or a larger change

The verdict of several points: confirmed when every point is, refuted when any is, else inconclusive. A
hypothesis written after the first run of the compared benches still gets its verdict, and the report says it
was not written before the runs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serving.errors import InputError

CONFIRMED, REFUTED, INCONCLUSIVE = "confirmed", "refuted", "inconclusive"
_PREDICTION = re.compile(
    r"^\s*(?P<figure>[a-z_]+)\s+(?P<direction>up|down)"
    r"(?:\s*(?:>=|≥)\s*(?P<amount>\d+(?:\.\d+)?)\s*(?P<percent>%)?)?"
    r"(?:\s+at\s+(?P<point>\S+))?\s*$"
)


class HypothesisError(InputError):
    pass


@dataclass(frozen=True)
class Prediction:
    figure: str
    direction: str  # up | down
    amount: float  # >= 0, in the figure's unit or a fraction of median(A)
    relative: bool
    point: str | None

    def describe(self) -> str:
        size = f" by at least {self.amount:.0%}" if self.relative else f" by at least {self.amount:g}"
        where = f" at {self.point}" if self.point else ""
        return f"{self.figure} {self.direction}{size if self.amount else ''}{where} (B against A)"


def parse(text: str, figures: Sequence[str]) -> Prediction:
    m = _PREDICTION.match(text or "")
    if not m:
        raise HypothesisError(
            f"PREDICT={text!r}: write it as '<figure> up|down [>= <amount>[%]] [at <point>]', "
            "e.g. 'tpot_ms down >= 5%' or 'output_tok_s up at c4'"
        )
    if m["figure"] not in figures:
        raise HypothesisError(f"PREDICT={text!r}: {m['figure']!r} is not a compared figure ({', '.join(figures)})")
    amount = float(m["amount"] or 0)
    return Prediction(
        m["figure"], m["direction"], amount / 100 if m["percent"] else amount, bool(m["percent"]), m["point"]
    )


def record(statement: str, predict: str, figures: Sequence[str], runs_dir: Path, now: float | None = None) -> Path:
    """Write the hypothesis down, stamped; refuses a prediction that does not parse, before writing anything."""
    if not statement.strip():
        raise HypothesisError(
            "HYPOTHESIS: say what you expect and why, e.g. HYPOTHESIS='max_num_seqs=1 queues requests'"
        )
    prediction = parse(predict, figures)
    written = time.time() if now is None else now
    d = runs_dir / "hypotheses"
    d.mkdir(parents=True, exist_ok=True)
    stamp = datetime.fromtimestamp(written, UTC).strftime("%Y%m%dT%H%M%SZ")
    path, n = d / f"{stamp}.json", 1
    while path.exists():
        n += 1
        path = d / f"{stamp}-{n}.json"
    doc = {"statement": statement.strip(), "predict": predict.strip(), "prediction": asdict(prediction)}
    path.write_text(json.dumps({**doc, "written_unix_s": written}, indent=2, sort_keys=True) + "\n")
    return path


def load(ref: str, runs_dir: Path) -> dict[str, Any]:
    """A recorded hypothesis: its file, or its timestamp under runs/hypotheses/."""
    for path in (Path(ref), runs_dir / "hypotheses" / f"{ref}.json"):
        if path.is_file():
            try:
                doc = json.loads(path.read_text())
            except ValueError as e:
                doc = f"not valid JSON ({e})"
            if not isinstance(doc, dict) or not {"statement", "predict", "prediction"} <= doc.keys():
                said = doc if isinstance(doc, str) else "not a hypothesis (statement, predict, prediction)"
                raise HypothesisError(
                    f"HYPOTHESIS={ref}: {path} is {said}: restore it, or write the hypothesis again (make hypothesis)"
                )
            return {**doc, "path": str(path)}
    raise HypothesisError(f"HYPOTHESIS={ref}: no such hypothesis (make hypothesis writes runs/hypotheses/<ts>.json)")


def _interval(effect: Mapping[str, Any]) -> tuple[float, float]:
    """The widest of the effect's intervals: the bootstrap's, and Welch's over benches and over runs."""
    lo, hi = effect["ci"]
    for welch in (effect.get("welch_ci_over_benches"), effect.get("welch_ci_over_runs")):
        if welch:
            lo, hi = min(lo, welch[0]), max(hi, welch[1])
    return lo, hi


def verdict_at(p: Prediction, effect: Mapping[str, Any] | None) -> dict[str, Any]:
    """One point's verdict: the effect's interval against the predicted bound."""
    if effect is None:
        return {"verdict": INCONCLUSIVE, "why": "no observations on one side"}
    lo, hi = _interval(effect)
    base = effect["median_a"]
    bound = p.amount * base if p.relative else p.amount
    # Any change at all is predicted where the bound is 0: an interval that touches 0 does not confirm it.
    if p.direction == "up":
        confirmed, refuted = lo >= bound and lo > 0, hi < bound or (bound == 0 and hi <= 0)
        region = f"B - A >= {bound:+.4g}" if bound else "B - A > 0"
    else:
        confirmed, refuted = hi <= -bound and hi < 0, lo > -bound or (bound == 0 and lo >= 0)
        region = f"B - A <= {-bound:+.4g}" if bound else "B - A < 0"
    verdict = CONFIRMED if confirmed else REFUTED if refuted else INCONCLUSIVE
    return {"verdict": verdict, "interval": [lo, hi], "predicted": region, "diff": effect["diff"]}


def judge(hypothesis: Mapping[str, Any], points: Mapping[str, Mapping[str, Any]], first_run_unix_s: float,
          figures: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """The verdict of a recorded hypothesis over a compare's points (compare's result["points"])."""
    p = parse(str(hypothesis["predict"]), figures)
    if p.point is not None and p.point not in points:
        raise HypothesisError(f"PREDICT: point {p.point} was not compared (compared: {', '.join(points) or 'none'})")
    at = {pt: verdict_at(p, figs.get(p.figure)) for pt, figs in points.items() if p.point in (None, pt)}
    verdicts = {v["verdict"] for v in at.values()}
    overall = REFUTED if REFUTED in verdicts else CONFIRMED if verdicts == {CONFIRMED} else INCONCLUSIVE
    written = float(hypothesis["written_unix_s"])
    return {
        "statement": hypothesis["statement"],
        "predict": hypothesis["predict"],
        "prediction": p.describe(),
        "path": hypothesis.get("path"),
        "written_unix_s": written,
        "written_before_runs": written < first_run_unix_s,
        "points": at,
        "verdict": overall,
    }


def render(h: Mapping[str, Any]) -> list[str]:
    lines = [f"hypothesis: {h['statement']}", f"  predicted: {h['prediction']}"]
    if not h["written_before_runs"]:
        lines.append("  note: written after the compared runs began, so it was not a prediction")
    for point, v in h["points"].items():
        if "interval" in v:
            lo, hi = v["interval"]
            lines.append(f"  {point}: B-A [{lo:+.4g}, {hi:+.4g}] against {v['predicted']}: {v['verdict']}")
        else:
            lines.append(f"  {point}: {v['why']}: {v['verdict']}")
    lines.append(f"  verdict: {h['verdict'].upper()}")
    return lines
