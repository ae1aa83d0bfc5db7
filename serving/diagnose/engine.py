"""`make diagnose`: the seed's method applied to one capture or bench (serving/diagnose/rules/, in seed 000 §14's
order), written beside the evidence as diagnosis.json (serving/diagnose/model.py) and diagnosis.txt.

Findings are ranked: "consistent with" first (the slow interval's own finding leading, then the causes by how
much of a request's time each can account for); then "cannot tell"; then what the evidence rules out. Rules that
could not run are listed with what they lacked.

  refdeploy diagnose [--run RUN] [--host HOST]    RUN: runs/<host>/<ts>[/capture|/bench], or the <ts>;
                                                   default: HOST's newest capture or bench (serving/diagnose/cli.py)
"""

from __future__ import annotations

import argparse
import json
import sys
from html import escape
from pathlib import Path

from serving.diagnose.evidence import Evidence, is_bench, is_capture, load_evidence
from serving.diagnose.model import Diagnosis, Finding, RuleRun
from serving.diagnose.rules import CannotRun, ordered
from serving.diagnose.rules.interval import slow_interval
from serving.errors import InputError
from serving.record.run_dirs import resolve_run_dir

ORDER = {"consistent with": 0, "cannot tell": 1, "rules out": 2}


def diagnose(ev: Evidence) -> Diagnosis:
    findings: list[Finding] = []
    runs: list[RuleRun] = []
    for rule in ordered():
        try:
            found = rule.run(ev)
        except CannotRun as e:
            runs.append(RuleRun(rule=rule.name, seed=rule.seed, status="could not run", why=str(e)))
            continue
        runs.append(RuleRun(rule=rule.name, seed=rule.seed, status="ran"))
        # A figure with no value says nothing, and cites nothing.
        findings += [f.model_copy(update={"figures": [g for g in f.figures if g.value is not None]}) for f in found]
    # The slow interval's finding first (where the time goes), then the causes by how much they account for.
    findings.sort(key=lambda f: (ORDER[f.verdict], f.rule != "interval", -f.explains))
    try:
        name, share = slow_interval(ev)
        slow = f"{name} ({share:.0%} of each request)"
    except CannotRun as e:
        slow = f"cannot tell: {e}"
    return Diagnosis(run_dir=str(ev.run_dir), kind=ev.kind, window_s=ev.window_s, slow_interval=slow,  # type: ignore[arg-type]
                     findings=findings, rules=runs, notes=list(ev.notes))  # fmt: skip


def render_text(d: Diagnosis) -> str:
    window = f"{d.window_s:.1f} s window" if d.window_s else "no window recorded"
    lines = [f"diagnosis of {d.run_dir} ({d.kind}, {window})", f"slow interval: {d.slow_interval}", ""]
    shown = [f for f in d.findings if f.verdict != "rules out"]
    lines.append("findings, where the time goes, then the causes by how much of it each accounts for:"
                 if shown else "findings: none")  # fmt: skip
    for i, f in enumerate(shown, 1):
        lines += [f"{i}. {f.verdict}: {f.title}",
                  f"   accounts for up to {f.explains:.0%} of a request's time; rule {f.rule} (seed {f.seed})",
                  f"   seen: {f.symptom}"]  # fmt: skip
        for g in f.figures:
            if g.value is not None:
                lines.append(f"     {g.name}: {g.value}{' ' + g.unit if g.unit else ''}  [{g.artifact}]")
        lines.append(f"   not yet established: {f.not_established}")
        lines += [f"   next: {s}" for s in f.next_steps]
    ruled = [f for f in d.findings if f.verdict == "rules out"]
    if ruled:
        lines += ["", "ruled out:"] + [f"  {f.rule}: {f.title} ({f.symptom})" for f in ruled]
    missing = [r for r in d.rules if r.status == "could not run"]
    if missing:
        lines += ["", "rules that could not run:"] + [f"  {r.rule}: {r.why}" for r in missing]
    if d.notes:
        lines += ["", "notes:"] + [f"  {n}" for n in d.notes]
    return "\n".join(lines) + "\n"


