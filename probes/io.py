"""fio 4 KiB random-read probe: is the storage under a served file slow for serial page faults?

Reads a file the serving stack reads (model weights, an mmap'd table) with fio at QD1 and QD64, O_DIRECT,
libaio. QD1 is what a single thread faulting pages in one at a time sees; QD64 is what the drive can do. On
the reference NVMe that is ~4.5k IOPS against ~36k IOPS; a drive with a 970 ms max latency stalls every
reader behind it. fio runs with `--readonly` and `--invalidate=0` (O_DIRECT needs no cold cache, and dropping the
served file's cached pages would take from vLLM what the RAM budget keeps for it). The target's identity (device,
inode, size, mtime, ctime and a sha256 of a few fixed 64 KiB ranges read with O_DIRECT) is compared before and
after, and a run that changed the target fails: the file is never read whole, so the page cache is left as it was.

  python -m probes.io --target FILE --data-dir DIR --out DIR [--depth 1 --depth 64] [--runtime 10]
                      [--min-iops 1:1000] [--max-p999-ms 64:50] [--max-ms 64:200]

Exit status: 0 PASS, 1 FAIL (a finding: the probe ran and the storage missed a limit, or the target changed),
2 bad input (one line on stderr), 3 skipped (fio or O_DIRECT unavailable), 4 the probe itself broke (one line on
stderr, the traceback in OUT/probe-error.txt): no verdict, whatever the storage is like.
Artifacts, per depth in OUT/qd{N}/: command.txt, stdout.json, stderr.txt, exit_code.txt, result.json;
OUT/result.json for the whole probe.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import mmap
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1
# The whole probe's result: 2 since the target's identity is sampled (TargetState), not a whole-file sha256.
RESULT_SCHEMA_VERSION = 2
BLOCK_SIZE_BYTES = 4096
FIO_NOT_INSTALLED = "fio is not installed: apt-get install fio"
# fio's iodepth_level buckets (fio 3.33): "16" covers depths 16..31, ">=64" everything from 64 up.
_DEPTH_BUCKETS = (1, 2, 4, 8, 16, 32)
# Seconds fio gets to exit after SIGTERM before SIGKILL; and beyond --runtime before SIGTERM.
_TERM_GRACE_S = 5.0
_DEFAULT_TIMEOUT_MARGIN_S = 60.0
# The target's identity reads these many fixed ranges of this size: first, last and evenly between (O_DIRECT).
IDENTITY_RANGES = 8
IDENTITY_RANGE_BYTES = 64 * 1024
# Exit status of a probe that broke (an exception in the probe, not a finding about the storage).
EXIT_PROBE_ERROR = 4

Status = Literal["successful", "failed", "skipped"]
Verdict = Literal["PASS", "FAIL"]


class ProbeInputError(ValueError):
    """Bad input: raised before anything runs or is written."""


class FioParseError(ValueError):
    """fio's output holds no usable figures."""


@dataclass(frozen=True)
class FioResult:
    schema_version: int
    fio_version: str
    job_name: str
    requested_iodepth: int
    read_iops: float
    read_bw_mib_s: float
    read_io_bytes: int
    read_total_ios: int
    read_runtime_ms: int
    p50_clat_ms: float
    p99_clat_ms: float
    p999_clat_ms: float
    max_clat_ms: float
    max_lat_ms: float
    # Share of the run's time (%) at each fio depth bucket: "1", "2", "4", ..., "32", ">=64".
    iodepth_level: dict[str, float]
    achieved_depth_bucket: str
    achieved_depth_share_pct: float
    # Lines fio printed on stdout around its JSON ("fio: cache invalidation of ... failed").
    fio_messages: list[str]


@dataclass(frozen=True)
class Thresholds:
    min_iops: float | None = None
    max_p999_clat_ms: float | None = None
    max_clat_ms: float | None = None


