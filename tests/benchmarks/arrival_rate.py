"""Benchmark: does the bench client sustain the arrival rate it is asked for, up to what the server serves?

Not a test: it prints figures and writes them to runs/bench/arrival-rate-<UTC>.json.

    .venv/bin/python -m tests.benchmarks.arrival_rate [--rates 2,4,6,8,12,16] [--prompts 48] [--runs 3]

Needs the embedded default deployed (`make deploy`); run it with the machine as quiet as you can.

One `make bench` with a workload of fixed arrival rates (evenly spaced arrivals, burstiness .inf, no
concurrency cap; 32 prompt tokens, 16 output tokens): for each rate, a warm-up and `runs` measured runs.
Per run, achieved rate = (n - 1) / (last send - first send) from the client's own send times, and the
requests in flight as the client saw them. The highest rate the server serves is the highest one at which
requests did not pile up: the most requests ever in flight stayed within the server's --max-num-seqs
(nothing waited in its queue) and no request failed. The figure for the issue is achieved/requested there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="2,4,6,8,12,16", help="requests/s, comma-separated")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    rates = [float(r) for r in a.rates.split(",") if r]
    workload = {
        "schema_version": 1,
        "name": "arrival-sweep",
        "description": "tests/benchmarks/arrival_rate.py",
        "dataset": "random",
        "input_len": 32,
        "output_len": 16,
        "num_prompts": a.prompts,
        "concurrency": [],
        "arrival_rates": rates,
        "burstiness": float("inf"),
        "seed": 7,
        "warmups": 1,
        "runs": a.runs,
        "prefix_cache": "fresh",
        "run_timeout_s": 300,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "arrival-sweep.yaml"
        path.write_text(yaml.safe_dump(workload))
        cmd = ["make", "--no-print-directory", "-C", str(REPO), "bench", f"WORKLOAD={path}"]
        print("$", " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    m = re.search(r"report: (\S+)/report\.txt", proc.stdout)
    if not m:
        print(proc.stdout[-4000:], proc.stderr[-2000:], file=sys.stderr)
        return 1
    bench_dir = Path(m.group(1))
    summary = json.loads((bench_dir / "summary.json").read_text())
    max_seqs = summary["manifest"]["profile"]["vllm"].get("max_num_seqs") or 0
    rows: list[dict[str, Any]] = []
    for p in summary["points"]:
        runs = [r for r in summary["runs"] if r["point"] == p["point"] and r["phase"] == "measured"]
        rows.append(
            {
                "requested_req_s": p["request_rate"],
                "achieved_over_requested": [r["achieved_over_requested"] for r in runs],
                "achieved_req_s": [r["achieved_rate_req_s"] for r in runs],
                "max_outstanding": [r["outstanding"]["max"] for r in runs],
                "failed_requests": sum(r["requests_failed"] for r in runs),
                "server_queue_mean_ms": [((r["server"] or {}).get("queue") or {}).get("mean_ms") for r in runs],
                "served": all(
                    r["status"] == "ok" and not r["requests_failed"] and (r["outstanding"]["max"] or 0) <= max_seqs
                    for r in runs
                ),
            }
        )
    served = [r for r in rows if r["served"]]
    best = max(served, key=lambda r: r["requested_req_s"]) if served else None
    print(f"bench: {bench_dir}\nmax_num_seqs {max_seqs}; achieved = (n - 1) / (last send - first send) per run")
    print(f"{'req/s':>6}  {'achieved/requested per run':34}  {'max in flight':14}  {'srv queue ms':18}  served")
    for r in rows:
        ratios = " ".join(f"{x:.4f}" if x is not None else "-" for x in r["achieved_over_requested"])
        q = " ".join(f"{x:.2f}" if x is not None else "-" for x in r["server_queue_mean_ms"])
        outs = " ".join(f"{x:g}" for x in r["max_outstanding"] if x is not None)
        print(f"{r['requested_req_s']:>6g}  {ratios:34}  {outs:14}  {q:18}  {r['served']}")
    if best:
        worst = min(x for x in best["achieved_over_requested"] if x is not None)
        print(f"highest rate served: {best['requested_req_s']:g} req/s; achieved/requested, worst run: {worst:.4f}")
    out = REPO / "runs" / "bench" / f"arrival-rate-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": cmd, "bench_dir": str(bench_dir), "rows": rows}, indent=2) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
