"""The fio random-read probe (probes/io/probe.py): refusals, fio absent, real runs, summaries, the target's identity.

fio's argv, parsing and judging are in test_fio.py, run_bounded in test_bounded.py. Summary tests read outputs
captured on this machine (tests/fixtures/fio-3.33/README.md). The tests that run the real fio read a small temp
file for about a second per depth; they skip only where fio is absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from probes.io import probe
from probes.io import target as probe_target
from probes.io.fio import (
    FioResult,
    ProbeInputError,
    Thresholds,
    build_fio_argv,
    judge,
    parse_fio_json,
)
from probes.io.probe import FIO_NOT_INSTALLED, IoProbeResult, check_target, format_summary, main, run_io_probe

FIO_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "fio-3.33"
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed: apt-get install fio")


def _text(name: str) -> str:
    return (FIO_FIXTURES / name).read_text()


def _parsed(name: str) -> FioResult:
    return parse_fio_json(_text(name))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.fixture
def weights(data_dir: Path) -> Path:
    """A 16 MiB file of random bytes standing in for model weights."""
    f = data_dir / "model-00001-of-00001.safetensors"
    f.write_bytes(os.urandom(16 << 20))
    return f


# --- refusals: one clear line, nothing run, nothing written ----------------------------------------------


def _a_block_device() -> Path | None:
    for candidate in ("/dev/loop0", "/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/xvda"):
        try:
            if stat.S_ISBLK(Path(candidate).stat().st_mode):
                return Path(candidate)
        except OSError:
            continue
    return None


def test_refuses_a_missing_target(data_dir: Path) -> None:
    with pytest.raises(ProbeInputError, match=r"^target .*/nope\.bin does not exist: give a model weight"):
        check_target(data_dir / "nope.bin", [data_dir])


def test_refuses_a_dangling_symlink(data_dir: Path) -> None:
    (data_dir / "link").symlink_to(data_dir / "gone")
    with pytest.raises(ProbeInputError, match="does not exist \\(a symlink whose destination is missing\\)"):
        check_target(data_dir / "link", [data_dir])


def test_refuses_a_block_device_even_inside_an_allowed_directory() -> None:
    dev = _a_block_device()
    if dev is None:
        pytest.skip("no block device under /dev on this machine")
    with pytest.raises(ProbeInputError, match=f"^refusing block device {dev}: the probe reads files only"):
        check_target(dev, [Path("/dev")])


def test_refuses_a_character_device() -> None:
    with pytest.raises(ProbeInputError, match=r"^refusing character device /dev/null"):
        check_target(Path("/dev/null"), [Path("/dev")])


def test_refuses_a_directory(data_dir: Path) -> None:
    (data_dir / "sub").mkdir()
    with pytest.raises(ProbeInputError, match="is a directory: give a model weight or data file"):
        check_target(data_dir / "sub", [data_dir])


def test_refuses_a_file_outside_the_data_dirs(tmp_path: Path, data_dir: Path) -> None:
    other = tmp_path / "elsewhere.bin"
    other.write_bytes(b"x" * 8192)
    with pytest.raises(ProbeInputError, match=r"is outside the allowed data directories \(.*/data\): pass the"):
        check_target(other, [data_dir])


def test_refuses_a_symlink_in_the_data_dir_that_points_outside(tmp_path: Path, data_dir: Path) -> None:
    other = tmp_path / "secret.bin"
    other.write_bytes(b"x" * 8192)
    (data_dir / "weights.bin").symlink_to(other)
    with pytest.raises(ProbeInputError, match=r"weights\.bin resolves to .*/secret\.bin, which is outside"):
        check_target(data_dir / "weights.bin", [data_dir])


def test_accepts_a_file_or_a_symlink_that_stays_inside_any_data_dir(
    tmp_path: Path, data_dir: Path, weights: Path
) -> None:
    (data_dir / "current").symlink_to(weights)
    (tmp_path / "tables").mkdir()
    check_target(data_dir / "current", [data_dir])  # raises if refused
    check_target(weights, [tmp_path / "tables", data_dir])


def test_refuses_an_empty_file(data_dir: Path) -> None:
    (data_dir / "empty.bin").touch()
    with pytest.raises(ProbeInputError, match=r"is empty \(0 bytes\): give a file with data in it"):
        check_target(data_dir / "empty.bin", [data_dir])


def test_refuses_a_file_smaller_than_one_read(data_dir: Path) -> None:
    # Real fio exits 1 on it ("blocksize is larger than data set range"): see the fixtures.
    (data_dir / "tiny.bin").write_bytes(b"x" * 100)
    with pytest.raises(ProbeInputError, match="is 100 bytes, smaller than one 4 KiB read"):
        check_target(data_dir / "tiny.bin", [data_dir])


def test_refuses_a_missing_data_dir(tmp_path: Path, weights: Path) -> None:
    with pytest.raises(ProbeInputError, match=r"data directory .*/nodir does not exist"):
        check_target(weights, [tmp_path / "nodir"])
    with pytest.raises(ProbeInputError, match="no data directory given"):
        check_target(weights, [])


def _bad_inputs(tmp_path: Path, data_dir: Path, weights: Path) -> dict[str, tuple[dict[str, Any], str]]:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x" * 8192)
    (data_dir / "escape").symlink_to(outside)
    (data_dir / "empty.bin").touch()
    full_out = tmp_path / "used-out"
    full_out.mkdir()
    (full_out / "result.json").write_text("{}")
    return {
        "missing": ({"target": data_dir / "nope.bin"}, "does not exist"),
        "outside": ({"target": outside}, "outside the allowed data directories"),
        "symlink-outside": ({"target": data_dir / "escape"}, "resolves to"),
        "empty": ({"target": data_dir / "empty.bin"}, "is empty"),
        "char-device": ({"target": Path("/dev/zero")}, "refusing character device"),
        "threshold-depth-not-run": ({"thresholds": {32: Thresholds(min_iops=1)}}, r"depth \[32\] which is not run"),
        "depth-twice": ({"depths": (1, 1)}, "a depth is given twice"),
        "no-depth": ({"depths": ()}, "no depth given"),
        "depth-zero": ({"depths": (0,)}, "iodepth must be at least 1"),
        "size-beyond-end": ({"size_bytes": 32 << 20}, "fio would read past its end"),
        "out-not-empty": ({"out_dir": full_out}, "exists and is not empty"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "outside",
        "symlink-outside",
        "empty",
        "char-device",
        "threshold-depth-not-run",
        "depth-twice",
        "no-depth",
        "depth-zero",
        "size-beyond-end",
        "out-not-empty",
    ],
)
def test_bad_input_raises_before_anything_is_written(
    case: str, tmp_path: Path, data_dir: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_subprocess(*a: object, **k: object) -> None:
        raise AssertionError("a subprocess ran on bad input")

    monkeypatch.setattr(probe, "run_bounded", no_subprocess)
    overrides, message = _bad_inputs(tmp_path, data_dir, weights)[case]
    kwargs: dict[str, Any] = {"target": weights, "data_dirs": [data_dir], "out_dir": tmp_path / "out"}
    kwargs.update(overrides)
    before = _sha256(weights)
    with pytest.raises(ProbeInputError, match=message) as info:
        run_io_probe(**kwargs)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()
    if case == "out-not-empty":
        assert sorted(p.name for p in (tmp_path / "used-out").iterdir()) == ["result.json"]
    assert _sha256(weights) == before


def test_cli_bad_input_is_one_line_on_stderr_and_exit_2(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--target", str(data_dir / "nope.bin"), "--data-dir", str(data_dir), "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("python -m probes.io.probe: target ") and "does not exist" in err
    assert not (tmp_path / "o").exists()


def test_cli_bad_threshold_syntax_is_one_line_and_exit_2(
    tmp_path: Path, weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--target", str(weights), "--data-dir", str(weights.parent), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--min-iops", "64"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "expected DEPTH:VALUE such as 64:5000, got '64'" in err


# --- fio absent ---------------------------------------------------------------------------------------------


def test_fio_absent_is_skipped_with_the_reason(
    tmp_path: Path, data_dir: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    out = tmp_path / "out"
    result = run_io_probe(weights, [data_dir], out, runtime_s=1)
    assert result.status == "skipped"
    assert result.reason == FIO_NOT_INSTALLED == "fio is not installed: apt-get install fio"
    assert result.verdict is None
    assert result.runs == []
    assert result.fio_path is None
    # The skip is recorded; nothing ran.
    assert [p.name for p in out.iterdir()] == ["result.json"]
    assert json.loads((out / "result.json").read_text())["status"] == "skipped"
    assert format_summary(result).splitlines()[-1] == "SKIPPED: fio is not installed: apt-get install fio"


def test_cli_fio_absent_exits_3(
    tmp_path: Path, weights: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-such-dir"))
    rc = main(["--target", str(weights), "--data-dir", str(weights.parent), "--out", str(tmp_path / "o")])
    assert rc == 3
    assert "SKIPPED: fio is not installed: apt-get install fio" in capsys.readouterr().out


# --- real fio runs ------------------------------------------------------------------------------------------


def _skip_without_o_direct(path: Path) -> None:
    problem = probe._direct_io_problem(path)
    if problem is not None:
        pytest.skip(problem)


@needs_fio
def test_real_run_reads_at_both_depths_and_leaves_the_target_unchanged(
    tmp_path: Path, data_dir: Path, weights: Path
) -> None:
    _skip_without_o_direct(weights)
    sha_before, st_before = _sha256(weights), weights.stat()
    out = tmp_path / "out"
    result = run_io_probe(weights, [data_dir], out, runtime_s=1, thresholds={64: Thresholds(min_iops=1)})
    st_after = weights.stat()

    assert result.status == "successful", result.reasons
    assert result.verdict == "PASS"
    assert result.target_unchanged is True
    assert result.target_before is not None and result.target_after is not None
    assert result.target_before == result.target_after
    assert sha_before == _sha256(weights)
    assert result.target_before.inode == st_before.st_ino
    assert result.target_before.size_bytes == 16 << 20
    assert (st_before.st_mtime_ns, st_before.st_size) == (st_after.st_mtime_ns, st_after.st_size)
    assert result.fio_version is not None and result.fio_version.startswith("fio-")

    fio = shutil.which("fio")
    assert fio is not None
    for run, depth in zip(result.runs, (1, 64), strict=True):
        d = out / f"qd{depth}"
        assert run.iodepth == depth and run.status == "successful" and run.exit_code == 0
        assert sorted(p.name for p in d.iterdir()) == [
            "command.txt",
            "exit_code.txt",
            "result.json",
            "stderr.txt",
            "stdout.json",
        ]
        command = (d / "command.txt").read_text()
        assert command == shlex.join(build_fio_argv(weights, depth, 1, None, 1234, fio=fio)) + "\n"
        assert " --readonly " in command
        assert (d / "exit_code.txt").read_text() == "0\n"
        assert parse_fio_json((d / "stdout.json").read_text()) == run.fio
        assert json.loads((d / "result.json").read_text())["verdict"] == "PASS"
        assert run.fio is not None and run.fio.read_total_ios > 0 and run.fio.requested_iodepth == depth
        assert run.fio.fio_version == result.fio_version  # `fio --version` and the JSON agree

    qd1, qd64 = result.runs[0].fio, result.runs[1].fio
    assert qd1 is not None and qd64 is not None
    assert qd64.achieved_depth_bucket == ">=64"
    assert 90.0 <= qd64.achieved_depth_share_pct <= 100.0
    whole = json.loads((out / "result.json").read_text())
    assert whole["status"] == "successful"
    assert whole["target_unchanged"] is True
    assert whole["runs"][1]["fio"]["achieved_depth_share_pct"] == qd64.achieved_depth_share_pct

    summary = format_summary(result)
    rows = {line.split()[0]: line.split() for line in summary.splitlines() if line.startswith("QD")}
    assert rows["QD64"][7:] == [f"{qd64.achieved_depth_share_pct:.1f}", "(>=64)", "PASS"]
    assert rows["QD1"][1] == f"{qd1.read_iops:,.0f}"
    assert "unchanged after the probe" in summary
    assert summary.splitlines()[-1].startswith("result: PASS (run successful;")


@needs_fio
def test_cli_real_run_below_minimum_iops_exits_1(
    tmp_path: Path, weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skip_without_o_direct(weights)
    argv = ["--target", str(weights), "--data-dir", str(weights.parent), "--out", str(tmp_path / "o")]
    rc = main([*argv, "--runtime", "1", "--depth", "1", "--min-iops", "1:1e12"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "IOPS is below the minimum 1,000,000,000,000" in out
    assert out.splitlines()[-1].startswith("result: FAIL (run successful;")


@needs_fio
def test_real_fio_past_its_timeout_is_terminated_and_recorded(tmp_path: Path, data_dir: Path, weights: Path) -> None:
    _skip_without_o_direct(weights)
    t0 = time.monotonic()
    result = run_io_probe(weights, [data_dir], tmp_path / "out", depths=(1,), runtime_s=60, timeout_s=1)
    assert time.monotonic() - t0 < 20
    run = result.runs[0]
    assert run.timed_out and run.status == "failed" and run.fio is None
    assert run.reason is not None and run.reason.startswith("QD1: fio did not finish within 1 s and was terminated")
    assert result.status == "failed" and result.verdict == "FAIL"
    assert result.reasons == [run.reason]
    assert result.target_unchanged is True
    assert (tmp_path / "out" / "qd1" / "exit_code.txt").exists()
    rows = [line.split() for line in format_summary(result).splitlines() if line.startswith("QD1 ")]
    assert rows == [["QD1", "-", "-", "-", "-", "-", "-", "-", "FAIL"]]


@needs_fio
def test_a_file_system_without_o_direct_is_skipped_with_the_reason(
    tmp_path: Path, data_dir: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = f"cannot open {weights} with O_DIRECT (Invalid argument): its file system does not support direct I/O"
    monkeypatch.setattr(probe, "_direct_io_problem", lambda path: why)
    result = run_io_probe(weights, [data_dir], tmp_path / "out", runtime_s=1)
    assert (result.status, result.reason, result.verdict, result.runs) == ("skipped", why, None, [])
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["result.json"]


@needs_fio
def test_an_exception_is_recorded_not_raised(
    tmp_path: Path, data_dir: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _skip_without_o_direct(weights)
    real = probe.run_bounded

    def broken(argv: list[str], timeout_s: float, grace_s: float = 5.0) -> Any:
        if "--readonly" in argv:
            raise OSError(12, "Cannot allocate memory")
        return real(argv, timeout_s, grace_s)

    monkeypatch.setattr(probe, "run_bounded", broken)
    result = run_io_probe(weights, [data_dir], tmp_path / "out", depths=(64,), runtime_s=1)
    assert result.status == "failed"
    assert result.reasons == ["QD64: OSError: [Errno 12] Cannot allocate memory"]
    assert json.loads((tmp_path / "out" / "qd64" / "result.json").read_text())["reason"] == result.reasons[0]
    assert (tmp_path / "out" / "qd64" / "command.txt").exists()


@needs_fio
def test_a_target_that_changed_fails_the_probe(
    tmp_path: Path, data_dir: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something else writing the file during the run (a model download, say) is caught by the hashes."""
    _skip_without_o_direct(weights)
    real = probe.run_bounded

    def writer(argv: list[str], timeout_s: float, grace_s: float = 5.0) -> Any:
        if "--readonly" in argv:
            with weights.open("r+b") as f:
                f.write(b"changed")
        return real(argv, timeout_s, grace_s)

    monkeypatch.setattr(probe, "run_bounded", writer)
    result = run_io_probe(weights, [data_dir], tmp_path / "out", depths=(1,), runtime_s=1)
    assert result.target_unchanged is False
    assert result.status == "failed" and result.verdict == "FAIL"
    assert result.reason is not None and result.reason.startswith("the target changed during the probe")
    assert result.target_before is not None and result.target_after is not None
    assert result.target_before.sampled_sha256 != result.target_after.sampled_sha256
    assert "sampled_sha256" in result.reason and "mtime_ns" in result.reason
    assert "CHANGED after the probe" in format_summary(result)


