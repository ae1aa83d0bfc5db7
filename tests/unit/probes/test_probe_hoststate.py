"""Host-state snapshots (probes/readers/hoststate.py): fincore, the snapshot and its artifacts, the summary, the CLI.

The /proc and cgroup trees are built by tests/helpers/cgroup_trees.py; the readings themselves are tested beside
their modules (test_cgroups.py, test_cgroup_delta.py, test_procfs.py, test_rawtext.py). fincore runs for real on
a file written here, and one snapshot reads the real /proc and /sys/fs/cgroup of this machine for the test
process.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from probes.base.rawtext import RAW_LIMIT_BYTES, TRUNCATED_MARKER
from probes.readers import hoststate
from probes.readers.cgroups import CgroupSnapshot
from probes.readers.hoststate import (
    FINCORE_COLUMNS,
    FINCORE_NOT_FOUND,
    HostStateInputError,
    fincore,
    host_state_cgroup_delta,
    main,
    snapshot,
    write_host_state,
)
from serving.host.numa import parse_cpulist
from tests.helpers.cgroup_trees import CID, FIXTURES, build_proc, cgroup_lines_v1, set_v1_counters, write

PAGE = os.sysconf("SC_PAGE_SIZE")
needs_fincore = pytest.mark.skipif(shutil.which("fincore") is None, reason=FINCORE_NOT_FOUND)


# --- fincore ----------------------------------------------------------------------------------------------


@needs_fincore
def test_fincore_reads_the_page_cache_residency_of_a_real_file(tmp_path: Path) -> None:
    f = tmp_path / "weights.bin"
    size = 8 << 20
    f.write_bytes(os.urandom(size))
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache (where the FS allows)
        assert len(os.pread(fd, size // 2, 0)) == size // 2  # the first half back in
    finally:
        os.close(fd)
    before = f.stat()
    reading = fincore([f])
    assert reading.status == "successful", reading.reason
    assert reading.argv[1:] == ["--json", "--bytes", "--output", FINCORE_COLUMNS, "--", str(f)]
    [row] = reading.files
    assert row.path == str(f)
    assert row.size_bytes == size
    assert size // 2 <= row.resident_bytes <= size  # readahead may bring in more than was read
    assert row.resident_bytes == row.resident_pages * PAGE
    assert row.resident_pct == pytest.approx(row.resident_bytes / size * 100)
    assert '"fincore"' in (reading.raw["fincore/stdout.json"] or "")
    assert f.stat().st_mtime_ns == before.st_mtime_ns and f.stat().st_size == size


@needs_fincore
def test_fincore_names_a_file_it_could_not_open(tmp_path: Path) -> None:
    f = tmp_path / "present.bin"
    f.write_bytes(b"\0" * PAGE)
    absent = tmp_path / "absent.bin"
    reading = fincore([f, absent])
    assert reading.status == "failed"
    assert reading.missing == [str(absent)]
    assert [r.path for r in reading.files] == [str(f)]
    assert "No such file" in (reading.reason or "")


def test_fincore_missing_binary_is_skipped(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(b"x")
    reading = fincore([f], binary="fincore-not-installed-here")
    assert (reading.status, reading.reason, reading.argv) == ("skipped", FINCORE_NOT_FOUND, [])
    assert fincore([]).status == "skipped"


# --- snapshot, artifacts, CLI -----------------------------------------------------------------------------


def test_snapshot_writes_json_and_raw_texts(v1: tuple[Path, Path], tmp_path: Path) -> None:
    proc, cg = v1
    build_proc(proc, 57, cgroup_lines_v1(CID), comm="VLLM::EngineCor")
    write(proc / "meminfo", (FIXTURES / "host-proc-meminfo.txt").read_text() + "Padding: 1 kB\n" * 100_000)
    data = tmp_path / "model.bin"
    data.write_bytes(b"\0" * PAGE)
    state = snapshot([1, 57], [data], proc, cg, fincore_binary="fincore-not-installed-here")
    assert [p.pid for p in state.processes] == [1, 57]
    assert state.processes[1].comm == "VLLM::EngineCor"
    assert state.cgroup.pid == 1 and state.cgroup.status == "successful"
    assert state.meminfo.values_kb["MemTotal"] == 24683656  # parsed from the kept (truncated) text
    assert state.page_cache.status == "skipped"

    out = tmp_path / "out"
    path = write_host_state(state, out)
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1 and doc["cgroup"]["version"] == "v1"
    limit_src = str(cg / "memory" / "docker" / CID / "memory.limit_in_bytes")
    rel = doc["cgroup"]["raw"][limit_src]
    assert rel == "raw/" + limit_src.lstrip("/")
    assert (out / rel).read_text() == "8589934592\n"
    assert doc["cgroup"]["raw"][str(cg / "memory" / "docker" / CID / "memory.memsw.limit_in_bytes")] is None
    assert doc["cgroup"]["levels"][0]["memory"]["limit_bytes"] == {"value": 8589934592, "unlimited": False}
    assert doc["processes"][1]["smaps_rollup"]["pss"]["pss_file_kb"] == 68649
    meminfo_raw = (out / doc["meminfo"]["raw"][str(proc / "meminfo")]).read_text()
    assert meminfo_raw.endswith(TRUNCATED_MARKER)
    assert len(meminfo_raw.encode()) == RAW_LIMIT_BYTES + len(TRUNCATED_MARKER)


def test_snapshot_refuses_bad_input(v1: tuple[Path, Path], tmp_path: Path) -> None:
    proc, cg = v1
    with pytest.raises(HostStateInputError, match="PID namespace"):
        snapshot([1, 4242], [], proc, cg)
    with pytest.raises(HostStateInputError, match="no PID"):
        snapshot([], [], proc, cg)
    with pytest.raises(HostStateInputError, match="does not exist"):
        snapshot([1], [tmp_path / "absent.bin"], proc, cg)


def test_host_state_cgroup_delta_is_json_ready(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    before = snapshot([1], [], proc, cg)
    set_v1_counters(cg, oom_kill=1)
    delta = host_state_cgroup_delta(before, snapshot([1], [], proc, cg))
    assert json.loads(json.dumps(delta))["levels"][0]["oom_kill_increase"] == 1


def test_cli_writes_the_snapshot_and_prints_a_summary(
    v1: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, cg = v1
    out = tmp_path / "out"
    rc = main(["--pid", "1", "--proc-root", str(proc), "--cgroup-root", str(cg), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert (out / "host-state.json").is_file()
    assert f"cgroup v1 /docker/{CID}" in text
    assert "2,438.7 MiB used, limit 8,192.0 MiB" in text
    # The level that sets the quota is named (on a GPU host it is an ancestor, refdeploy.slice).
    assert f"cpu quota 2 CPUs at /docker/{CID}: throttled in 100 of 1000 periods (2.000 s)" in text
    assert "PSS 459.1 MiB = anon 392.1 MiB + file 67.0 MiB + shmem 0.0 MiB" in text
    assert "resident by NUMA node: N0 1,692.7 MiB (mappings by policy: default x862)" in text
    assert "page cache: skipped: no data files given" in text


def test_summary_names_an_ancestor_limit_tighter_than_the_containers(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    assert "tighter limit" not in hoststate.format_summary(snapshot([1], [], proc, cg))
    write(cg / "memory" / "docker" / "memory.limit_in_bytes", "4294967296\n")
    text = hoststate.format_summary(snapshot([1], [], proc, cg))
    assert "limit 8,192.0 MiB; tighter limit 4,096.0 MiB at /docker," in text


def test_cli_bad_input_is_one_line_on_stderr_and_exit_2(
    v1: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, cg = v1
    base = ["--proc-root", str(proc), "--cgroup-root", str(cg)]
    assert main([*base, "--pid", "4242", "--out", str(tmp_path / "o1")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "process 4242 is not running here" in err
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main([*base, "--pid", "1", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot create output directory" in err
    assert not (tmp_path / "o1").exists()


# --- the real host ----------------------------------------------------------------------------------------


def test_snapshot_of_this_process_on_the_real_host(tmp_path: Path) -> None:
    state = snapshot([os.getpid()])
    cgroup: CgroupSnapshot = state.cgroup
    assert cgroup.status == "successful", cgroup.reason
    assert cgroup.levels
    assert cgroup.levels[-1].path == "/"
    usages = [lv.memory.usage_bytes for lv in cgroup.levels if lv.memory and lv.memory.usage_bytes is not None]
    assert usages and usages[0] > 0
    process = state.processes[0]
    assert process.limits.status == "successful" and "Max open files" in process.limits.limits
    assert process.smaps_rollup.pss is not None and process.smaps_rollup.pss.pss_kb > 0
    assert state.meminfo.values_kb["MemTotal"] > 0
    # The CPUs it may run on and the host's nodes, as the kernel lists them (os.sched_getaffinity, sysfs).
    assert process.cpus_allowed is not None
    assert set(parse_cpulist(process.cpus_allowed)) == os.sched_getaffinity(0)
    assert state.node_cpus and "N0" in state.node_cpus
    assert set().union(*(parse_cpulist(v) for v in state.node_cpus.values())) >= os.sched_getaffinity(0)
    doc = json.loads(write_host_state(state, tmp_path / "out").read_text())
    assert doc["cgroup"]["levels"][0]["path"] == cgroup.levels[0].path
    assert doc["processes"][0]["cpus_allowed"] == process.cpus_allowed and doc["node_cpus"] == state.node_cpus


def test_node_cpus_reads_each_node_in_number_order_and_none_without_nodes(tmp_path: Path) -> None:
    """A sysfs tree as a two-node host has it (/sys/devices/system/node/node<N>/cpulist), node10 after node2."""
    for n, cpus in ((0, "0-15,32-47"), (2, "16-31"), (10, "48-63")):
        write(tmp_path / "devices" / "system" / "node" / f"node{n}" / "cpulist", cpus + "\n")
    assert hoststate.read_node_cpus(tmp_path) == {"N0": "0-15,32-47", "N2": "16-31", "N10": "48-63"}
    assert list(hoststate.read_node_cpus(tmp_path) or {}) == ["N0", "N2", "N10"]
    assert hoststate.read_node_cpus(tmp_path / "absent") is None
