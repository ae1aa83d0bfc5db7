"""Python stacks of the vLLM processes: py-spy dumps repeated N times and aggregated; py-spy record.

One dump says where each thread was at one instant; several, spread over a window, say where each thread
*sits*. `aggregate` counts, per process and thread, the innermost frame and the innermost frame in vLLM's
own code (the innermost frame is often `Condition.wait`; the vLLM frame says what was waited for), and how
often the thread was active and held the GIL. py-spy needs CAP_SYS_PTRACE over the target; a dump that
fails is kept with its stderr and counted, never raised.

  python -m probes.readers.stacks --out DIR [--dumps 3] [--interval 1.0] [--record-seconds 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from probes.readers import procs

SCHEMA_VERSION = 1
PY_SPY_NOT_INSTALLED = "py-spy not found: it is in the probe image (images/probes)"
DUMP_TIMEOUT_S = 20.0
# A speedscope profile of a few minutes is a few MiB; beyond this the file is kept but flagged.
RECORD_MAX_BYTES = 64 * 1024 * 1024
VLLM_PATH_MARK = "/site-packages/vllm/"  # vLLM itself, not the other packages of its venv

Status = Literal["successful", "failed", "skipped"]


@dataclass
class DumpResult:
    pid: int
    role: str
    index: int
    mono_s: float
    status: Status
    reason: str | None
    command: list[str]
    file: str | None  # raw py-spy JSON, relative to the output directory
    threads: int = 0


@dataclass
class ThreadSummary:
    pid: int
    role: str
    thread_name: str
    samples: int = 0
    active: int = 0
    owns_gil: int = 0
    innermost: Counter[str] = field(default_factory=Counter)
    innermost_vllm: Counter[str] = field(default_factory=Counter)


def frame_label(frame: dict[str, Any]) -> str:
    short = frame.get("short_filename") or str(frame.get("filename", "?")).rsplit("/", 1)[-1]
    return f"{frame.get('name', '?')} ({short}:{frame.get('line', '?')})"


def parse_dump(text: str) -> list[dict[str, Any]]:
    """py-spy dump --json: a list of threads, innermost frame first (REFERENCE §9)."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("py-spy dump --json: expected a list of threads")
    return [t for t in data if isinstance(t, dict)]


def aggregate(dumps: Sequence[tuple[int, str, list[dict[str, Any]]]]) -> list[ThreadSummary]:
    """(pid, role, threads) per dump -> per (pid, thread name) summaries, in process then thread order."""
    by_key: dict[tuple[int, str], ThreadSummary] = {}
    for pid, role, threads in dumps:
        for t in threads:
            name = str(t.get("thread_name") or t.get("os_thread_id") or "?")
            s = by_key.setdefault((pid, name), ThreadSummary(pid, role, name))
            s.samples += 1
            s.active += bool(t.get("active"))
            s.owns_gil += bool(t.get("owns_gil"))
            frames = t.get("frames") or []
            s.innermost[frame_label(frames[0]) if frames else "(no Python frames)"] += 1
            vllm = next((f for f in frames if VLLM_PATH_MARK in str(f.get("filename", ""))), None)
            if vllm is not None:
                s.innermost_vllm[frame_label(vllm)] += 1
    return sorted(by_key.values(), key=lambda s: (procs.ROLE_ORDER.index(s.role), s.pid, s.thread_name))


def format_aggregate(summaries: Sequence[ThreadSummary], names: Mapping[int, str] | None = None) -> str:
    """Per process (named by its role and, for a worker, its rank: `names`), where each thread sits."""
    lines = []
    current = None
    for s in summaries:
        if s.pid != current:
            current = s.pid
            lines.append(f"pid {s.pid} ({(names or {}).get(s.pid, s.role)})")
        top, n = s.innermost.most_common(1)[0] if s.innermost else ("?", 0)
        lines.append(
            f"  {s.thread_name:<24} active {s.active}/{s.samples} gil {s.owns_gil}/{s.samples}  at {top} [{n}]"
        )
        if s.innermost_vllm:
            vtop, vn = s.innermost_vllm.most_common(1)[0]
            lines.append(f"  {'':<24} in vLLM: {vtop} [{vn}/{s.samples}]")
    return "\n".join(lines) + "\n"


