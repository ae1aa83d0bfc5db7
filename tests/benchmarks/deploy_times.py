"""Benchmark: how long deploys take, set against vLLM's own start-up measured in the same runs.

Not a test: it prints figures and writes them to runs/bench/deploy-times-<UTC>.json.

    .venv/bin/python -m tests.benchmarks.deploy_times [--cold] [--noop-runs 5] [--warm-runs 2]

  cold  (--cold only) remove the project's containers, images and model, then `make deploy`:
        base image + runtime image + model + start.
  warm  image cached, one profile field changed (max_num_seqs), so exactly the container is replaced.
  noop  `make deploy` again with nothing changed.

vLLM's start-up is read from each run's manifest: container start (Docker's StartedAt) to the
engine's "Starting vLLM server" line. Two overheads are reported: the deploy's whole wall time minus
that, and the time from the deploy's start to the moment it saw the new container healthy, minus that
(the manifest's deploy_timing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def _make(*args: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env["ANSIBLE_NOCOLOR"] = "1"
    start = time.monotonic()
    proc = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"make {' '.join(args)} failed:\n{proc.stdout[-3000:]}")
    return seconds, proc.stdout


def _manifest_of(output: str) -> dict[str, Any]:
    """The manifest this deploy printed ("manifest: <path>"), not the newest on disk."""
    m = re.search(r"manifest: (\S+/manifest\.json)", output)
    if not m:
        raise SystemExit(f"the deploy printed no manifest path:\n{output[-3000:]}")
    return json.loads(Path(m.group(1)).read_text())


def _profile(tmp: Path, max_num_seqs: int) -> Path:
    data = yaml.safe_load((REPO / "serving/profiles/cpu-tiny.yaml").read_text())
    data["vllm"]["max_num_seqs"] = max_num_seqs
    path = tmp / f"cpu-tiny-seqs{max_num_seqs}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _record(kind: str, seconds: float, output: str) -> dict[str, Any]:
    m = _manifest_of(output)
    engine = m["container"]["engine_startup_s"] if m["container"]["replaced_by_this_deploy"] else None
    row = {
        "kind": kind,
        "deploy_wall_s": round(seconds, 2),
        "engine_startup_s": engine,
        "overhead_s": round(seconds - engine, 2) if engine is not None else None,
        "ratio_deploy_to_engine": round(seconds / engine, 2) if engine else None,
        "time_to_healthy_s": m["deploy_timing"]["time_to_healthy_s"],
        "overhead_to_healthy_s": m["deploy_timing"]["overhead_to_healthy_s"],
        "manifest_run_id": m["run_id"],
        "recap": [line for line in output.splitlines() if line.startswith("localhost ")][-1].split(":", 1)[1].strip(),
    }
    print(json.dumps(row))
    return row


def _clean_slate() -> None:
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", "name=^refdeploy-vllm"], capture_output=True, text=True)
    for cid in ids.stdout.split():
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)
    tags = subprocess.run(
        ["docker", "images", "--filter", "reference=refdeploy/*", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    for tag in tags.stdout.split():
        subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
    shutil.rmtree("/var/lib/refdeploy", ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="start by removing the project's images and model")
    ap.add_argument("--warm-runs", type=int, default=2)
    ap.add_argument("--noop-runs", type=int, default=5)
    a = ap.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if a.cold:
            _clean_slate()
            rows.append(_record("cold", *_make("deploy")))
        else:
            _make("deploy")  # converge first, untimed
        seqs = [4, 8]
        for i in range(a.warm_runs):
            rows.append(_record("warm", *_make("deploy", f"PROFILE={_profile(tmp, seqs[i % 2])}")))
        last = _profile(tmp, seqs[(a.warm_runs - 1) % 2]) if a.warm_runs else None
        for _ in range(a.noop_runs):
            args = ["deploy", f"PROFILE={last}"] if last else ["deploy"]
            rows.append(_record("noop", *_make(*args)))
        _make("deploy")  # back to the shipped profile

    summary = {}
    for kind in ("cold", "warm", "noop"):
        walls = [r["deploy_wall_s"] for r in rows if r["kind"] == kind]
        if not walls:
            continue
        overheads = [r["overhead_s"] for r in rows if r["kind"] == kind and r["overhead_s"] is not None]
        to_healthy = [r["overhead_to_healthy_s"] for r in rows if r["kind"] == kind and r["overhead_to_healthy_s"]]
        summary[kind] = {
            "n": len(walls),
            "deploy_wall_s_median": statistics.median(walls),
            "deploy_wall_s_min": min(walls),
            "deploy_wall_s_max": max(walls),
            "overhead_s_median": statistics.median(overheads) if overheads else None,
            "overhead_to_healthy_s_median": statistics.median(to_healthy) if to_healthy else None,
        }
    out_dir = REPO / "runs" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"deploy-times-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n")
    print()
    heads = f"{'kind':<6} {'n':>2} {'wall median s':>14} {'min':>7} {'max':>7}"
    print(f"{heads} {'wall - engine':>14} {'to healthy - engine':>20}")
    for kind, s in summary.items():
        ov = "-" if s["overhead_s_median"] is None else f"{s['overhead_s_median']:.1f}"
        oh = "-" if s["overhead_to_healthy_s_median"] is None else f"{s['overhead_to_healthy_s_median']:.1f}"
        print(
            f"{kind:<6} {s['n']:>2} {s['deploy_wall_s_median']:>14.1f} {s['deploy_wall_s_min']:>7.1f} "
            f"{s['deploy_wall_s_max']:>7.1f} {ov:>14} {oh:>20}"
        )
    print(f"\nraw rows: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