def test_summary_of_fixture_runs_reads_as_a_table() -> None:
    qd1, qd64 = _parsed("randread-qd1.json"), _parsed("randread-qd64-rate-limited.json")
    runs = []
    for r in (qd1, qd64):
        reasons = judge(r, Thresholds(max_clat_ms=25))
        runs.append(
            probe.DepthRun(
                1, r.requested_iodepth, "successful", None, "/o", [], 0, False, 3.0, r, None, "FAIL", reasons
            )
        )
    state = probe_target.TargetState("ab" * 32, 64 << 20, 0, "254:0", 12, 0, [[0, 65536]])
    result = IoProbeResult(
        schema_version=1,
        status="successful",
        reason=None,
        verdict="FAIL",
        reasons=[x for r in runs for x in r.reasons],
        target="/data/w.bin",
        target_resolved="/data/w.bin",
        data_dirs=["/data"],
        out_dir="/o",
        fio_path="/usr/bin/fio",
        fio_version="fio-3.33",
        depths=[1, 64],
        runtime_s=3,
        seed=1234,
        size_bytes=None,
        timeout_s=63.0,
        started_at_utc="",
        finished_at_utc="",
        target_before=state,
        target_after=state,
        target_unchanged=True,
        runs=runs,
    )
    lines = format_summary(result).splitlines()
    assert lines[1] == (
        "target: 64.0 MiB on device 254:0, inode 12, sampled sha256 abababababababab..., unchanged after the probe"
    )
    assert lines[2] == "depth    IOPS  MiB/s  p50 ms  p99 ms  p99.9 ms  max ms  at depth %  verdict"
    assert lines[3].split() == ["QD1", "13,339", "52.1", "0.031", "0.322", "3.228", "27.939", "100.0", "(1)", "FAIL"]
    assert lines[4].split() == ["QD64", "1,999", "7.8", "0.056", "6.062", "10.813", "29.954", "0.0", "(>=64)", "FAIL"]
    assert lines[5:8] == [
        "  - QD1: max completion latency 27.939 ms is above the maximum 25 ms",
        "  - QD64: the requested depth was not reached: 0.0% of the time at depth >=64 (need 90.0%); "
        "the figures describe a lower depth",
        "  - QD64: max completion latency 29.954 ms is above the maximum 25 ms",
    ]
    assert lines[-1] == "result: FAIL (run successful; artifacts in /o)"


