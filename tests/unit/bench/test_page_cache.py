"""The page-cache state of the served files per bench run (issue 14 item 3): the client makes it (cold: evicted
with posix_fadvise DONTNEED, warm: read in) and reads residency with the real fincore and the engine's read volume
from /proc; the controller flags a run that did not have the state it asked for, and compares the state as a
condition."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from serving.bench import conditions as bench_conditions
from serving.bench import protocol as bench
from serving.bench import runs as bench_runs
from serving.bench import summary as bench_summary
from serving.bench import text as bench_text
from serving.bench.summary_schema import PageCache
from tests.helpers.bench_dirs import RUN, SMOKE, fixture, serving_plan
from tests.helpers.image_scripts import image_script

page_cache = image_script("bench_page_cache")


@pytest.fixture
def served(tmp_path: Path) -> list[str]:
    """Two files of 4 MiB and 1 byte on a real (page-cached) filesystem: tmp_path is on this machine's ext4."""
    d = tmp_path / "model"
    d.mkdir()
    for name, data in (("weights.bin", os.urandom(4 << 20)), ("config.json", b"{}")):
        with (d / name).open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # dirty pages cannot be evicted; served files were written long before
    (d / "link").symlink_to(d / "weights.bin")
    files = page_cache.served_files([str(d)])
    assert [Path(f).name for f in files] == ["config.json", "weights.bin"]  # the link is not read twice
    return list(files)


def test_cold_evicts_and_warm_reads_in_the_served_files(served: list[str]) -> None:
    made = page_cache.make_page_cache_state("cold", served)
    assert made["errors"] == [] and made["files"] == 2
    cold = page_cache.residency(served)
    assert cold["fraction"] <= 0.05, cold
    made = page_cache.make_page_cache_state("warm", served)
    assert made["bytes_read"] == (4 << 20) + 2
    warm = page_cache.residency(served)
    assert warm["fraction"] == 1.0 and warm["resident_bytes"] >= 4 << 20, warm
    assert warm["pages"] == 1024 + 1 and warm["per_file"][served[1]] == 1024
    # as-found touches nothing
    assert page_cache.make_page_cache_state("as-found", served)["bytes_read"] == 0
    assert page_cache.residency(served)["fraction"] == 1.0


def test_residency_says_why_it_has_no_figure() -> None:
    assert page_cache.residency([]) == {"error": "no served files found"}
    assert "fincore exited" in page_cache.residency(["/no/such/file"])["error"]


def test_a_file_that_will_not_open_is_named(tmp_path: Path) -> None:
    made = page_cache.make_page_cache_state("cold", [str(tmp_path / "gone")])
    assert made["errors"] == [f"{tmp_path / 'gone'}: No such file or directory"]