def write(d: Diagnosis, out_dir: Path) -> tuple[Path, Path]:
    js, txt = out_dir / "diagnosis.json", out_dir / "diagnosis.txt"
    js.write_text(json.dumps(d.model_dump(mode="json"), indent=2) + "\n")
    txt.write_text(render_text(d))
    return js, txt


def resolve_run(run: str, host: str, runs_dir: Path) -> Path:
    """RUN as the operator gives it (serving/record/run_dirs.py: a directory, or a <ts> under runs/<host>/); ""
    the newest capture or bench of the host (by its timestamp, the directory's name)."""
    if run:
        return resolve_run_dir(run, runs_dir, ("capture", "bench"), lambda d: is_capture(d) or is_bench(d),
                               "capture or bench", "runs/<host>/<timestamp>/capture/ or bench/")  # fmt: skip
    base = runs_dir / host
    candidates = sorted(p for p in [*base.glob("*/capture"), *base.glob("*/bench")] if is_capture(p) or is_bench(p))
    if not candidates:
        raise InputError(f"no capture or bench of {host} under {base}: run make capture or make bench first, "
                         "or give RUN=")  # fmt: skip
    return candidates[-1]


def run_diagnosis(run_dir: Path) -> tuple[Diagnosis, Path, Path]:
    ev = load_evidence(run_dir)
    d = diagnose(ev)
    js, txt = write(d, ev.run_dir)
    return d, js, txt


def findings_html(d: Diagnosis) -> str:
    """The findings as the first section of the capture's or bench's page: what the evidence is consistent with,
    each with how much it accounts for; the figures and next steps are diagnosis.txt's."""
    shown = [f for f in d.findings if f.verdict != "rules out"]
    items = "".join(
        f"<li><b>{escape(f.verdict)}</b>: {escape(f.title)} <small>(up to {f.explains:.0%} of a request's time; "
        f"rule {escape(f.rule)}, seed {escape(f.seed)})</small><br><small>{escape(f.symptom)}</small></li>"
        for f in shown
    )
    ruled = ", ".join(f.rule for f in d.findings if f.verdict == "rules out") or "nothing"
    missing = ", ".join(r.rule for r in d.rules if r.status == "could not run") or "none"
    return (
        f'<section id="diagnosis"><h2>Diagnosis</h2><p>slow interval: {escape(d.slow_interval)}</p>'
        f"<ol>{items}</ol><p><small>ruled out: {escape(ruled)}; could not run: {escape(missing)}. "
        "diagnosis.txt has every figure, the artifact it came from, and the next step.</small></p></section>"
    )


def after_run(run_dir: Path) -> tuple[list[str], str]:
    """The diagnosis a capture or bench writes at its end: a few lines to print, and the section its page leads
    with. One that cannot be made says why in one line, and never fails the run whose evidence it reads."""
    try:
        d, _js, txt = run_diagnosis(run_dir)
    except (InputError, OSError, ValueError, KeyError, TypeError) as e:
        return [f"diagnosis: not made ({type(e).__name__}: {e}); make diagnose RUN={run_dir} says more"], ""
    shown = [f for f in d.findings if f.verdict != "rules out"][:3]
    lines = [f"diagnosis ({txt}): slow interval {d.slow_interval}"] + [
        f"  {i}. {f.verdict}: {f.title} (up to {f.explains:.0%} of a request's time)" for i, f in enumerate(shown, 1)
    ]
    return lines, findings_html(d)


def cmd_diagnose(a: argparse.Namespace) -> int:
    run_dir = resolve_run(a.run, a.host, Path(a.runs_dir))
    d, js, txt = run_diagnosis(run_dir)
    sys.stdout.write(render_text(d))
    print(f"written: {txt} and {js}")
    return 0