@dataclass(frozen=True)
class TargetState:
    """Who the target is, without reading it whole: a change of content through the file system moves mtime and
    ctime (ctime cannot be set back), a replaced file has another inode, and the sampled hash catches the rest
    that falls in its ranges."""

    sampled_sha256: str
    size_bytes: int
    mtime_ns: int
    device_major_minor: str
    inode: int
    ctime_ns: int
    # [offset, length] of each range hashed, in order (identity_ranges).
    sampled_ranges: list[list[int]]


@dataclass(frozen=True)
class DepthRun:
    schema_version: int
    iodepth: int
    status: Status
    reason: str | None
    artifact_dir: str
    argv: list[str]
    exit_code: int | None
    timed_out: bool
    duration_s: float
    fio: FioResult | None
    thresholds: Thresholds | None
    verdict: Verdict
    reasons: list[str]


@dataclass(frozen=True)
class IoProbeResult:
    schema_version: int
    status: Status
    reason: str | None
    verdict: Verdict | None  # None when skipped
    reasons: list[str]
    target: str
    target_resolved: str
    data_dirs: list[str]
    out_dir: str
    fio_path: str | None
    fio_version: str | None
    depths: list[int]
    runtime_s: int
    seed: int
    size_bytes: int | None
    timeout_s: float
    started_at_utc: str
    finished_at_utc: str
    target_before: TargetState | None
    target_after: TargetState | None
    target_unchanged: bool
    runs: list[DepthRun]


# --- describe ---------------------------------------------------------------------------------------------


def fio_filename(target: Path) -> str:
    """fio splits --filename on ':' (several files); a literal colon is escaped as '\\:'."""
    return str(target).replace(":", "\\:")


def build_fio_argv(
    target: Path, iodepth: int, runtime_s: int, size_bytes: int | None, seed: int, *, fio: str = "fio"
) -> list[str]:
    if iodepth < 1:
        raise ProbeInputError(f"iodepth must be at least 1, got {iodepth}")
    if runtime_s < 1:
        raise ProbeInputError(f"runtime must be at least 1 s, got {runtime_s}")
    if size_bytes is not None and size_bytes < BLOCK_SIZE_BYTES:
        raise ProbeInputError(f"size must be at least one 4 KiB block ({BLOCK_SIZE_BYTES} bytes), got {size_bytes}")
    argv = [
        fio,
        f"--name=randread-qd{iodepth}",
        f"--filename={fio_filename(target)}",
        "--readonly",
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        f"--iodepth={iodepth}",
        "--numjobs=1",
        "--time_based",
        f"--runtime={runtime_s}",
        "--randrepeat=1",
        "--invalidate=0",
        f"--randseed={seed}",
        "--group_reporting",
        "--output-format=json",
    ]
    if size_bytes is not None:
        argv.append(f"--size={size_bytes}")
    return argv


def depth_bucket(iodepth: int) -> str:
    """The fio iodepth_level bucket that holds a depth: 1 -> "1", 48 -> "32", 64 and up -> ">=64"."""
    if iodepth < 1:
        raise ValueError(f"iodepth must be at least 1, got {iodepth}")
    if iodepth >= 64:
        return ">=64"
    return str(max(b for b in _DEPTH_BUCKETS if b <= iodepth))


def check_target(target: Path, data_dirs: list[Path]) -> None:
    """Refuse anything but a non-empty regular file inside an allowed data directory (symlinks resolved)."""
    if not data_dirs:
        raise ProbeInputError("no data directory given: pass --data-dir with the directory that holds the target")
    allowed: list[Path] = []
    for d in data_dirs:
        if not d.is_dir():
            raise ProbeInputError(f"data directory {d} does not exist or is not a directory: check --data-dir")
        allowed.append(d.resolve(strict=True))
    try:
        st = target.stat()
    except FileNotFoundError:
        hint = " (a symlink whose destination is missing)" if target.is_symlink() else ""
        raise ProbeInputError(
            f"target {target} does not exist{hint}: give a model weight or data file the serving stack reads"
        ) from None
    except OSError as e:
        raise ProbeInputError(f"cannot stat target {target}: {e.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        raise ProbeInputError(
            f"refusing block device {target}: the probe reads files only; give a file on the device's file system"
        )
    if stat.S_ISCHR(st.st_mode):
        raise ProbeInputError(
            f"refusing character device {target}: the probe reads files only; give a file on a mounted file system"
        )
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ProbeInputError(f"target {target} is {kind}: give a model weight or data file")
    resolved = target.resolve(strict=True)
    if not any(resolved.is_relative_to(d) for d in allowed):
        via = f" resolves to {resolved}, which" if resolved != target.absolute() else ""
        dirs = ", ".join(str(d) for d in allowed)
        raise ProbeInputError(
            f"target {target}{via} is outside the allowed data directories ({dirs}): "
            "pass the directory that holds it with --data-dir"
        )
    if st.st_size == 0:
        raise ProbeInputError(f"target {target} is empty (0 bytes): give a file with data in it")
    if st.st_size < BLOCK_SIZE_BYTES:
        raise ProbeInputError(f"target {target} is {st.st_size} bytes, smaller than one 4 KiB read: give a larger file")


