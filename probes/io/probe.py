"""fio 4 KiB random-read probe: is the storage under a served file slow for serial page faults?

Reads a file the serving stack reads (model weights, an mmap'd table) with fio at QD1 and QD64, O_DIRECT,
libaio. QD1 is what a single thread faulting pages in one at a time sees; QD64 is what the drive can do. On
the reference NVMe that is ~4.5k IOPS against ~36k IOPS; a drive with a 970 ms max latency stalls every
reader behind it. fio runs with `--readonly` and `--invalidate=0` (O_DIRECT needs no cold cache, and dropping the
served file's cached pages would take from vLLM what the RAM budget keeps for it). The target's identity (device,
inode, size, mtime, ctime and a sha256 of a few fixed 64 KiB ranges read with O_DIRECT) is compared before and
after, and a run that changed the target fails: the file is never read whole, so the page cache is left as it was.

  python -m probes.io.probe --target FILE --data-dir DIR --out DIR [--depth 1 --depth 64] [--runtime 10]
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
import json
import mmap
import os
import shlex
import shutil
import stat
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from probes.base import progress
from probes.base.bounded import run_bounded
from probes.io.fio import (
    BLOCK_SIZE_BYTES,
    FioParseError,
    FioResult,
    ProbeInputError,
    Thresholds,
    build_fio_argv,
    judge,
    parse_fio_json,
)
from probes.io.target import TargetState, describe_change, target_state

SCHEMA_VERSION = 1
# The whole probe's result: 2 since the target's identity is sampled (TargetState), not a whole-file sha256.
RESULT_SCHEMA_VERSION = 2
FIO_NOT_INSTALLED = "fio is not installed: apt-get install fio"
# Seconds fio gets to exit after SIGTERM before SIGKILL; and beyond --runtime before SIGTERM.
_TERM_GRACE_S = 5.0
_DEFAULT_TIMEOUT_MARGIN_S = 60.0
# Exit status of a probe that broke (an exception in the probe, not a finding about the storage).
EXIT_PROBE_ERROR = 4

Status = Literal["successful", "failed", "skipped"]
Verdict = Literal["PASS", "FAIL"]


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


# --- run --------------------------------------------------------------------------------------------------


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
    fio, fio_version, skip = _fio_readiness(resolved)

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
    }
    if skip is not None or fio is None:
        return _finish(
            fields,
            status="skipped",
            reason=skip,
            verdict=None,
            reasons=[],
            target_before=None,
            target_after=None,
            target_unchanged=True,
            runs=[],
        )
    before, failures = _read_target(resolved, "before")
    runs: list[DepthRun] = []
    if before is not None:
        for i, d in enumerate(depths, 1):
            progress.say(f"fio QD{d} random reads: depth {i} of {len(depths)}, {runtime_s:g} s")
            qd_out = out_dir / f"qd{d}"
            limits = (thresholds or {}).get(d)
            runs.append(
                _run_depth(fio, resolved, d, runtime_s, size_bytes, seed, timeout, qd_out, limits, min_depth_share_pct)
            )
    after, after_failures = _read_target(resolved, "after")
    failures += after_failures
    unchanged = before is not None and after is not None and before == after
    if before is not None and after is not None and not unchanged:
        failures.append(f"the target changed during the probe: {describe_change(before, after)}")
    failures += [r.reason for r in runs if r.status == "failed" and r.reason]
    reasons = failures + [reason for r in runs if r.status == "successful" for reason in r.reasons]
    return _finish(
        fields,
        status="failed" if failures else "successful",
        reason=failures[0] if failures else None,
        verdict="FAIL" if reasons else "PASS",
        reasons=reasons,
        target_before=before,
        target_after=after,
        target_unchanged=unchanged,
        runs=runs,
    )


def _fio_readiness(resolved: Path) -> tuple[str | None, str | None, str | None]:
    """(where fio is, its version, why the probe cannot run here or None): whatever stops it before a run."""
    fio = shutil.which("fio")
    fio_version: str | None = None
    skip: str | None = FIO_NOT_INSTALLED if fio is None else None
    if fio is not None:
        fio_version, skip = _fio_capability(fio)
    if skip is None:
        skip = _direct_io_problem(resolved)
    return fio, fio_version, skip


def _read_target(resolved: Path, when: str) -> tuple[TargetState | None, list[str]]:
    """The target's identity, or the failure that says it could not be read (before or after the probe)."""
    try:
        return target_state(resolved), []
    except OSError as e:
        return None, [f"could not read the target {when} the probe: {e}"]


def _finish(fields: Mapping[str, Any], **kw: Any) -> IoProbeResult:
    """The probe's result, written to OUT/result.json; a write that fails fails the probe, saying so."""
    fields = {**fields, "finished_at_utc": _now()}
    out_dir = Path(fields["out_dir"])
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
    p = _Parser(prog="python -m probes.io.probe", description="fio 4 KiB random-read probe (QD1 and QD64), read-only")
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