def test_residency_is_refused_where_the_kernel_would_report_every_page_resident(
    served: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without FOWNER, mincore(2) says "resident" for every page of a file the caller neither owns nor may write;
    the reader says it cannot tell instead."""
    monkeypatch.setattr(page_cache, "has_fowner", lambda: False)
    monkeypatch.setattr(page_cache.os, "geteuid", lambda: 4242)
    got = page_cache.residency(served)
    assert got["error"].startswith("not read: uid 4242 without CAP_FOWNER neither owns nor may write")


def test_the_residency_reader_answers_through_its_helper_process(served: list[str]) -> None:
    reader = page_cache.ResidencyReader.start()
    try:
        page_cache.make_page_cache_state("warm", served)
        assert reader.read(served)["fraction"] == 1.0
        page_cache.make_page_cache_state("cold", served)
        assert reader.read(served)["fraction"] <= 0.05
        assert reader.proc.poll() is None  # one helper for every run
    finally:
        reader.close()
    assert reader.proc.returncode == 0


def test_engine_io_reads_the_processes_under_the_engines_init() -> None:
    """This test process stands in for the engine's init: it and its child are read, nothing else."""
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        io = page_cache.engine_io(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert set(io["pids"]) == {str(os.getpid()), str(child.pid)}
    mine = io["pids"][str(os.getpid())]
    assert mine["rchar"] > 0 and "read_bytes" in mine and io["pids"][str(child.pid)]["comm"] == "sleep"


# --- the controller's side -----------------------------------------------------------------------------------


def status_with(state: str, before: float | None, after: float = 1.0, errors: list[str] | None = None) -> Any:
    _, status, _, _ = fixture("c1-m1")
    status = copy.deepcopy(status)
    res = {"files": 7, "pages": 100, "size_bytes": 400_000, "resident_bytes": 0, "fraction": before}
    if before is None:
        res = {"error": "fincore exited 1: fincore: failed to open"}
    status["page_cache"] = {
        "made": {"state": state, "files": 7, "bytes_read": 0, "errors": errors or []},
        "before": res,
        "after": {**res, "fraction": after} if before is not None else res,
    }
    status["engine_io_before"] = {
        "pids": {"1": {"rchar": 100, "read_bytes": 4096}, "99": {"rchar": 50, "read_bytes": 0}},
        "unreadable": {},
    }
    status["engine_io_after"] = {
        "pids": {"1": {"rchar": 300, "read_bytes": 8192}, "99": {"rchar": 60, "read_bytes": 0}, "120": {"rchar": 9}},
        "unreadable": {"154": "VLLM::Worker: Permission denied"},
    }
    return status


def summarize(status: Any) -> dict[str, Any]:
    result, _, before, after = fixture("c1-m1")
    return bench_runs.summarize_run(RUN, status, result, before, after, SMOKE.model_dump())


def test_a_run_records_residency_and_the_engines_read_volume() -> None:
    s = summarize(status_with("cold", 0.0))
    pc = s["page_cache"]
    assert s["valid"] and s["flags"] == []
    assert (pc["state"], pc["resident_before"], pc["resident_after"]) == ("cold", 0.0, 1.0)
    # over the pids read both times: 1 and 99 (120 started during the run)
    assert (pc["engine_read_bytes"], pc["engine_rchar"], pc["engine_pids"]) == (4096, 210, 2)
    assert pc["engine_pids_unreadable"] == ["154"]


@pytest.mark.parametrize(
    ("state", "before", "flag"),
    [
        ("cold", 0.4, "page cache not cold: 40% of the served files were resident when the run began"),
        ("warm", 0.5, "page cache not warm: 50% of the served files were resident when the run began"),
        ("cold", None, "page cache cold asked for, residency not read: fincore exited 1"),
    ],
)
def test_a_run_not_in_the_state_it_asked_for_is_flagged(state: str, before: float | None, flag: str) -> None:
    s = summarize(status_with(state, before))
    assert not s["valid"]
    assert len(s["flags"]) == 1 and s["flags"][0].startswith(flag), s["flags"]


def test_as_found_is_never_flagged_and_a_failed_eviction_is() -> None:
    assert summarize(status_with("as-found", 0.4))["valid"]
    assert summarize(status_with("warm", 1.0))["valid"]
    s = summarize(status_with("cold", 0.0, errors=["/models/x: Permission denied"]))
    assert s["flags"] == ["page cache not made cold: /models/x: Permission denied"]


def test_a_run_from_before_the_state_was_recorded_has_none() -> None:
    _, status, _, _ = fixture("c1-m1")
    assert "page_cache" not in status
    assert summarize(status)["page_cache"] is None


def test_the_report_states_the_page_cache_state_and_its_readings() -> None:
    runs = [summarize(status_with("cold", 0.0)) for _ in range(2)]
    pc = bench_summary.page_cache_summary({"page_cache": "cold"}, runs)
    line = bench_text._page_cache_line(PageCache.model_validate(pc))
    assert line.startswith("page cache of the served files (7 files, 0.381 MiB): cold, evicted before each run")
    assert "resident at the start of measured runs 0%-0%, at their end 100%-100%" in line
    assert "the engine read 8192 bytes from storage" in line and "154" in line


# --- the plan and the conditions -----------------------------------------------------------------------------


def test_the_client_is_told_the_state_and_the_served_paths_as_it_mounts_them() -> None:
    cold = SMOKE.model_copy(update={"page_cache": "cold"})
    planned = bench.plan_bench(cold, serving_plan(), "/o", "0-1", "0-1", engine_pid=4242)
    assert planned["client_plan"]["page_cache"] == {
        "state": "cold",
        "paths": ["/models/tiny-llama"],
        "engine_pid": 4242,
    }
    argv = planned["docker_argv"]
    # Not the serving container's PID namespace: a server that dies would take the client with it.
    assert argv[argv.index("--pid") + 1] == "host"
    # root with FOWNER (the residency reader) and what it needs to drop to the runtime user; nothing else
    assert " ".join(argv[argv.index("--user") : argv.index("--security-opt")]) == (
        "--user 0:0 --cap-drop ALL --cap-add FOWNER --cap-add SETUID --cap-add SETGID"
    )
    assert planned["client_plan"]["run_as_uid"] == 10001


def test_served_paths_follow_the_volumes() -> None:
    vols = ["/data/models:/models:ro", "/nvme/ple:/ple:ro"]
    assert bench.served_paths(["/data/models/llama", "/nvme/ple", "/elsewhere"], vols) == ["/models/llama", "/ple"]


def test_the_page_cache_state_is_a_compared_condition_and_old_benches_were_as_found() -> None:
    a = bench.plan_bench(SMOKE, serving_plan(), "/o", "0-1", "0-1")["manifest"]
    b = bench.plan_bench(SMOKE.model_copy(update={"page_cache": "cold"}), serving_plan(), "/o", "0-1", "0-1")[
        "manifest"
    ]
    ca, cb = bench_conditions.conditions(a), bench_conditions.conditions(b)
    assert [k for k in ca if ca[k] != cb.get(k)] == ["workload.page_cache"]
    old = copy.deepcopy(a)
    del old["workload"]["page_cache"]
    assert bench_conditions.conditions(old) == ca