# --- the target's identity ----------------------------------------------------------------------------------


def test_identity_ranges_are_fixed_aligned_and_cover_both_ends() -> None:
    ranges = probe_target.identity_ranges(64 << 20)
    assert len(ranges) == probe_target.IDENTITY_RANGES
    assert ranges[0] == (0, 64 << 10) and ranges[-1] == ((64 << 20) - (64 << 10), 64 << 10)
    assert all(o % 4096 == 0 for o, _ in ranges)
    assert ranges == probe_target.identity_ranges(64 << 20)  # the size alone decides: before and after read the same
    # A small file is read once, whole: the ranges overlap and merge.
    assert probe_target.identity_ranges(100_000) == [(0, 100_000)]
    assert probe_target.identity_ranges(0) == []
    # An unaligned end: the last range still reaches the last byte.
    (o, n), *_ = probe_target.identity_ranges(5_000_123)[-1:]
    assert o % 4096 == 0 and o + n == 5_000_123


def test_identity_reads_a_few_ranges_and_leaves_the_page_cache_alone(tmp_path: Path) -> None:
    target = tmp_path / "w.bin"
    with target.open("wb") as f:
        f.write(os.urandom(32 << 20))
        f.flush()
        os.fsync(f.fileno())  # clean pages, so that DONTNEED drops them
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    _skip_without_o_direct(target)
    cached = _resident_pages(target)
    before = probe_target.target_state(target)
    assert _resident_pages(target) == cached < 100  # O_DIRECT: nothing pulled into the cache
    assert before.sampled_ranges == [[o, n] for o, n in probe_target.identity_ranges(32 << 20)]
    assert before == probe_target.target_state(target)
    with target.open("r+b") as f:  # a write inside a range: the hash moves, and mtime with it
        f.seek(before.sampled_ranges[3][0] + 10)
        f.write(b"x")
    after = probe_target.target_state(target)
    assert after.sampled_sha256 != before.sampled_sha256
    assert "sampled_sha256" in probe_target.describe_change(before, after)
    os.utime(target, ns=(before.mtime_ns, before.mtime_ns))  # mtime set back: ctime still says so
    again = probe_target.target_state(target)
    assert again.mtime_ns == before.mtime_ns and again.ctime_ns != before.ctime_ns


def _resident_pages(path: Path) -> int:
    fincore = shutil.which("fincore")
    if fincore is None:
        pytest.skip("fincore (util-linux) is not installed")
    out = subprocess.run([fincore, "--noheadings", "--output", "PAGES", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0])


def test_a_probe_that_breaks_exits_4_with_one_line_never_a_verdict(
    tmp_path: Path, data_dir: Path, weights: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_a: Any, **_k: Any) -> Any:
        raise KeyError("jobs")

    monkeypatch.setattr(probe, "run_io_probe", broken)
    out = tmp_path / "out"
    rc = probe.main(["--target", str(weights), "--data-dir", str(data_dir), "--out", str(out)])
    assert rc == probe.EXIT_PROBE_ERROR == 4
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "the probe broke (KeyError: 'jobs'); no verdict on the storage. Rerun it" in err
    assert "Traceback" in (out / "probe-error.txt").read_text()
