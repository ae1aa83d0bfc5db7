"""refdeploy's benchmark commands (registered by serving/cli.py):

  refdeploy bench-plan --workload NAME|PATH --plan-json J --host H --host-out DIR --host-cpus L --server-cpuset L
  refdeploy bench-report BENCH_DIR
  refdeploy compare --a RUN[,RUN...] --b RUN[,RUN...] [--variable FIELD ...] [--out DIR]

bench-plan prints the client's plan, its docker argv, the bench manifest and a timeout (JSON); bench-report
writes summary.json, report.txt and report.html into a fetched bench directory and prints report.txt (exit 1
when the bench failed: the report of what was kept is still written); compare prints the effects, or refuses
(exit 2, the differing fields on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def cmd_bench_plan(a: argparse.Namespace) -> int:
    import time

    from serving.bench import cache_salt_for, load_workload, plan_bench

    workload = load_workload(a.workload)
    if a.runs:
        workload = workload.model_copy(update={"runs": a.runs})
    plan = plan_bench(
        workload,
        json.loads(a.plan_json),
        a.host,
        a.host_out,
        a.host_cpus,
        a.server_cpuset,
        a.client_cpus,
        json.loads(a.gpu_class_json) if a.gpu_class_json else None,
        a.seed_offset,
        a.cache_salt or cache_salt_for(workload, time.time()),
    )
    json.dump(plan, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def cmd_bench_report(a: argparse.Namespace) -> int:
    from serving.bench_report import REPORT_HTML, REPORT_TXT, write_report

    d = Path(a.bench_dir)
    summary = write_report(d)
    sys.stdout.write((d / REPORT_TXT).read_text())
    print(f"report: {d / REPORT_TXT}\npage:   {d / REPORT_HTML}")
    if summary["status"] != "ok":
        print(f"bench FAILED: {summary['reason']} (partial data kept in {d})", file=sys.stderr)
        return 1
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from serving.compare import compare, load_side, render_text

    runs_dir = Path(a.runs_dir)
    side_a = load_side("A", [x for x in a.a.split(",") if x], runs_dir)
    side_b = load_side("B", [x for x in a.b.split(",") if x], runs_dir)
    variables = [v for arg in a.variable or [] for v in arg.split(",") if v]
    result: dict[str, Any] = compare(side_a, side_b, variables, iterations=a.iterations)
    text = render_text(result)
    out = Path(a.out) if a.out else runs_dir / "compare" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out / "compare.txt").write_text(text)
    sys.stdout.write(text)
    print(f"written: {out / 'compare.txt'}")
    return 0


def register(sub: Any) -> None:
    """Add the benchmark commands to refdeploy's subparsers."""
    p = sub.add_parser("bench-plan", help="the bench client's plan, docker argv and bench manifest (JSON)")
    p.add_argument("--workload", required=True, help="a name in serving/workloads/ or a path")
    p.add_argument("--plan-json", required=True, help="the serving plan (refdeploy plan), as JSON")
    p.add_argument("--host", required=True)
    p.add_argument("--host-out", required=True, help="host directory the client container writes into")
    p.add_argument("--host-cpus", required=True, help="the host's online CPUs (/sys/devices/system/cpu/online)")
    p.add_argument("--server-cpuset", default="", help="the serving container's cpuset ('' for unpinned)")
    p.add_argument("--client-cpus", default="", help="pin the client here instead of outside the server's set")
    p.add_argument("--runs", type=int, default=0, help="measured runs per point (default: the workload's)")
    p.add_argument("--seed-offset", type=int, default=0, help="added to every run's seed (other prompts)")
    p.add_argument("--cache-salt", default="", help="the bench's prefix-cache salt (default: new per bench)")
    p.add_argument("--gpu-class-json", default="", help="the inventory's gpu_class, for reference figures")
    p.set_defaults(func=cmd_bench_plan)

    p = sub.add_parser("bench-report", help="summary.json, report.txt and report.html of a fetched bench")
    p.add_argument("bench_dir")
    p.set_defaults(func=cmd_bench_report)

    p = sub.add_parser("compare", help="compare two sets of bench runs that differ in one declared variable")
    p.add_argument("--a", required=True, help="bench runs of side A: run dirs or ids, comma-separated")
    p.add_argument("--b", required=True, help="bench runs of side B")
    p.add_argument("--variable", action="append", help="a condition allowed to differ, e.g. max_num_seqs")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--iterations", type=int, default=4000, help="bootstrap resamples")
    p.add_argument("--out", help="where compare.json/.txt go (default runs/compare/<ts>/)")
    p.set_defaults(func=cmd_compare)