def _run(argv: list[str], timeout: float) -> tuple[int | None, str, str]:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, f"timed out after {timeout:g} s"
    return cp.returncode, cp.stdout, cp.stderr


def _denied(err: str) -> bool:
    return "Permission denied" in err or "Operation not permitted" in err


def dump_argv(pid: int) -> list[str]:
    """py-spy dump without pausing the target (`--nonblocking`): a blocking dump stops every thread of the process
    while py-spy reads its stacks, and a rank stopped that way stalls every other rank at the next collective. The
    price is that a stack read while it changes can be torn: py-spy then fails, and the dump is retried once."""
    return ["py-spy", "dump", "--pid", str(pid), "--json", "--nonblocking"]


def dump_once(p: procs.VllmProcess, index: int, out_dir: Path) -> tuple[DumpResult, list[dict[str, Any]]]:
    argv = dump_argv(p.pid)
    mono = time.monotonic()
    if shutil.which("py-spy") is None:
        return DumpResult(p.pid, p.role, index, mono, "skipped", PY_SPY_NOT_INSTALLED, argv, None), []
    rc, out, err = _run(argv, DUMP_TIMEOUT_S)
    # A torn read without pausing: once more. So too an exit 0 that printed nothing (seen once in a CI-like run
    # under load, 2026-12-05: an empty dump recorded as successful).
    if (rc not in (0, None) and not _denied(err)) or (rc == 0 and not out.strip()):
        rc, out, err = _run(argv, DUMP_TIMEOUT_S)
    if rc == 0 and not out.strip():
        rc, err = 1, f"{err}py-spy dump --pid {p.pid} exited 0 and printed nothing, twice\n"
    if rc is None:
        err = f"py-spy dump --pid {p.pid} did not finish within {DUMP_TIMEOUT_S:g} s and was killed\n{err}"
    name = f"dump-{index:02d}-{p.name}-{p.pid}"
    (out_dir / f"{name}.json").write_text(out)
    if err:
        (out_dir / f"{name}.stderr.txt").write_text(err)
    try:
        threads = parse_dump(out) if rc == 0 else []
    except ValueError as e:
        return DumpResult(p.pid, p.role, index, mono, "failed", f"unparseable output: {e}", argv, f"{name}.json"), []
    if rc != 0:
        why = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
        if _denied(err):
            why += " (py-spy needs CAP_SYS_PTRACE: --cap-add SYS_PTRACE)"
        return DumpResult(p.pid, p.role, index, mono, "failed", why, argv, f"{name}.json"), []
    return DumpResult(p.pid, p.role, index, mono, "successful", None, argv, f"{name}.json", len(threads)), threads


@dataclass
class RecordResult:
    pid: int
    role: str
    status: Status
    reason: str | None
    command: list[str]
    file: str | None
    bytes: int = 0
    seconds: float = 0.0


