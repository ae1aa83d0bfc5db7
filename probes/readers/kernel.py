"""What the kernel sees of vLLM: perf record/report of one process, and wchan sampling of every thread
(counts per thread, and when each thread's wait changed, on the shared monotonic clock).

perf: `perf record -e cpu-clock -F 99 -g -p PID -- sleep N`, then `perf report --stdio`. cpu-clock is a
software event, so it works where hardware counters are not exposed (VMs, this machine: REFERENCE §1).
Python 3.11 frames show as [unknown] in perf; perf says which native code (torch kernels, libgomp spinning,
memcpy, page faults) burns CPU, py-spy says which Python called it. Needs CAP_PERFMON (or CAP_SYS_ADMIN on
Docker releases that do not know PERFMON) and `kernel.perf_event_paranoid` permitting; otherwise skipped
with perf's reason.

wchan: `/proc/<pid>/task/<tid>/wchan` names the kernel function a sleeping thread waits in
(`futex_wait_queue`, `do_epoll_wait`, `folio_wait_bit_common` for a page fault on slow storage). Sampled
for every thread of the vLLM processes at a fixed rate and counted; "0" or empty means running.

  python -m probes.readers.kernel perf --pid N --seconds S --out DIR
  python -m probes.readers.kernel wchan --seconds S --out DIR [--rate-hz 10]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Literal

from probes.readers import procs

SCHEMA_VERSION = 1
REPORT_MAX_BYTES = 512 * 1024
# perf report of one recording; beyond this it is killed and the part fails, saying so.
PERF_REPORT_TIMEOUT_S = 120.0
PERF_NOT_INSTALLED = "perf not found: install linux-perf (it is in the probe image)"
Status = Literal["successful", "failed", "skipped"]


@dataclass
class PerfResult:
    pid: int
    status: Status
    reason: str | None
    record_command: list[str]
    report_command: list[str]
    samples: int | None = None
    files: list[str] = field(default_factory=list)
    # The span perf sampled, on the samplers' clock (time.monotonic): from when perf exec'd its `sleep N` (it
    # does that once its events are enabled) to when the sleep ended. On a saturated host perf's set-up alone
    # can take many seconds (both CPUs busy: 5 to 17 s here), so the span can open well after the window does.
    recorded_mono_s: list[float] | None = None
    schema_version: int = SCHEMA_VERSION


def _why_perf_failed(stderr: str) -> str:
    low = stderr.lower()
    if "perf_event_paranoid" in low or "permission" in low or "not permitted" in low:
        return (
            "perf_event_open not permitted: the probe needs CAP_PERFMON (or CAP_SYS_ADMIN) and "
            "kernel.perf_event_paranoid <= 2; " + (stderr.strip().splitlines() or [""])[-1]
        )
    return (stderr.strip().splitlines() or ["no output"])[-1][:300]


def sample_count(report_stdio: str) -> int | None:
    """perf report --stdio header: '# Samples: 1K of event 'cpu-clock'' -> the count (K/M expanded)."""
    for line in report_stdio.splitlines():
        if line.startswith("# Samples:"):
            word = line.split()[2]
            mult = {"K": 1000, "M": 1_000_000}.get(word[-1], 1)
            try:
                return int(float(word.rstrip("KM")) * mult)
            except ValueError:
                return None
    return None


# perf's workload when it must end at a moment on the samplers' clock (CLOCK_MONOTONIC, shared by every container
# on the host): it sleeps until then, however late perf exec'd it.
SLEEP_UNTIL = "import sys, time; time.sleep(max(0.0, float(sys.argv[1]) - time.monotonic()))"


def perf_capture(
    pid: int, seconds: float, out_dir: Path, frequency_hz: int = 99, until_mono: float | None = None
) -> PerfResult:
    """perf record of `pid` for `seconds`, or, with `until_mono`, until that moment on time.monotonic: perf execs
    its workload only once its events are enabled, which took up to 0.8 s here under load, and a `sleep N`
    counted from then ran past the capture's window (seen in CI: 0.5 s past its end)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = out_dir / f"perf-{pid}.data"
    workload = ["sleep", f"{seconds:.3f}"]
    if until_mono is not None:
        workload = ["python3", "-c", SLEEP_UNTIL, f"{until_mono:.6f}"]
    rec = [
        "perf",
        "record",
        "-e",
        "cpu-clock",
        "-F",
        str(frequency_hz),
        "-g",
        "-p",
        str(pid),
        "-o",
        str(data),
        "--",
        *workload,
    ]
    rep = ["perf", "report", "--stdio", "--no-children", "--sort", "comm,dso,sym", "-i", str(data)]
    res = PerfResult(pid, "skipped", None, rec, rep)
    if shutil.which("perf") is None:
        res.reason = PERF_NOT_INSTALLED
        return _write(res, out_dir)
    stderr_file = out_dir / f"perf-{pid}.record.stderr.txt"
    with stderr_file.open("w") as err:
        rc, res.recorded_mono_s = _record(rec, seconds + 30, err)
    stderr = stderr_file.read_text()
    res.files.append(stderr_file.name)
    if rc is None:
        res.status, res.reason = "failed", f"perf record -p {pid} ran past {seconds + 30:.0f} s and was killed"
        return _write(res, out_dir)
    if rc != 0 or not data.exists():
        reason = _why_perf_failed(stderr)
        res.status = "skipped" if "not permitted" in reason else "failed"
        res.reason = reason
        return _write(res, out_dir)
    res.files.append(data.name)
    try:
        cp2 = subprocess.run(rep, capture_output=True, text=True, timeout=PERF_REPORT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        res.status, res.reason = "failed", f"perf report -i {data.name} ran past {PERF_REPORT_TIMEOUT_S:g} s"
        return _write(res, out_dir)
    report = cp2.stdout
    if len(report.encode()) > REPORT_MAX_BYTES:
        report = report.encode()[:REPORT_MAX_BYTES].decode(errors="ignore") + "\n[truncated by probes.readers.kernel]\n"
    (out_dir / f"perf-{pid}.report.txt").write_text(report + cp2.stderr)
    res.files.insert(0, f"perf-{pid}.report.txt")
    res.samples = sample_count(report)
    if cp2.returncode != 0 and "no samples" not in cp2.stderr.lower():
        res.status, res.reason = "failed", _why_perf_failed(cp2.stderr)
    elif not res.samples:
        res.status, res.reason = "successful", "no samples: the process was idle for the whole window"
        res.samples = 0
    else:
        res.status = "successful"
    return _write(res, out_dir)


def _record(argv: list[str], bound_s: float, err: IO[str]) -> tuple[int | None, list[float] | None]:
    """Run perf record; its exit code (None: killed at bound_s) and the span its workload ran, on time.monotonic.

    The span is watched, not inferred from perf's exit: perf forks its workload at once but execs it only when
    its events are enabled, and after the workload ends it still post-processes; both take seconds on a busy
    host. Polled at 20 Hz through /proc/<perf>/task/<perf>/children (the fork is perf's main thread's)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, text=True)
    deadline = time.monotonic() + bound_s
    workload = argv[argv.index("--") + 1]
    started = ended = None
    while proc.poll() is None and time.monotonic() < deadline:
        running = _child_runs(proc.pid, workload)
        now = time.monotonic()
        if started is None and running:
            started = now
        elif started is not None and ended is None and not running:
            ended = now
        time.sleep(0.05)
    rc = proc.poll()
    if rc is None:
        proc.kill()
        proc.wait()
    # None when it ran for less than one poll, or never reached its workload.
    span = None if started is None else [round(started, 6), round(ended or time.monotonic(), 6)]
    return rc, span


def _child_runs(pid: int, comm: str, proc_root: Path = Path("/proc")) -> bool:
    """Whether a child of pid has exec'd `comm` (before its exec, perf's fork still reads "perf")."""
    try:
        children = (proc_root / str(pid) / "task" / str(pid) / "children").read_text().split()
    except OSError:
        return False
    for child in children:
        try:
            if (proc_root / child / "comm").read_text().strip() == comm:
                return True
        except OSError:
            continue
    return False


def _write(res: PerfResult, out_dir: Path) -> PerfResult:
    (out_dir / f"perf-{res.pid}.result.json").write_text(json.dumps(asdict(res), indent=2) + "\n")
    return res


# --- wchan ------------------------------------------------------------------------------------------------------


@dataclass
class WchanResult:
    status: Status
    reason: str | None
    rate_hz: float
    rounds: int
    # "pid role/thread comm" -> {wchan: count}; "running" counts samples where the thread was on a CPU.
    counts: dict[str, dict[str, int]]
    schema_version: int = SCHEMA_VERSION
    # When each thread's wait changed, on the monotonic clock every container of the host shares (the
    # samplers', the scrapes' and the requests' clock): "pid role/thread comm tid" -> [[t_mono_s, wchan], ...],
    # the first entry at its first reading. A wait is then tied to the seconds it lasted, and a stall to it.
    transitions: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    clock: str = "CLOCK_MONOTONIC"


def read_wchan(proc_root: Path, pid: int, tid: int) -> str | None:
    try:
        w = (proc_root / str(pid) / "task" / str(tid) / "wchan").read_text().strip()
    except OSError:
        return None
    return "running" if w in ("", "0") else w


def sample_wchan(
    found: Sequence[procs.VllmProcess],
    seconds: float,
    rate_hz: float = 10.0,
    proc_root: Path = Path("/proc"),
    stop: threading.Event | None = None,
) -> WchanResult:
    counts: dict[str, Counter[str]] = {}
    transitions: dict[str, list[tuple[float, str]]] = {}
    rounds = 0
    unreadable = 0
    period = 1.0 / rate_hz
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop and stop.is_set()):
        t0 = time.monotonic()
        for p in found:
            for t in procs.threads(p.pid, proc_root):
                w = read_wchan(proc_root, p.pid, t.tid)
                if w is None:
                    unreadable += 1
                    continue
                counts.setdefault(f"{p.pid} {p.name}/{t.comm}", Counter())[w] += 1
                seen = transitions.setdefault(f"{p.pid} {p.name}/{t.comm} {t.tid}", [])
                if not seen or seen[-1][1] != w:
                    seen.append((round(t0, 3), w))
        rounds += 1
        time.sleep(max(0.0, period - (time.monotonic() - t0)))
    if not counts:
        why = procs.NO_VLLM if not found else "no thread's wchan was readable (needs CAP_SYS_PTRACE over the target)"
        return WchanResult("skipped", why, rate_hz, rounds, {})
    by_count = {k: dict(v.most_common()) for k, v in counts.items()}
    return WchanResult("successful", None, rate_hz, rounds, by_count, transitions=transitions)


def format_wchan(res: WchanResult, top: int = 3) -> str:
    if res.status != "successful":
        return f"wchan: {res.status}: {res.reason}\n"
    lines = [f"wchan: {res.rounds} rounds at {res.rate_hz:g} Hz; per thread, the {top} most frequent waits"]
    for key, c in sorted(res.counts.items()):
        total = sum(c.values())
        shown = ", ".join(f"{w} {100 * n / total:.0f}%" for w, n in list(c.items())[:top])
        lines.append(f"  {key:<40} {shown}")
    return "\n".join(lines) + "\n"


def write_wchan(res: WchanResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "wchan.json").write_text(json.dumps(asdict(res), indent=2) + "\n")
    (out_dir / "wchan.txt").write_text(format_wchan(res))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probes.readers.kernel", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p1 = sub.add_parser("perf")
    p1.add_argument("--pid", type=int, help="default: the first VLLM::Worker, else EngineCore")
    p1.add_argument("--seconds", type=int, default=10)
    p1.add_argument("--out", type=Path, required=True)
    p2 = sub.add_parser("wchan")
    p2.add_argument("--seconds", type=float, default=10)
    p2.add_argument("--rate-hz", type=float, default=10)
    p2.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    found = procs.discover()
    if not found:
        print(f"kernel: {procs.NO_VLLM}", file=sys.stderr)
        return 2
    if args.cmd == "perf":
        pid = args.pid or default_perf_target(found).pid
        res = perf_capture(pid, args.seconds, args.out)
        print(f"perf pid {pid}: {res.status}" + (f": {res.reason}" if res.reason else f", {res.samples} samples"))
        return {"successful": 0, "failed": 1, "skipped": 3}[res.status]
    w = sample_wchan(found, args.seconds, args.rate_hz)
    write_wchan(w, args.out)
    print(format_wchan(w), end="")
    return {"successful": 0, "failed": 1, "skipped": 3}[w.status]


def perf_targets(found: Sequence[procs.VllmProcess]) -> list[procs.VllmProcess]:
    """The processes doing the model's compute: every worker rank, else the engine core, else the API server."""
    for role in ("worker", "engine_core", "api_server"):
        chosen = [p for p in found if p.role == role]
        if chosen:
            return chosen
    raise ValueError(procs.NO_VLLM)


def default_perf_target(found: Sequence[procs.VllmProcess]) -> procs.VllmProcess:
    """The process doing the model's compute: the first worker, else the engine core, else the API server."""
    for role in ("worker", "engine_core", "api_server"):
        for p in found:
            if p.role == role:
                return p
    raise ValueError(procs.NO_VLLM)


if __name__ == "__main__":
    sys.exit(main())
