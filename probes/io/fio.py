"""fio for the I/O probe: its argv (4 KiB random reads, O_DIRECT, libaio, read-only, the target's cached pages
left alone), its JSON output read into one result per depth, and the verdict against the thresholds."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
BLOCK_SIZE_BYTES = 4096
# fio's iodepth_level buckets (fio 3.33): "16" covers depths 16..31, ">=64" everything from 64 up.
_DEPTH_BUCKETS = (1, 2, 4, 8, 16, 32)


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