def record(p: procs.VllmProcess, seconds: int, rate_hz: int, out_dir: Path, subprocesses: bool = False) -> RecordResult:
    """py-spy record to speedscope for a bounded duration (non-blocking: the target is not paused).

    With `subprocesses`, one recording of the API server covers its children: EngineCore and the workers.
    """
    name = f"record-{p.role}-{p.pid}.speedscope.json"
    argv = [
        "py-spy",
        "record",
        "--format",
        "speedscope",
        "--output",
        str(out_dir / name),
        "--duration",
        str(seconds),
        "--rate",
        str(rate_hz),
        "--pid",
        str(p.pid),
        "--nonblocking",
        "--idle",
    ]
    if subprocesses:
        argv.append("--subprocesses")
    if shutil.which("py-spy") is None:
        return RecordResult(p.pid, p.role, "skipped", PY_SPY_NOT_INSTALLED, argv, None)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    rc, _out, err = _run(argv, seconds + 30.0)
    took = time.monotonic() - t0
    (out_dir / f"record-{p.role}-{p.pid}.stderr.txt").write_text(err)
    path = out_dir / name
    size = path.stat().st_size if path.exists() else 0
    if rc != 0 or size == 0:
        return RecordResult(
            p.pid,
            p.role,
            "failed",
            f"py-spy record exit {rc}: {err.strip()[-300:]}",
            argv,
            name if size else None,
            size,
            took,
        )
    if size > RECORD_MAX_BYTES:
        return RecordResult(
            p.pid, p.role, "failed", f"profile is {size} bytes, over {RECORD_MAX_BYTES}", argv, name, size, took
        )
    return RecordResult(p.pid, p.role, "successful", None, argv, name, size, took)


@dataclass
class StacksResult:
    status: Status
    reason: str | None
    dumps: list[DumpResult]
    records: list[RecordResult]
    processes: list[dict[str, Any]]
    schema_version: int = SCHEMA_VERSION


def run_stacks(
    found: Sequence[procs.VllmProcess],
    out_dir: Path,
    dumps: int = 3,
    interval_s: float = 1.0,
    record_seconds: int = 0,
    record_rate_hz: int = 100,
) -> StacksResult:
    """Dump every process `dumps` times, `interval_s` apart; optionally record the busiest role afterwards."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[DumpResult] = []
    collected: list[tuple[int, str, list[dict[str, Any]]]] = []
    for i in range(dumps):
        if i:
            time.sleep(interval_s)
        for p in found:
            r, threads = dump_once(p, i + 1, out_dir)
            results.append(r)
            if threads:
                collected.append((p.pid, p.role, threads))
    summaries = aggregate(collected)
    names = {p.pid: p.name for p in found}
    text = format_aggregate(summaries, names) if summaries else "no successful dumps\n"
    (out_dir / "aggregate.txt").write_text(text)
    (out_dir / "aggregate.json").write_text(
        json.dumps(
            [
                asdict(s)
                | {"innermost": dict(s.innermost.most_common()), "innermost_vllm": dict(s.innermost_vllm.most_common())}
                for s in summaries
            ],
            indent=2,
        )
        + "\n"
    )
    records = [record(found[0], record_seconds, record_rate_hz, out_dir, subprocesses=True)] if record_seconds else []
    missing = sorted({p.pid for p in found} - {r.pid for r in results if r.status == "successful"})
    if all(r.status == "skipped" for r in results):
        status: Status = "skipped"
        reason = results[0].reason if results else procs.NO_VLLM
    elif missing:
        status, reason = "failed", f"no successful dump of pid(s) {missing}: see dumps[].reason"
    else:
        status, reason = "successful", None
    res = StacksResult(status, reason, results, records, [asdict(p) for p in found])
    (out_dir / "result.json").write_text(json.dumps(asdict(res), indent=2) + "\n")
    return res


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probes.readers.stacks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dumps", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--record-seconds", type=int, default=0)
    ap.add_argument("--proc-root", type=Path, default=Path("/proc"))
    args = ap.parse_args(argv)
    if args.dumps < 1 or args.record_seconds < 0:
        print("stacks: --dumps must be >= 1 and --record-seconds >= 0", file=sys.stderr)
        return 2
    found = procs.discover(args.proc_root)
    if not found:
        print(f"stacks: {procs.NO_VLLM}", file=sys.stderr)
        return 2
    res = run_stacks(found, args.out, args.dumps, args.interval, args.record_seconds)
    print((args.out / "aggregate.txt").read_text(), end="")
    print(f"stacks: {res.status}" + (f": {res.reason}" if res.reason else ""))
    return {"successful": 0, "failed": 1, "skipped": 3}[res.status]


if __name__ == "__main__":
    sys.exit(main())
