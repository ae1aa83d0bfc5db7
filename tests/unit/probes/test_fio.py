"""The fio command the I/O probe builds and how it reads fio's answer (probes/io/fio.py): argv, parsing of real fio 3.33
output, judging against thresholds.

Parse and judge tests read outputs captured on this machine (tests/fixtures/fio-3.33/README.md); nothing runs fio.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from probes.io.fio import (
    FioParseError,
    FioResult,
    ProbeInputError,
    Thresholds,
    build_fio_argv,
    depth_bucket,
    judge,
    parse_fio_json,
)

FIO_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "fio-3.33"


def _text(name: str) -> str:
    return (FIO_FIXTURES / name).read_text()


def _parsed(name: str) -> FioResult:
    return parse_fio_json(_text(name))


# --- argv ---------------------------------------------------------------------------------------------------


def test_argv_is_the_read_only_4k_random_read_command() -> None:
    assert build_fio_argv(Path("/data/w.bin"), 64, 10, None, 1234) == [
        "fio",
        "--name=randread-qd64",
        "--filename=/data/w.bin",
        "--readonly",
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=64",
        "--numjobs=1",
        "--time_based",
        "--runtime=10",
        "--randrepeat=1",
        "--invalidate=0",
        "--randseed=1234",
        "--group_reporting",
        "--output-format=json",
    ]


def test_argv_limits_the_size_only_when_asked() -> None:
    assert not any(a.startswith("--size") for a in build_fio_argv(Path("/d/w"), 1, 3, None, 7))
    assert build_fio_argv(Path("/d/w"), 1, 3, 1 << 20, 7)[-1] == "--size=1048576"


def test_argv_escapes_a_colon_fio_would_split_the_filename_on() -> None:
    assert build_fio_argv(Path("/d/a:b.bin"), 1, 3, None, 7)[2] == "--filename=/d/a\\:b.bin"


@pytest.mark.parametrize(
    ("iodepth", "runtime_s", "size_bytes", "message"),
    [(0, 10, None, "iodepth must be at least 1"), (1, 0, None, "runtime"), (1, 10, 100, "one 4 KiB block")],
)
def test_argv_refuses_nonsense(iodepth: int, runtime_s: int, size_bytes: int | None, message: str) -> None:
    with pytest.raises(ProbeInputError, match=message):
        build_fio_argv(Path("/d/w"), iodepth, runtime_s, size_bytes, 1)


@pytest.mark.parametrize("name", ["randread-qd1.json", "randread-qd64.json", "randread-qd1-invalidate0.json"])
def test_the_fixtures_were_made_by_the_argv_the_probe_builds(name: str) -> None:
    """fio echoes every valued job option in its JSON; the fixtures' options are exactly the probe's (the two
    older ones were recorded before --invalidate=0, and differ by that alone: fixtures README)."""
    data = json.loads(_text(name))
    options = data["jobs"][0]["job options"]
    depth = int(options["iodepth"])
    argv = build_fio_argv(Path(options["filename"]), depth, 3, None, 1234)
    valued = dict(a[2:].split("=", 1) for a in argv[1:] if "=" in a)
    # --output-format is a command-line option, not a job option; --readonly, --time_based and
    # --group_reporting carry no value, so fio does not echo them.
    valued.pop("output-format")
    if "invalidate0" not in name:
        assert valued.pop("invalidate") == "0"
    assert options == valued


def test_depth_buckets_are_fios() -> None:
    levels = _parsed("randread-qd64.json").iodepth_level
    assert list(levels) == ["1", "2", "4", "8", "16", "32", ">=64"]
    assert [depth_bucket(d) for d in (1, 2, 3, 4, 16, 31, 32, 48, 63, 64, 256)] == [
        "1",
        "2",
        "2",
        "4",
        "16",
        "16",
        "32",
        "32",
        "32",
        ">=64",
        ">=64",
    ]
    assert all(depth_bucket(d) in levels for d in range(1, 300))


# --- parse (real fio 3.33 output) ---------------------------------------------------------------------------


def test_parse_real_qd1_run() -> None:
    r = _parsed("randread-qd1.json")
    assert r.schema_version == 1
    assert r.fio_version == "fio-3.33"
    assert r.job_name == "randread-qd1"
    assert r.requested_iodepth == 1
    assert r.read_iops == 13338.887038
    assert r.read_bw_mib_s == 54636081 / (1 << 20)
    assert r.read_io_bytes == 163962880
    assert r.read_total_ios == 40030
    assert r.read_runtime_ms == 3001
    assert r.p50_clat_ms == 0.030848
    assert r.p99_clat_ms == 0.321536
    assert r.p999_clat_ms == 3.227648
    assert r.max_clat_ms == 27.939183
    assert r.max_lat_ms == 27.948391
    assert r.iodepth_level == {"1": 100.0, "2": 0.0, "4": 0.0, "8": 0.0, "16": 0.0, "32": 0.0, ">=64": 0.0}
    assert r.achieved_depth_bucket == "1"
    assert r.achieved_depth_share_pct == 100.0
    assert r.fio_messages == []


def test_parse_real_qd64_run() -> None:
    r = _parsed("randread-qd64.json")
    assert r.job_name == "randread-qd64"
    assert r.requested_iodepth == 64
    assert r.read_iops == 37749.417637
    assert r.read_bw_mib_s == 154621614 / (1 << 20)
    assert r.read_total_ios == 113437
    assert r.p50_clat_ms == 0.847872
    assert r.p99_clat_ms == 24.510464
    assert r.p999_clat_ms == 41.680896
    assert r.max_clat_ms == 194.883406
    assert r.max_lat_ms == 194.89124
    assert r.achieved_depth_bucket == ">=64"
    assert r.achieved_depth_share_pct == 99.944463
    assert r.iodepth_level["1"] == 0.1


def test_parse_real_run_where_qd64_was_not_reached() -> None:
    r = _parsed("randread-qd64-rate-limited.json")
    assert r.requested_iodepth == 64
    assert r.read_iops == 1999.333555
    assert r.achieved_depth_share_pct == 0.0
    assert r.iodepth_level["1"] == 84.233333
    assert r.iodepth_level["32"] == 0.516667


def test_parse_keeps_the_message_fio_printed_on_stdout_before_its_json() -> None:
    text = _text("randread-size-beyond-eof.json")
    assert not text.startswith("{")
    r = parse_fio_json(text)
    assert r.fio_messages == [
        "fio: cache invalidation of /var/tmp/refdeploy-fio/table-1m.bin failed: Bad file descriptor"
    ]
    assert r.read_iops == 41372.875708


def test_parse_refuses_a_run_that_read_nothing() -> None:
    # fio exited 1 with "blocksize is larger than data set range" yet printed JSON with error 0.
    with pytest.raises(FioParseError, match=r"completed no reads \(jobs\[0\]\.read\.total_ios is 0\)"):
        parse_fio_json(_text("randread-file-smaller-than-bs.json"))


def test_parse_refuses_stdout_without_json() -> None:
    with pytest.raises(FioParseError, match="no JSON object on stdout; last line: fio: blocksize is larger"):
        parse_fio_json(_text("randread-file-smaller-than-bs.stderr.txt"))
    with pytest.raises(FioParseError, match=r"\(empty\)"):
        parse_fio_json("")


def test_parse_refuses_truncated_json() -> None:
    text = _text("randread-qd1.json")
    with pytest.raises(FioParseError, match="not valid JSON"):
        parse_fio_json(text[: len(text) // 2])


def test_parse_reports_fios_job_error() -> None:
    data = json.loads(_text("randread-qd1.json"))
    data["jobs"][0]["error"] = 5
    with pytest.raises(FioParseError, match=r"fio reported error 5 \(Input/output error\) for job randread-qd1"):
        parse_fio_json(json.dumps(data))


def test_parse_names_a_missing_field() -> None:
    data = json.loads(_text("randread-qd64.json"))
    del data["jobs"][0]["read"]["clat_ns"]["percentile"]["99.900000"]
    with pytest.raises(FioParseError, match=r"no jobs\[0\]\.read\.clat_ns\.percentile\.99\.900000"):
        parse_fio_json(json.dumps(data))


# --- judge --------------------------------------------------------------------------------------------------


def test_real_runs_pass_without_thresholds() -> None:
    assert judge(_parsed("randread-qd1.json"), None) == []
    assert judge(_parsed("randread-qd64.json"), Thresholds()) == []


def test_depth_not_reached_in_a_real_rate_limited_run() -> None:
    assert judge(_parsed("randread-qd64-rate-limited.json"), None) == [
        "QD64: the requested depth was not reached: 0.0% of the time at depth >=64 (need 90.0%); "
        "the figures describe a lower depth"
    ]


def test_depth_share_threshold_is_inclusive() -> None:
    # Constructed from the real QD64 run by changing the share at ">=64".
    real = _parsed("randread-qd64.json")
    at = dataclasses.replace(real, achieved_depth_share_pct=90.0)
    below = dataclasses.replace(real, achieved_depth_share_pct=89.9)
    assert judge(at, None) == []
    assert judge(below, None) == [
        "QD64: the requested depth was not reached: 89.9% of the time at depth >=64 (need 90.0%); "
        "the figures describe a lower depth"
    ]
    assert judge(below, None, min_depth_share_pct=80.0) == []


def test_iops_below_minimum() -> None:
    r = _parsed("randread-qd64.json")  # 37,749 IOPS
    assert judge(r, Thresholds(min_iops=40000)) == ["QD64: 37,749 IOPS is below the minimum 40,000"]
    assert judge(r, Thresholds(min_iops=37000)) == []


def test_p999_above_maximum() -> None:
    r = _parsed("randread-qd64.json")  # p99.9 41.680896 ms
    assert judge(r, Thresholds(max_p999_clat_ms=40)) == [
        "QD64: p99.9 completion latency 41.681 ms is above the maximum 40 ms"
    ]
    assert judge(r, Thresholds(max_p999_clat_ms=42)) == []


def test_max_above_maximum() -> None:
    r = _parsed("randread-qd1.json")  # max 27.939183 ms
    assert judge(r, Thresholds(max_clat_ms=20)) == ["QD1: max completion latency 27.939 ms is above the maximum 20 ms"]
    assert judge(r, Thresholds(max_clat_ms=30)) == []


def test_every_reason_is_reported_together() -> None:
    r = _parsed("randread-qd64-rate-limited.json")
    reasons = judge(r, Thresholds(min_iops=5000, max_p999_clat_ms=5, max_clat_ms=20))
    assert [x.split(":")[1].strip().split()[0] for x in reasons] == ["the", "1,999", "p99.9", "max"]
