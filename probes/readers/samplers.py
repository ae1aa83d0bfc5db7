"""Samplers: vmstat, iostat -x, pidstat on the vLLM processes, the GPUs (NVML), every line on one clock.

Each sampler is the standard tool writing to a pipe; a reader thread stamps every line it receives with
`time.monotonic()` (CLOCK_MONOTONIC, the same clock in every container on the host) and the UTC wall clock,
and appends `mono_s<TAB>wall<TAB>line` to `<name>.log`. The tools flush per line, so the stamp is within a
few milliseconds of the tool's own sample time; the stamp, not the tool's clock, is what lines are matched
on. Output is bounded: in a window, a log stops at `max_bytes` (the rest is counted, not kept); as a
sidecar, a log rotates to `<name>.log.1` at `max_bytes`, so each sampler keeps at most twice that.

pidstat watches only the vLLM processes and their threads: over all processes it perturbs vLLM on a
small host (REFERENCE §1). The GPU sampler (`nvidia-smi` in profiles and --only, as before) reads NVML in this
process (probes/readers/nvml.py: nvml.log), else runs `nvidia-smi -lms 200` (nvidia-smi.log); its `via` in samplers.json
says which and why. Where neither can run it is skipped, with both reasons.

  python -m probes.readers.samplers --out DIR [--seconds N | --sidecar] [--only vmstat,iostat,pidstat,nvidia-smi]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal, Protocol

from probes.readers import nvml, procs
from probes.readers.sampler_logs import NVIDIA_SMI_FIELDS

SCHEMA_VERSION = 1
SAMPLER_NAMES = ("vmstat", "iostat", "pidstat", "nvidia-smi")
# Set in a probe container that was given the GPUs (serving/plan/render.py GPU_ACCESS_ENV): nvidia-smi must run.
GPU_ACCESS_ENV = "REFDEPLOY_GPU_ACCESS"
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
_TERM_GRACE_S = 3.0
# How often a sidecar looks again at which vLLM processes there are (_follow).
FOLLOW_S = 5.0

Status = Literal["successful", "failed", "skipped"]


class Reader(Protocol):
    """A sampler that runs in a thread of this process (NVML), writing lines until stopped or done."""

    def start(self, write: Callable[[str], None]) -> None: ...
    def stop(self, timeout_s: float) -> str | None: ...  # what broke it, or None
    def alive(self) -> bool: ...


@dataclass(frozen=True)
class SamplerSpec:
    name: str
    argv: list[str]
    skip_reason: str | None = None  # set when it cannot run here
    reader: Reader | None = None  # runs in this process instead of argv
    log_name: str = ""  # the log's file name when it is not <name>.log
    via: str = ""  # what reads it, and why that (the GPU sampler: NVML, or nvidia-smi because NVML did not open)

    @property
    def log(self) -> str:
        return self.log_name or f"{self.name}.log"


@dataclass
class SamplerResult:
    name: str
    status: Status
    reason: str | None
    command: list[str]
    log: str | None  # file name inside the output directory
    lines: int = 0
    bytes_written: int = 0
    lines_dropped: int = 0
    exit_code: int | None = None
    stderr_tail: str = ""
    schema_version: int = SCHEMA_VERSION
    via: str = ""


def stamp() -> tuple[float, str]:
    """One reading of both clocks: (monotonic seconds, UTC wall time ISO 8601)."""
    return time.monotonic(), datetime.now(UTC).isoformat(timespec="microseconds")


def build_specs(
    names: Iterable[str],
    pids: Sequence[int],
    interval_s: int = 1,
    gpu_interval_ms: int = 200,
    which: Callable[[str], str | None] = shutil.which,
    environ: Mapping[str, str] | None = None,
    nvml_open: Callable[[Mapping[str, str]], nvml.Opened | nvml.Unavailable] | None = None,
) -> list[SamplerSpec]:
    """The command of each sampler, or why it cannot run here. `which` is shutil.which, `nvml_open` nvml.open_api
    (tests replace them; the NVML replay is chosen by nvml.REPLAY_ENV in `environ`, os.environ by default)."""
    env = os.environ if environ is None else environ
    specs = []
    for name in names:
        if name == "vmstat":
            argv = ["vmstat", "-n", str(interval_s)]
        elif name == "iostat":
            argv = ["iostat", "-x", "-d", "-y", str(interval_s)]
        elif name == "pidstat":
            argv = ["pidstat", "-h", "-u", "-t", "-p", ",".join(map(str, pids)), str(interval_s)]
        elif name == "nvidia-smi":
            argv = [
                "nvidia-smi",
                f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}",
                "--format=csv,noheader,nounits",
                "-lms",
                str(gpu_interval_ms),
            ]
        else:
            raise ValueError(f"unknown sampler {name!r}: choose from {', '.join(SAMPLER_NAMES)}")
        reason, via, why = None, "", f"install {'procps' if name == 'vmstat' else 'sysstat'}"
        if name == "nvidia-smi":
            opened = (nvml_open or nvml.open_api)(env)
            if isinstance(opened, nvml.Opened):
                reader = nvml.NvmlReader(opened, gpu_interval_ms / 1000)
                argv = [f"NVML every {gpu_interval_ms} ms in this process ({opened.source})"]
                specs.append(SamplerSpec(name, argv, None, reader, nvml.LOG_NAME, opened.label))
                continue
            via = f"nvidia-smi -lms {gpu_interval_ms}, because NVML did not open: {opened.reason}"
            why = f"{nvidia_smi_missing(env)}; and NVML did not open: {opened.reason}"
        if which(argv[0]) is None:
            reason = f"{argv[0]} not found: {why}"
        elif name == "pidstat" and not pids:
            reason = procs.NO_VLLM
        specs.append(SamplerSpec(name=name, argv=argv, skip_reason=reason, via=via))
    return specs


def nvidia_smi_missing(environ: Mapping[str, str] | None = None) -> str:
    """Why nvidia-smi is absent here, as exactly as this container can tell."""
    env = os.environ if environ is None else environ
    given = env.get(GPU_ACCESS_ENV, "")
    if not given:
        return "this container was given no GPUs (the profile has none, or no NVIDIA GPU driver on this host)"
    return (
        f"this container was given the GPUs ({given}) but the driver's nvidia-smi was not mounted: is the NVIDIA "
        "container toolkit installed and Docker's nvidia runtime configured (nvidia-ctk runtime configure), and "
        "does `nvidia-container-cli info` work on the host?"
    )


class _Log:
    """An append-only stamped log, bounded: truncate (window) or rotate once (sidecar)."""

    def __init__(self, path: Path, max_bytes: int, rotate: bool) -> None:
        self.path, self.max_bytes, self.rotate = path, max_bytes, rotate
        self.fh: IO[str] = path.open("a", encoding="utf-8")
        self.size = path.stat().st_size
        self.lines = self.bytes_written = self.dropped = 0

    def write(self, line: str) -> None:
        mono, wall = stamp()
        rec = f"{mono:.6f}\t{wall}\t{line}\n"
        n = len(rec.encode())
        if self.size + n > self.max_bytes:
            if not self.rotate:
                self.dropped += 1
                return
            self.fh.close()
            self.path.replace(self.path.with_name(self.path.name + ".1"))
            self.fh = self.path.open("a", encoding="utf-8")
            self.size = 0
        self.fh.write(rec)
        self.fh.flush()
        self.size += n
        self.lines += 1
        self.bytes_written += n

    def close(self) -> None:
        self.fh.close()


class SamplerSet:
    """Start samplers together, stop them together; each writes `<out>/<name>.log`."""

    def __init__(self, specs: Sequence[SamplerSpec], out_dir: Path, max_bytes: int, rotate: bool = False) -> None:
        self.specs, self.out_dir, self.max_bytes, self.rotate = list(specs), out_dir, max_bytes, rotate
        self._procs: dict[str, subprocess.Popen[str]] = {}
        self._logs: dict[str, _Log] = {}
        self._threads: list[threading.Thread] = []
        self._readers: dict[str, Reader] = {}  # in-process samplers (NVML), by name
        self.results: dict[str, SamplerResult] = {}

    def _spawn(self, name: str, argv: list[str], log: _Log) -> None:
        """Run a sampler's tool, its output pumped into `log` by a thread of its own (OSError where it cannot)."""
        env = dict(os.environ, LC_ALL="C", S_TIME_FORMAT="ISO")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
        self._procs[name], self._logs[name] = proc, log
        t = threading.Thread(target=self._pump, args=(proc, log), name=f"sampler-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def start(self) -> None:
        for spec in self.specs:
            if spec.skip_reason:
                reason = spec.skip_reason
                self.results[spec.name] = SamplerResult(spec.name, "skipped", reason, spec.argv, None, via=spec.via)
                continue
            log = _Log(self.out_dir / spec.log, self.max_bytes, self.rotate)
            if spec.reader is not None:
                self._logs[spec.name], self._readers[spec.name] = log, spec.reader
                spec.reader.start(log.write)
                continue
            try:
                self._spawn(spec.name, spec.argv, log)
            except OSError as e:
                log.close()
                self.results[spec.name] = SamplerResult(spec.name, "failed", str(e), spec.argv, None)

    def replace(self, name: str, argv: list[str]) -> bool:
        """Run sampler `name` again with `argv`, appending to the same log (a sidecar's pidstat, once vLLM's
        processes are not those it was started on). False where it does not run as a process here."""
        old = self._procs.get(name)
        if old is None:
            return False
        if old.poll() is None:
            old.send_signal(signal.SIGTERM)
            try:
                old.wait(timeout=_TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                old.kill()
                old.wait()
        try:
            self._spawn(name, argv, self._logs[name])
        except OSError:
            return False
        return True

    @staticmethod
    def _pump(proc: subprocess.Popen[str], log: _Log) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line.rstrip("\n"))

    def stop(self) -> dict[str, SamplerResult]:
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _TERM_GRACE_S
        for proc in self._procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for t in self._threads:
            t.join(timeout=_TERM_GRACE_S)
        for spec in (s for s in self.specs if s.name in self._readers):
            log, why = self._logs[spec.name], self._readers[spec.name].stop(_TERM_GRACE_S)
            log.close()
            why = why or (None if log.lines else "it wrote no line")
            reason = f"{spec.name} ({spec.via}) stopped after {log.lines} lines: {why}" if why else None
            status: Status = "failed" if why else "successful"
            self.results[spec.name] = SamplerResult(spec.name, status, reason, spec.argv, log.path.name, log.lines,
                                                    log.bytes_written, log.dropped, via=spec.via)  # fmt: skip
        for name, proc in self._procs.items():
            log = self._logs[name]
            log.close()
            stderr = proc.stderr.read() if proc.stderr else ""
            # Killed by our SIGTERM is how a sampler normally ends; anything else before that is a failure.
            ok = proc.returncode in (0, -signal.SIGTERM) and log.lines > 0
            reason = None if ok else f"{name} exited {proc.returncode} after {log.lines} lines: {stderr.strip()[-300:]}"
            self.results[name] = SamplerResult(
                name,
                "successful" if ok else "failed",
                reason,
                proc.args if isinstance(proc.args, list) else [],
                log.path.name,
                log.lines,
                log.bytes_written,
                log.dropped,
                proc.returncode,
                stderr[-2000:],
                via=next((s.via for s in self.specs if s.name == name), ""),
            )
        return self.results

    def alive(self) -> list[str]:
        return [n for n, p in self._procs.items() if p.poll() is None] + [
            n for n, r in self._readers.items() if r.alive()
        ]


# --- CLI ---------------------------------------------------------------------------------------------------------


def write_results(
    out_dir: Path,
    results: dict[str, SamplerResult],
    pids: Sequence[int],
    start: tuple[float, str],
    end: tuple[float, str],
) -> Path:
    path = out_dir / "samplers.json"
    doc = {
        "schema_version": SCHEMA_VERSION,
        "pids": list(pids),
        "start": {"mono_s": start[0], "wall": start[1]},
        "end": {"mono_s": end[0], "wall": end[1]},
        "samplers": {n: asdict(r) for n, r in results.items()},
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def _follow(
    sset: SamplerSet, found: list[procs.VllmProcess], proc_root: Path, out: Path, start: tuple[float, str]
) -> list[procs.VllmProcess]:
    """A sidecar's pidstat watches vLLM's processes as they are now. It starts with vLLM's container, often
    before the engine's processes exist (after a restart by Docker's policy, only the API server, PID 1, does):
    pidstat -p takes a fixed list, so once the set changes it is run again on the new one, into the same log,
    and samplers.json says what it watches. An empty set (vLLM going down) keeps the last."""
    try:
        now = procs.discover(proc_root)
    except OSError:
        return found
    if not now or [p.pid for p in now] == [p.pid for p in found]:
        return found
    (spec,) = build_specs(["pidstat"], [p.pid for p in now])
    if spec.skip_reason or not sset.replace("pidstat", spec.argv):
        return found
    write_results(out, sset.results, [p.pid for p in now], start, start)
    return now


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probes.readers.samplers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--seconds", type=float, help="sample for this long, then stop")
    mode.add_argument("--sidecar", action="store_true", help="sample until stopped; logs rotate at --max-bytes")
    ap.add_argument("--only", default=",".join(SAMPLER_NAMES), help="comma-separated samplers")
    ap.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    ap.add_argument("--proc-root", type=Path, default=Path("/proc"))
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        found = procs.discover(args.proc_root)
        specs = build_specs(names, [p.pid for p in found])
    except (OSError, ValueError) as e:
        print(f"samplers: {e}", file=sys.stderr)
        return 2
    if not found:
        print(f"samplers: {procs.NO_VLLM}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.sidecar:
        # A sidecar (re)starts with a new serving container, whose PIDs differ: its logs start afresh, and
        # the previous ones are kept once as <name>.log.1.
        for spec in specs:
            log = args.out / spec.log
            if log.exists():
                log.replace(log.with_name(log.name + ".1"))
    sset = SamplerSet(specs, args.out, args.max_bytes, rotate=args.sidecar)
    start = stamp()
    sset.start()
    if args.sidecar:  # a sidecar is stopped, not finished: say what it watches now
        write_results(args.out, sset.results, [p.pid for p in found], start, start)
    # A sidecar runs until SIGTERM, or ends with the serving container: its PID namespace goes, and we with it.
    deadline = None if args.sidecar else start[0] + args.seconds
    next_look = time.monotonic() + FOLLOW_S
    while not stop.is_set():
        left = 0.5 if deadline is None else deadline - time.monotonic()
        if left <= 0:
            break
        stop.wait(min(0.5, left))
        if args.sidecar and "pidstat" in names and time.monotonic() >= next_look:
            next_look = time.monotonic() + FOLLOW_S
            found = _follow(sset, found, args.proc_root, args.out, start)
    results = sset.stop()
    write_results(args.out, results, [p.pid for p in found], start, stamp())
    for r in results.values():
        print(f"{r.name:<10} {r.status:<10} lines={r.lines:<6} {r.reason or ''}{f' (via {r.via})' if r.via else ''}")
    return 0 if all(r.status != "failed" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