# --- parse ------------------------------------------------------------------------------------------------


def _get(obj: Any, path: str, *keys: str) -> Any:
    cur = obj
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            raise FioParseError(f"fio JSON has no {path}")
        cur = cur[k]
    return cur


def _number(obj: Any, path: str, *keys: str) -> float:
    v = _get(obj, path, *keys)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FioParseError(f"fio JSON {path} is not a number: {v!r}")
    return float(v)


def _split_stdout(text: str) -> tuple[Any, list[str]]:
    """fio prints some messages on stdout around its JSON; the JSON object starts on a line of its own."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("{")), None)
    if start is None:
        tail = text.strip().splitlines()[-1:] or ["(empty)"]
        raise FioParseError(f"fio printed no JSON object on stdout; last line: {tail[0]}")
    rest = "".join(lines[start:])
    try:
        data, end = json.JSONDecoder().raw_decode(rest)
    except json.JSONDecodeError as e:
        raise FioParseError(f"fio's JSON output is not valid JSON: {e}") from None
    messages = [line.strip() for line in lines[:start] if line.strip()]
    messages += [line.strip() for line in rest[end:].splitlines() if line.strip()]
    return data, messages


def parse_fio_json(text: str) -> FioResult:
    data, messages = _split_stdout(text)
    jobs = _get(data, "jobs", "jobs")
    if not isinstance(jobs, list) or not jobs:
        raise FioParseError("fio JSON has no jobs")
    job = jobs[0]
    error = int(_number(job, "jobs[0].error", "error"))
    if error:
        raise FioParseError(f"fio reported error {error} ({os.strerror(error)}) for job {job.get('jobname')}")
    read = _get(job, "jobs[0].read", "read")
    total_ios = int(_number(read, "jobs[0].read.total_ios", "total_ios"))
    if total_ios == 0:
        raise FioParseError("fio completed no reads (jobs[0].read.total_ios is 0): see its stderr")
    options = _get(job, "jobs[0].job options", "job options")
    # fio's default iodepth is 1; job options are strings in fio's JSON.
    requested = int(str(options.get("iodepth", "1")) if isinstance(options, dict) else "1")
    levels_raw = _get(job, "jobs[0].iodepth_level", "iodepth_level")
    if not isinstance(levels_raw, dict):
        raise FioParseError("fio JSON jobs[0].iodepth_level is not an object")
    levels = {str(k): _number(levels_raw, f"jobs[0].iodepth_level.{k}", k) for k in levels_raw}
    bucket = depth_bucket(requested)
    if bucket not in levels:
        raise FioParseError(f"fio JSON jobs[0].iodepth_level has no bucket {bucket!r}: {sorted(levels)}")
    pct = "jobs[0].read.clat_ns.percentile"

    def ms(ns: float) -> float:
        return ns / 1e6

    return FioResult(
        schema_version=SCHEMA_VERSION,
        fio_version=str(_get(data, "fio version", "fio version")),
        job_name=str(_get(job, "jobs[0].jobname", "jobname")),
        requested_iodepth=requested,
        read_iops=_number(read, "jobs[0].read.iops", "iops"),
        read_bw_mib_s=_number(read, "jobs[0].read.bw_bytes", "bw_bytes") / (1 << 20),
        read_io_bytes=int(_number(read, "jobs[0].read.io_bytes", "io_bytes")),
        read_total_ios=total_ios,
        read_runtime_ms=int(_number(read, "jobs[0].read.runtime", "runtime")),
        p50_clat_ms=ms(_number(read, f"{pct}.50.000000", "clat_ns", "percentile", "50.000000")),
        p99_clat_ms=ms(_number(read, f"{pct}.99.000000", "clat_ns", "percentile", "99.000000")),
        p999_clat_ms=ms(_number(read, f"{pct}.99.900000", "clat_ns", "percentile", "99.900000")),
        max_clat_ms=ms(_number(read, "jobs[0].read.clat_ns.max", "clat_ns", "max")),
        max_lat_ms=ms(_number(read, "jobs[0].read.lat_ns.max", "lat_ns", "max")),
        iodepth_level=levels,
        achieved_depth_bucket=bucket,
        achieved_depth_share_pct=levels[bucket],
        fio_messages=messages,
    )


# --- judge ------------------------------------------------------------------------------------------------


def judge(result: FioResult, thresholds: Thresholds | None, min_depth_share_pct: float = 90.0) -> list[str]:
    """Reasons the run fails (empty: PASS). A depth not reached comes first: the other figures then
    describe a lower depth than the one asked for."""
    qd = f"QD{result.requested_iodepth}"
    reasons: list[str] = []
    if result.achieved_depth_share_pct < min_depth_share_pct:
        reasons.append(
            f"{qd}: the requested depth was not reached: {result.achieved_depth_share_pct:.1f}% of the time at "
            f"depth {result.achieved_depth_bucket} (need {min_depth_share_pct:.1f}%); "
            "the figures describe a lower depth"
        )
    if thresholds is None:
        return reasons
    if thresholds.min_iops is not None and result.read_iops < thresholds.min_iops:
        reasons.append(f"{qd}: {result.read_iops:,.0f} IOPS is below the minimum {thresholds.min_iops:,.0f}")
    if thresholds.max_p999_clat_ms is not None and result.p999_clat_ms > thresholds.max_p999_clat_ms:
        reasons.append(
            f"{qd}: p99.9 completion latency {result.p999_clat_ms:.3f} ms is above the maximum "
            f"{thresholds.max_p999_clat_ms:g} ms"
        )
    if thresholds.max_clat_ms is not None and result.max_clat_ms > thresholds.max_clat_ms:
        reasons.append(
            f"{qd}: max completion latency {result.max_clat_ms:.3f} ms is above the maximum "
            f"{thresholds.max_clat_ms:g} ms"
        )
    return reasons


# --- run --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Completed:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool


def _signal_group(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    # The child leads its own session (start_new_session), so its group id is its pid: this reaches fio's
    # job processes too, and nothing else.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def run_bounded(argv: list[str], timeout_s: float, grace_s: float = _TERM_GRACE_S) -> _Completed:
    """Run argv; after timeout_s SIGTERM its process group, after grace_s more SIGKILL it."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return _Completed(proc.returncode, out, err, timed_out=False)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            out, err = proc.communicate()
        return _Completed(proc.returncode, out, err, timed_out=True)
    except BaseException:
        # Ctrl-C or anything else: fio is in its own session and would outlive us.
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise


def identity_ranges(
    size_bytes: int, ranges: int = IDENTITY_RANGES, length: int = IDENTITY_RANGE_BYTES
) -> list[tuple[int, int]]:
    """The fixed ranges hashed for the target's identity: `ranges` starts spread evenly from 0 to the last
    `length` bytes, aligned down to 4 KiB (O_DIRECT), clipped to the file, overlaps merged. Fixed by the size alone,
    so before and after read the same bytes."""
    if size_bytes <= 0:
        return []
    last = max(0, size_bytes - length) // BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES
    starts = sorted({(last * i // max(1, ranges - 1)) // BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES for i in range(ranges)})
    out: list[tuple[int, int]] = []
    for start in starts:
        end = size_bytes if start == last else min(size_bytes, start + length)
        if out and start <= out[-1][0] + out[-1][1]:
            out[-1] = (out[-1][0], end - out[-1][0])
        else:
            out.append((start, end - start))
    return out


def _read_direct(fd: int, offset: int, length: int) -> bytes:
    """`length` bytes at `offset` with O_DIRECT: an aligned buffer, whole blocks, the tail past EOF cut off."""
    padded = -(-length // BLOCK_SIZE_BYTES) * BLOCK_SIZE_BYTES
    buf = mmap.mmap(-1, padded)  # page-aligned, as O_DIRECT needs
    try:
        got = 0
        while got < length:
            view = memoryview(buf)[got:]
            n = os.preadv(fd, [view], offset + got)
            view.release()
            if n == 0:
                break
            got += n
        return bytes(buf[: min(got, length)])
    finally:
        buf.close()


def target_state(path: Path) -> TargetState:
    """The target's identity from its metadata and IDENTITY_RANGES ranges read with O_DIRECT: the page cache is
    neither filled nor emptied (a whole-file hash pulled every byte of the served file through it, twice a run).
    O_DIRECT was checked before this is called (`_direct_io_problem`)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    try:
        st = os.fstat(fd)
        ranges = identity_ranges(st.st_size)
        digest = hashlib.sha256()
        for offset, length in ranges:
            digest.update(_read_direct(fd, offset, length))
    finally:
        os.close(fd)
    return TargetState(
        sampled_sha256=digest.hexdigest(),
        size_bytes=st.st_size,
        mtime_ns=st.st_mtime_ns,
        device_major_minor=f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
        inode=st.st_ino,
        ctime_ns=st.st_ctime_ns,
        sampled_ranges=[[o, n] for o, n in ranges],
    )


def describe_change(before: TargetState, after: TargetState) -> str:
    """What differs between two identities, by name (the summary line a FAIL carries)."""
    names = ("device_major_minor", "inode", "size_bytes", "mtime_ns", "ctime_ns", "sampled_sha256")
    changed = [
        f"{n} {getattr(before, n)} -> {getattr(after, n)}" for n in names if getattr(before, n) != getattr(after, n)
    ]
    return ", ".join(changed) or "no field differs"


def _direct_io_problem(path: Path) -> str | None:
    """None when one aligned 4 KiB O_DIRECT read works; otherwise why not (read-only: O_RDONLY)."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return "this platform has no O_DIRECT"
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError as e:
        return f"cannot open {path} with O_DIRECT ({e.strerror}): its file system does not support direct I/O"
    buf = mmap.mmap(-1, BLOCK_SIZE_BYTES)  # page-aligned, as O_DIRECT needs
    try:
        os.preadv(fd, [buf], 0)
    except OSError as e:
        return f"an O_DIRECT read of {path} failed ({e.strerror}): its file system does not support direct I/O"
    finally:
        buf.close()
        os.close(fd)
    return None


def _fio_capability(fio: str) -> tuple[str | None, str | None]:
    """(fio --version, why it cannot run this probe or None)."""
    try:
        version = run_bounded([fio, "--version"], 30.0)
        engines = run_bounded([fio, "--enghelp"], 30.0)
    except OSError as e:
        return None, f"cannot run {fio}: {e.strerror}"
    if version.exit_code != 0 or version.timed_out:
        return None, f"{fio} --version failed (exit {version.exit_code}): {version.stderr.strip()[-200:]}"
    if "libaio" not in engines.stdout.split():
        return version.stdout.strip(), f"{fio} has no libaio engine (fio --enghelp): install Debian's fio package"
    return version.stdout.strip(), None


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no stderr)"


def _run_depth(
    fio: str,
    target: Path,
    iodepth: int,
    runtime_s: int,
    size_bytes: int | None,
    seed: int,
    timeout_s: float,
    run_dir: Path,
    thresholds: Thresholds | None,
    min_depth_share_pct: float,
) -> DepthRun:
    qd = f"QD{iodepth}"
    argv = build_fio_argv(target, iodepth, runtime_s, size_bytes, seed, fio=fio)
    exit_code: int | None = None
    timed_out = False
    parsed: FioResult | None = None
    reason: str | None = None
    started = time.monotonic()
    try:
        run_dir.mkdir(parents=True)
        (run_dir / "command.txt").write_text(shlex.join(argv) + "\n")
        done = run_bounded(argv, timeout_s)
        exit_code, timed_out = done.exit_code, done.timed_out
        (run_dir / "stdout.json").write_text(done.stdout)
        (run_dir / "stderr.txt").write_text(done.stderr)
        (run_dir / "exit_code.txt").write_text(f"{done.exit_code}\n")
        if done.timed_out:
            reason = f"{qd}: fio did not finish within {timeout_s:g} s and was terminated (exit {done.exit_code})"
        elif done.exit_code != 0:
            reason = f"{qd}: fio exited with status {done.exit_code}: {_last_line(done.stderr)}"
        else:
            parsed = parse_fio_json(done.stdout)
    except FioParseError as e:
        reason = f"{qd}: {e}"
    except Exception as e:  # recorded, never raised: a probe does not take the run down
        reason = f"{qd}: {type(e).__name__}: {e}"
    duration_s = round(time.monotonic() - started, 3)
    reasons = judge(parsed, thresholds, min_depth_share_pct) if parsed is not None else [str(reason)]
    run = DepthRun(
        schema_version=SCHEMA_VERSION,
        iodepth=iodepth,
        status="successful" if parsed is not None else "failed",
        reason=reason,
        artifact_dir=str(run_dir),
        argv=argv,
        exit_code=exit_code,
        timed_out=timed_out,
        duration_s=duration_s,
        fio=parsed,
        thresholds=thresholds,
        verdict="PASS" if parsed is not None and not reasons else "FAIL",
        reasons=reasons,
    )
    with contextlib.suppress(OSError):  # the whole-probe result.json carries the same record
        _write_json(run_dir / "result.json", asdict(run))
    return run


def _check_inputs(
    target: Path,
    data_dirs: list[Path],
    out_dir: Path,
    depths: Sequence[int],
    runtime_s: int,
    size_bytes: int | None,
    thresholds: dict[int, Thresholds] | None,
) -> None:
    if not depths:
        raise ProbeInputError("no depth given: pass --depth, e.g. --depth 1 --depth 64")
    if len(set(depths)) != len(depths):
        raise ProbeInputError(f"a depth is given twice: {list(depths)}")
    for d in depths:
        build_fio_argv(target, d, runtime_s, size_bytes, 0)  # range checks
    extra = sorted(set(thresholds or {}) - set(depths))
    if extra:
        raise ProbeInputError(f"thresholds given for depth {extra} which is not run: add --depth {extra[0]}")
    check_target(target, data_dirs)
    if size_bytes is not None and size_bytes > target.stat().st_size:
        raise ProbeInputError(
            f"--size {size_bytes} is larger than {target} ({target.stat().st_size} bytes): fio would read past its end"
        )
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ProbeInputError(f"output directory {out_dir} exists and is not empty: give a new --out directory")
    resolved, out = target.resolve(), out_dir.resolve()
    if resolved == out / "result.json" or any(resolved.is_relative_to(out / f"qd{d}") for d in depths):
        raise ProbeInputError(f"target {target} is where the probe writes its artifacts: give another --out")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_io_probe(
    target: Path,
    data_dirs: list[Path],
    out_dir: Path,
    depths: Sequence[int] = (1, 64),
    runtime_s: int = 10,
    seed: int = 1234,
    thresholds: dict[int, Thresholds] | None = None,
    timeout_s: float | None = None,
    *,
    size_bytes: int | None = None,
    min_depth_share_pct: float = 90.0,
) -> IoProbeResult:
    """Run fio at each depth on target; bad input raises ProbeInputError before anything runs or is written.

    timeout_s bounds each fio run (default: runtime + 60 s); then SIGTERM, then SIGKILL.
    """
    _check_inputs(target, data_dirs, out_dir, depths, runtime_s, size_bytes, thresholds)
    timeout = float(timeout_s) if timeout_s is not None else runtime_s + _DEFAULT_TIMEOUT_MARGIN_S
    resolved = target.resolve(strict=True)
    started_at = _now()
    fio = shutil.which("fio")
    fio_version: str | None = None
    skip: str | None = FIO_NOT_INSTALLED if fio is None else None
    if fio is not None:
        fio_version, skip = _fio_capability(fio)
    if skip is None:
        skip = _direct_io_problem(resolved)

    def finish(**kw: Any) -> IoProbeResult:
        fields: dict[str, Any] = {
            "schema_version": RESULT_SCHEMA_VERSION,
            "target": str(target),
            "target_resolved": str(resolved),
            "data_dirs": [str(d) for d in data_dirs],
            "out_dir": str(out_dir),
            "fio_path": fio,
            "fio_version": fio_version,
            "depths": list(depths),
            "runtime_s": runtime_s,
            "seed": seed,
            "size_bytes": size_bytes,
            "timeout_s": timeout,
            "started_at_utc": started_at,
            "finished_at_utc": _now(),
        }
        result = IoProbeResult(**fields, **kw)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            _write_json(out_dir / "result.json", asdict(result))
        except OSError as e:
            why = f"could not write {out_dir / 'result.json'}: {e}"
            result = IoProbeResult(
                **fields,
                **{**kw, "status": "failed", "verdict": "FAIL", "reasons": [*kw["reasons"], why]},
            )
        return result

    if skip is not None or fio is None:
        return finish(
            status="skipped",
            reason=skip,
            verdict=None,
            reasons=[],
            target_before=None,
            target_after=None,
            target_unchanged=True,
            runs=[],
        )

    failures: list[str] = []
    try:
        before: TargetState | None = target_state(resolved)
    except OSError as e:
        before = None
        failures.append(f"could not read the target before the probe: {e}")
    runs: list[DepthRun] = []
    if before is not None:
        for d in depths:
            runs.append(
                _run_depth(
                    fio,
                    resolved,
                    d,
                    runtime_s,
                    size_bytes,
                    seed,
                    timeout,
                    out_dir / f"qd{d}",
                    (thresholds or {}).get(d),
                    min_depth_share_pct,
                )
            )
    try:
        after: TargetState | None = target_state(resolved)
    except OSError as e:
        after = None
        failures.append(f"could not read the target after the probe: {e}")
    unchanged = before is not None and after is not None and before == after
    if before is not None and after is not None and not unchanged:
        failures.append(f"the target changed during the probe: {describe_change(before, after)}")

    failures += [r.reason for r in runs if r.status == "failed" and r.reason]
    reasons = failures + [reason for r in runs if r.status == "successful" for reason in r.reasons]
    status: Status = "failed" if failures else "successful"
    return finish(
        status=status,
        reason=failures[0] if failures else None,
        verdict="FAIL" if reasons else "PASS",
        reasons=reasons,
        target_before=before,
        target_after=after,
        target_unchanged=unchanged,
        runs=runs,
    )


# --- report -----------------------------------------------------------------------------------------------


def format_summary(result: IoProbeResult) -> str:
    head = f"fio 4 KiB random read, O_DIRECT, libaio, {result.runtime_s} s per depth: {result.target_resolved}"
    lines = [head]
    if result.status == "skipped":
        lines.append(f"SKIPPED: {result.reason}")
        return "\n".join(lines) + "\n"
    b = result.target_before
    if b is not None:
        state = "unchanged" if result.target_unchanged else "CHANGED"
        lines.append(
            f"target: {b.size_bytes / (1 << 20):,.1f} MiB on device {b.device_major_minor}, "
            f"inode {b.inode}, sampled sha256 {b.sampled_sha256[:16]}..., {state} after the probe"
        )
    cols = ["depth", "IOPS", "MiB/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "at depth %", "verdict"]
    rows: list[list[str]] = []
    for r in result.runs:
        f = r.fio
        if f is None:
            rows.append([f"QD{r.iodepth}", *["-"] * 7, "FAIL"])
            continue
        rows.append(
            [
                f"QD{r.iodepth}",
                f"{f.read_iops:,.0f}",
                f"{f.read_bw_mib_s:.1f}",
                f"{f.p50_clat_ms:.3f}",
                f"{f.p99_clat_ms:.3f}",
                f"{f.p999_clat_ms:.3f}",
                f"{f.max_clat_ms:.3f}",
                f"{f.achieved_depth_share_pct:.1f} ({f.achieved_depth_bucket})",
                r.verdict,
            ]
        )
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]

    def fmt(row: list[str]) -> str:
        first = row[0].ljust(widths[0])
        return "  ".join([first, *(v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True))]).rstrip()

    lines += [fmt(cols), *(fmt(row) for row in rows)]
    lines += [f"  - {reason}" for reason in result.reasons]
    lines.append(f"result: {result.verdict} (run {result.status}; artifacts in {result.out_dir})")
    return "\n".join(lines) + "\n"


# --- CLI --------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line on stderr, exit 2
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def _depth_value(text: str) -> tuple[int, float]:
    depth, sep, value = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(depth), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected DEPTH:VALUE such as 64:5000, got {text!r}") from None


def _thresholds(a: argparse.Namespace) -> dict[int, Thresholds]:
    fields: dict[int, dict[str, float]] = {}
    for name, pairs in (("min_iops", a.min_iops), ("max_p999_clat_ms", a.max_p999_ms), ("max_clat_ms", a.max_ms)):
        for depth, value in pairs or []:
            fields.setdefault(depth, {})[name] = value
    return {d: Thresholds(**kw) for d, kw in fields.items()}


def probe_error(prog: str, out_dir: Path, error: BaseException) -> int:
    """A probe that broke: the traceback goes to OUT/probe-error.txt (where it can be written), one line with what
    to do to stderr, and EXIT_PROBE_ERROR, which no verdict uses."""
    where = out_dir / "probe-error.txt"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        where.write_text("".join(traceback.format_exception(error)))
        kept = f"traceback in {where}"
    except OSError:
        kept = "traceback not kept: the output directory is not writable"
    print(
        f"{prog}: the probe broke ({type(error).__name__}: {error}); no verdict on the storage. "
        f"Rerun it; if it breaks again, report it with the {kept}",
        file=sys.stderr,
    )
    return EXIT_PROBE_ERROR


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m probes.io", description="fio 4 KiB random-read probe (QD1 and QD64), read-only")
    p.add_argument("--target", required=True, type=Path, help="a model weight or data file the serving stack reads")
    p.add_argument("--data-dir", required=True, action="append", type=Path, help="directory the target must be in")
    p.add_argument("--out", required=True, type=Path, help="new or empty directory for the artifacts")
    p.add_argument("--runtime", type=int, default=10, help="seconds per depth (default 10)")
    p.add_argument("--depth", type=int, action="append", help="iodepth; repeat (default 1 and 64)")
    p.add_argument("--seed", type=int, default=1234, help="fio --randseed (default 1234)")
    p.add_argument("--size", type=int, help="bytes of the file to read (default: all of it)")
    p.add_argument("--timeout", type=float, help="seconds before a fio run is terminated (default runtime + 60)")
    p.add_argument("--min-iops", type=_depth_value, action="append", metavar="DEPTH:IOPS")
    p.add_argument("--max-p999-ms", type=_depth_value, action="append", metavar="DEPTH:MS")
    p.add_argument("--max-ms", type=_depth_value, action="append", metavar="DEPTH:MS")
    a = p.parse_args(argv)
    try:
        result = run_io_probe(
            a.target,
            a.data_dir,
            a.out,
            depths=tuple(a.depth or (1, 64)),
            runtime_s=a.runtime,
            seed=a.seed,
            thresholds=_thresholds(a),
            timeout_s=a.timeout,
            size_bytes=a.size,
        )
    except ProbeInputError as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a broken probe is not a finding about the storage: one line, its own exit status
        return probe_error(p.prog, a.out, e)
    sys.stdout.write(format_summary(result))
    if result.status == "skipped":
        return 3
    return 0 if result.verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
