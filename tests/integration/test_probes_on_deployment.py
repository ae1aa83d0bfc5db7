"""The probes that exist so far, against the real CPU deployment (tests/integration/test_deploy.py
leaves it undeployed at the end, so these deploy it again when needed; `make deploy` is a no-op when
it is already up)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from probes.readers.metrics import (
    GENERATION_TOKENS,
    REQUEST_SUCCESS,
    counter_by_label,
    counter_sum,
    delta,
    find_histograms,
    snapshot_from_text,
)
from tests.integration.conftest import BASE_URL, REPO, complete, make, probe_runs, server_open

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("deployed")]
ENGINE_STARTS = 0

MODEL_DIR = Path("/var/lib/refdeploy/models")
WEIGHTS = MODEL_DIR / "tiny-llama" / "model.safetensors"


def _snapshot():  # type: ignore[no-untyped-def]
    with server_open(f"{BASE_URL}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return snapshot_from_text(text, time.monotonic(), time.time())


def _cached_pages(path: Path) -> int:
    out = subprocess.run(["fincore", "--noheadings", "--output", "PAGES", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0])


def _complete(max_tokens: int) -> None:
    assert complete("import os", max_tokens)["usage"]["completion_tokens"] == max_tokens


def test_metrics_delta_counts_exactly_the_requests_sent() -> None:
    before = _snapshot()
    for _ in range(5):
        _complete(12)
    after = _snapshot()
    d = delta(before, after)
    assert not d.reset_detected
    assert counter_by_label(d, REQUEST_SUCCESS, "finished_reason").get("length") == 5
    assert counter_sum(d, GENERATION_TOKENS) == 60
    (ttft,) = find_histograms(d, "vllm:time_to_first_token_seconds")
    assert ttft.count == 5
    (itl,) = find_histograms(d, "vllm:inter_token_latency_seconds")
    assert itl.count == 5 * 11  # 12 tokens: 11 intervals each


def _watch_user(name: str, users: list[str], done: threading.Event) -> None:
    """`docker inspect`'s user and added capabilities of container `name`, each time it is seen, until `done`."""
    while not done.wait(0.5):
        out = subprocess.run(
            ["docker", "container", "inspect", "--format", "{{.Config.User}} {{.HostConfig.CapAdd}}", name],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if out.returncode == 0:
            users.append(out.stdout.strip())


def test_make_probe_io_reads_the_served_weights_and_leaves_them_unchanged() -> None:
    digest = hashlib.sha256(WEIGHTS.read_bytes()).hexdigest()
    # Cold, but for what vLLM has mapped: the probe must neither fill the cache (a whole-file hash did, twice a
    # run) nor empty it (fio's default invalidate=1 did).
    fd = os.open(WEIGHTS, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    cached = _cached_pages(WEIGHTS)
    kept = probe_runs()
    # Who fio runs as, read from Docker while its container runs (it is removed after): the probe image's user.
    users: list[str] = []
    done = threading.Event()
    watcher = threading.Thread(target=_watch_user, args=("refdeploy-vllm-probe-io", users, done))
    watcher.start()
    try:
        r = make("probe-io", "ANSIBLE_ARGS=-e probe_io_runtime_s=3")
    finally:
        done.set()
        watcher.join()
    assert r.rc == 0, r.output[-4000:]
    assert set(users) == {"10003:10003 []"}, users
    assert _cached_pages(WEIGHTS) == cached < WEIGHTS.stat().st_size // 4096
    assert hashlib.sha256(WEIGHTS.read_bytes()).hexdigest() == digest
    assert "PASS" in r.output
    (fetched,) = [line for line in r.output.splitlines() if "fetched to: " in line]
    run_dir = Path(fetched.split("fetched to: ", 1)[1].strip().strip("'\""))
    assert run_dir.is_relative_to(REPO / "runs" / "localhost")
    result = json.loads((run_dir / "result.json").read_text())
    assert result["target_unchanged"] is True
    assert result["verdict"] == "PASS"
    assert {run["iodepth"] for run in result["runs"]} == {1, 64}
    assert all(run["fio"]["read_iops"] > 0 for run in result["runs"])
    assert (run_dir / "qd64" / "stdout.json").is_file()
    outcome = json.loads((run_dir.parent / "probe-io-outcome.json").read_text())
    assert (outcome["kind"], outcome["ok"], outcome["exit"]) == ("pass", True, 0), outcome
    assert probe_runs() == kept  # its scratch directory on the host is removed once fetched


def test_probe_io_thresholds_that_are_missed_fail_the_check() -> None:
    limits = json.dumps({"probe_io_thresholds": {"1": {"min_iops": 1e9}}})
    r = make("probe-io", f"ANSIBLE_ARGS=-e probe_io_runtime_s=2 -e '{limits}'")
    assert r.rc != 0
    assert "the I/O check FAILED on localhost" in r.output
    assert "FAIL" in r.output and "IOPS" in r.output
    # The run directory this probe printed keeps its outcome, the line it failed with.
    (fetched,) = [line for line in r.output.splitlines() if "fetched to: " in line]
    run_dir = Path(fetched.split("fetched to: ", 1)[1].strip().strip("'\"")).parent
    outcome = json.loads((run_dir / "probe-io-outcome.json").read_text())
    assert (outcome["kind"], outcome["ok"], outcome["exit"]) == ("finding", False, 1), outcome
    assert outcome["line"].startswith("FINDING: the I/O check FAILED on localhost"), outcome


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("/var/lib/refdeploy/models/tiny-llama/no-such.bin", "does not exist"),
        ("/etc/hostname", "is outside the data directories"),
    ],
)
def test_probe_io_bad_targets_fail_clearly_and_write_nothing(target: str, message: str) -> None:
    before = sorted(p.name for p in MODEL_DIR.rglob("*"))
    r = make("probe-io", f"ANSIBLE_ARGS=-e probe_io_target={target}")
    assert r.rc != 0
    assert message in r.output
    assert sorted(p.name for p in MODEL_DIR.rglob("*")) == before
