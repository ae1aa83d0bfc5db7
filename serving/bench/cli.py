"""refdeploy's benchmark commands (registered by serving/cli.py):

  refdeploy bench-report BENCH_DIR
  refdeploy compare --a RUN[,RUN...] --b RUN[,RUN...] [--variable FIELD ...] [--out DIR]
                    [--hypothesis FILE|TS | --hypothesis TEXT --predict PREDICTION]
                    [--c RUN[,RUN...] --d RUN[,RUN...]]   a 2x2 design: --variable change1,change2
  refdeploy hypothesis --statement TEXT --predict PREDICTION

bench-report writes summary.json, report.txt and report.html into a fetched bench directory and prints report.txt
(exit 1 when the bench failed, or measured nothing valid: the report of what was kept is still written);
compare prints the effects, or refuses (exit 2, the differing fields on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from serving.errors import InputError


def cmd_bench_report(a: argparse.Namespace) -> int:
    from serving.bench.report import REPORT_HTML, REPORT_TXT, write_report
    from serving.bench.summary import INVALID

    d = Path(a.bench_dir)
    summary = write_report(d)
    sys.stdout.write((d / REPORT_TXT).read_text())
    print(f"report: {d / REPORT_TXT}\npage:   {d / REPORT_HTML}")
    if summary["status"] != "ok":
        said = "measured NOTHING VALID" if summary["status"] == INVALID else "FAILED"
        print(f"bench {said}: {summary['reason']} (partial data kept in {d})", file=sys.stderr)
        return 1
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from serving.bench.compare import FAMILY_LEVEL, compare, load_side, render_text
    from serving.record.manifest import new_run_dir

    runs_dir = Path(a.runs_dir)
    side_a = load_side("A", [x for x in a.a.split(",") if x], runs_dir)
    side_b = load_side("B", [x for x in a.b.split(",") if x], runs_dir)
    variables = [v for arg in a.variable or [] for v in arg.split(",") if v]
    level = FAMILY_LEVEL if a.level is None else a.level
    result: dict[str, Any]
    if a.c or a.d:
        from serving.bench.compare import design_2x2, render_2x2

        if not (a.c and a.d) or a.hypothesis or a.predict:
            raise InputError("a 2x2 design takes C and D both (C: A with change 2, D: A with both), no hypothesis")
        sides = [
            side_a,
            side_b,
            *(load_side(n, [x for x in r.split(",") if x], runs_dir) for n, r in (("C", a.c), ("D", a.d))),
        ]
        result = design_2x2(sides, variables, iterations=a.iterations, family_level=level)
        text = render_2x2(result)
    else:
        claim = _hypothesis(a, runs_dir)
        try:
            result = compare(
                side_a,
                side_b,
                variables,
                iterations=a.iterations,
                hypothesis=claim,
                restarts=a.design == "restarts",
                family_level=level,
            )
        except InputError:
            # A refused compare leaves nothing behind: the hypothesis it recorded itself (--predict) goes again.
            if claim is not None and a.predict:
                Path(claim["path"]).unlink(missing_ok=True)
            raise
        text = render_text(result)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
    else:  # two compares in one second get two directories
        out = new_run_dir(runs_dir, "compare")
    (out / "compare.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out / "compare.txt").write_text(text)
    sys.stdout.write(text)
    print(f"written: {out / 'compare.txt'}")
    return 0


def _hypothesis(a: argparse.Namespace, runs_dir: Path) -> dict[str, Any] | None:
    """A recorded hypothesis (--hypothesis <file or ts>), or one stated with the compare (--hypothesis TEXT
    --predict P): recorded now, so the report says it was not written before the runs."""
    from serving.bench import hypothesis
    from serving.bench.compare import FIGURES

    if not a.hypothesis:
        if a.predict:
            raise hypothesis.HypothesisError("PREDICT needs HYPOTHESIS: what you expect, and why")
        return None
    if a.predict:
        return hypothesis.load(str(hypothesis.record(a.hypothesis, a.predict, list(FIGURES), runs_dir)), runs_dir)
    return hypothesis.load(a.hypothesis, runs_dir)


def cmd_hypothesis(a: argparse.Namespace) -> int:
    from serving.bench import hypothesis
    from serving.bench.compare import FIGURES

    path = hypothesis.record(a.statement, a.predict, list(FIGURES), Path(a.runs_dir))
    print(f"hypothesis written: {path} (give it to make compare as HYPOTHESIS={path.stem})")
    return 0


def register(sub: Any) -> None:
    """Add the benchmark commands to refdeploy's subparsers."""
    p = sub.add_parser("bench-report", help="summary.json, report.txt and report.html of a fetched bench")
    p.add_argument("bench_dir")
    p.set_defaults(func=cmd_bench_report)

    p = sub.add_parser("compare", help="compare two sets of bench runs that differ in one declared variable")
    p.add_argument("--a", required=True, help="bench runs of side A: run dirs or ids, comma-separated")
    p.add_argument("--b", required=True, help="bench runs of side B")
    p.add_argument("--c", help="a 2x2 design: side C, A with change 2 (--variable change1,change2)")
    p.add_argument("--d", help="a 2x2 design: side D, A with both changes")
    p.add_argument("--variable", action="append", help="a condition allowed to differ, e.g. max_num_seqs")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--iterations", type=int, default=4000, help="bootstrap resamples")
    p.add_argument("--level", type=float, help="the confidence of all intervals together (default 0.95)")
    p.add_argument("--out", help="where compare.json/.txt go (default runs/compare/<ts>/)")
    p.add_argument("--hypothesis", help="a recorded hypothesis (its file or timestamp), or its text with --predict")
    p.add_argument("--predict", help="the prediction, e.g. 'tpot_ms down >= 5%%' (serving/bench/hypothesis.py)")
    p.add_argument(
        "--design", choices=["restarts"], help="restarts: each side's benches from separate deploys (compare.py)"
    )
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("hypothesis", help="write down a hypothesis and its prediction before the runs")
    p.add_argument("--statement", required=True, help="what you expect, and why")
    p.add_argument("--predict", required=True, help="'<figure> up|down [>= <amount>[%%]] [at <point>]'")
    p.add_argument("--runs-dir", default="runs")
    p.set_defaults(func=cmd_hypothesis)
