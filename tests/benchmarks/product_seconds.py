"""The product's own seconds (issue 47): what an operator waits for that is neither the engine nor the load.

    .venv/bin/python -m tests.benchmarks.product_seconds [--runs N] [--only deploy,status,...] [--out FILE]

Its last output is kept beside it: tests/benchmarks/product_seconds.last.txt (--out).

A benchmark, not a test: it judges nothing and exits 0 once every command ran. On the embedded default (`make
deploy` already converged on this machine), each command of the table runs N times beside its floor, the part
of its time that is not the product's:

  deploy    `make deploy` with nothing changed   floor: ansible-playbook of an empty play on the same host
  status    `make status`                        floor: the same empty play
  plan      `make plan`                          floor: the same empty play
  capture   `make capture SECONDS=15`            floor: the 15 s window
  probe-io  `make probe-io`                      floor: fio's own seconds (each depth's duration_s in the run's
                                                 probe-io/result.json)
  bench     `make bench WORKLOAD=smoke`          floor: the runs' seconds (each run's duration_s in the bench's
                                                 summary.json)

Where the floor is a command (the empty play), the two alternate, A B A B, so that a drift of the machine's speed
falls on both; the ratio is taken pair by pair and its median printed. Where the floor is read from the command's
own artifacts, it is read from the run directory that very command printed, never the newest on disk. Times are
wall-clock seconds of the whole `make` process (time.monotonic around subprocess.run), as an operator waits for
them. The median is the figure to quote: these machines are shared and noisy, and the spread is printed beside it.
Why not a library (pyperf, hyperfine): they time one process in a loop; here a sample is a whole `make` run whose
floor must be read from what that run wrote, and the pairing is by run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON_BIN = REPO / ".venv" / "bin"
EMPTY_PLAY = "- name: The floor\n  hosts: localhost\n  gather_facts: false\n  tasks: []\n"


@dataclass
class Sample:
    wall_s: float
    floor_s: float


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.monotonic()
    cp = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, env=env)
    wall = time.monotonic() - start
    if cp.returncode != 0:
        sys.exit(f"product_seconds: {' '.join(argv)} exited {cp.returncode}:\n{(cp.stdout + cp.stderr)[-3000:]}")
    return wall, cp.stdout + cp.stderr


def _printed_dir(output: str, pattern: str) -> Path:
    """The directory the command printed (Ansible may fold a long line: tried again without whitespace)."""
    m = re.search(pattern, output) or re.search(pattern.replace(" ", ""), re.sub(r"\s+", "", output))
    if not m:
        sys.exit(f"product_seconds: the command printed no {pattern!r}:\n{output[-2000:]}")
    return REPO / m.group(1) if not m.group(1).startswith("/") else Path(m.group(1))


def empty_play_floor() -> Callable[[], float]:
    play = Path(tempfile.mkdtemp(prefix="product-seconds-")) / "empty.yml"
    play.write_text(EMPTY_PLAY)
    argv = [str(PYTHON_BIN / "ansible-playbook"), "-i", "inventory/local", str(play)]
    return lambda: _run(argv)[0]


def make(*args: str) -> list[str]:
    return ["make", "--no-print-directory", *args]


def sample_paired(cmd: list[str], floor: Callable[[], float]) -> Sample:
    wall, _ = _run(cmd)
    return Sample(wall, floor())


def sample_capture(seconds: int) -> Sample:
    wall, _ = _run(make("capture", f"SECONDS={seconds}"))
    return Sample(wall, float(seconds))


def sample_probe_io() -> Sample:
    wall, out = _run(make("probe-io"))
    result = _printed_dir(out, r"fetched to: (\S+?)/probe-io/") / "probe-io" / "result.json"
    runs = json.loads(result.read_text())["runs"]
    return Sample(wall, sum(float(r["duration_s"]) for r in runs))


def sample_bench(workload: str) -> Sample:
    wall, out = _run(make("bench", f"WORKLOAD={workload}"))
    summary = _printed_dir(out, r"report: (\S+?)/report\.txt") / "summary.json"
    runs = json.loads(summary.read_text())["runs"]
    return Sample(wall, sum(float(r["duration_s"]) for r in runs))


# Where a no-op deploy's seconds go: Ansible's own per-task timer (ansible.posix's profile_tasks callback) beside
# the project's callbacks (ansible/ansible.cfg callbacks_enabled, which the variable replaces, so they are named).
PROFILE_CALLBACKS = "refdeploy_progress,refdeploy_preload,refdeploy_fleet,refdeploy_print,ansible.posix.profile_tasks"


def profile_deploy(limit: int) -> list[str]:
    """The `limit` slowest tasks of one no-op `make deploy`, as profile_tasks sums them at the end of the play."""
    env = {**os.environ, "ANSIBLE_CALLBACKS_ENABLED": PROFILE_CALLBACKS,
           "PROFILE_TASKS_TASK_OUTPUT_LIMIT": str(limit), "PROFILE_TASKS_SORT_ORDER": "descending"}  # fmt: skip
    wall, out = _run(make("deploy"), env)
    recap = out.split("PLAY RECAP", 1)[-1]
    rows = [ln.strip() for ln in recap.splitlines() if re.search(r"-{3,} \d+\.\d+s$", ln.strip())]
    ran = re.search(r"ok=(\d+)\s+changed=(\d+).*?skipped=(\d+)", recap)
    said = f"ok={ran.group(1)} changed={ran.group(2)} skipped={ran.group(3)}" if ran else "no recap"
    return [f"one no-op make deploy: {wall:.2f} s wall, {said}; its {limit} slowest tasks (profile_tasks):", *rows]


def print_table(lines: list[str], out: Path | None) -> None:
    """The table on stdout, and in `out` too (the last output kept beside the benchmark)."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.write_text(text)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="samples of each quick command (deploy, status, plan)")
    ap.add_argument("--long-runs", type=int, default=3, help="samples of capture, probe-io and bench")
    ap.add_argument("--only", default="deploy,status,plan,capture,probe-io,bench")
    ap.add_argument("--profile", type=int, default=15, help="the no-op deploy's slowest tasks to list (0: none)")
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args()
    only = args.only.split(",")
    floor = empty_play_floor()
    floor()  # warm-up: the first ansible-playbook of a session reads its collections cold
    _run(make("deploy"))  # the default converged, and warm-up of the deploy path
    table: dict[str, tuple[str, list[Sample]]] = {}
    plan: dict[str, tuple[str, Callable[[], Sample], int]] = {
        "deploy": ("make deploy, nothing changed", lambda: sample_paired(make("deploy"), floor), args.runs),
        "status": ("make status", lambda: sample_paired(make("status"), floor), args.runs),
        "plan": ("make plan", lambda: sample_paired(make("plan"), floor), args.runs),
        "capture": ("make capture SECONDS=15", lambda: sample_capture(15), args.long_runs),
        "probe-io": ("make probe-io", sample_probe_io, args.long_runs),
        "bench": ("make bench WORKLOAD=smoke", lambda: sample_bench("smoke"), args.long_runs),
    }
    for key in only:
        title, sample, n = plan[key]
        table[key] = (title, [sample() for _ in range(n)])
        print(f"# {key}: {n} samples", file=sys.stderr)
    lines = [
        f"product_seconds.py, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} CPUs, "
        f"git {_run(['git', 'rev-parse', '--short', 'HEAD'])[1].strip()}",
        "wall and floor: median (min-max) seconds; own = wall - floor, ratio = wall / floor, both pair by pair",
        f"{'command':28} {'n':>2} {'wall s':>20} {'floor s':>20} {'own s':>8} {'ratio':>6}",
    ]
    for _key, (title, samples) in table.items():
        walls = [s.wall_s for s in samples]
        floors = [s.floor_s for s in samples]
        own = statistics.median(s.wall_s - s.floor_s for s in samples)
        ratio = statistics.median(s.wall_s / s.floor_s for s in samples)
        lines.append(f"{title:28} {len(samples):>2} {_spread(walls):>20} {_spread(floors):>20} {own:8.2f} {ratio:6.2f}")
    if args.profile:
        lines += ["", *profile_deploy(args.profile)]
    print_table(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
