"""Evidence is kept: a capture whose vLLM is killed mid-window, against the real CPU deployment.

The capture's container shares vLLM's PID namespace, so killing vLLM's main process kills the capture too (exit
137). What it had written must still land in runs/, with the death stated (container ID, restart count and state
before and after), `make` must exit non-zero, and no probe container may be left behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.integration.conftest import (
    BASE_URL,
    CONTAINER,
    REPO,
    WINDOW_OPEN,
    BackgroundMake,
    docker,
    inspect,
    make,
    probe_runs,
    server_open,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("deployed")]
ENGINE_STARTS = 1


def _healthy(timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with server_open(f"{BASE_URL}/health", timeout=5) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(1)
    return False


def test_a_capture_whose_vllm_is_killed_mid_window_keeps_and_reports_what_it_had() -> None:
    before = inspect("refdeploy-vllm")
    assert before is not None and before["State"]["Running"]
    kept = probe_runs()
    run = BackgroundMake("capture", "SECONDS=20")
    # The window is open once the samplers write; a few seconds in, vLLM's main process dies (as in a crash).
    run.wait_for(WINDOW_OPEN, timeout=120)
    time.sleep(4)
    os.kill(before["State"]["Pid"], signal.SIGKILL)
    r = run.result(timeout=300)

    assert r.rc != 0
    assert "died or was replaced in the window" in r.output
    assert f"restarts {before['RestartCount']} -> " in r.output
    assert before["Id"][:12] in r.output
    bundle_line = next(line for line in r.output.splitlines() if "What the capture had is kept in " in line)
    bundle = Path(bundle_line.split("What the capture had is kept in ", 1)[1].split("/;", 1)[0])
    assert bundle.is_relative_to(REPO / "runs" / "localhost") and bundle.name == "capture"

    change = json.loads((bundle / "serving-container.json").read_text())
    assert change["changed"] is True
    assert change["before"]["id"] == before["Id"] and change["before"]["pid"] == before["State"]["Pid"]
    assert change["after"]["pid"] != before["State"]["Pid"] or change["after"]["status"] != "running"
    index = json.loads((bundle / "bundle.json").read_text())
    assert index["complete"] is False and index["cut_short"]["exit_code"] == 137
    assert index["requested_parts"] == ["samplers", "metrics", "stacks", "wchan", "perf", "hoststate"]
    # What it had written before it died is there: the samplers' lines, the scrapes, the host state before.
    assert samplers_lines(bundle / "samplers" / "vmstat.log") >= 2
    assert list((bundle / "metrics" / "scrapes").glob("*.prom"))
    assert (bundle / "host-state" / "before").is_dir()
    assert "CAPTURE CUT SHORT (probe container exit 137)" in (bundle / "summary.txt").read_text()

    names = docker("ps", "-a", "--format", "{{.Names}}").split()
    assert not [n for n in names if n.startswith(f"{CONTAINER}-probe")]
    assert probe_runs() == kept  # its scratch output on the host is removed once fetched
    # Docker's restart policy brings vLLM back; the next test finds it serving.
    assert _healthy(120), "vLLM did not come back after the kill"


def test_a_capture_past_its_bound_is_stopped_and_keeps_what_it_had() -> None:
    """A 40 s window under an 8 s bound (capture_timeout_s): timeout(1) stops the docker client at 8 s,
    the probe container goes with the role's always, and what the capture had is fetched and indexed. vLLM is
    left alone: same container, still running."""
    assert _healthy(120)
    before = inspect("refdeploy-vllm")
    assert before is not None and before["State"]["Running"]
    kept = probe_runs()
    r = make("capture", "SECONDS=40", "ANSIBLE_ARGS=-e capture_timeout_s=8")
    out = " ".join(r.output.split())
    assert r.rc != 0, out[-3000:]
    assert "did not finish within 8 s and was stopped; what it had is kept in " in out, out[-3000:]
    m = re.search(r"what it had is kept in (\S+?/capture)/", out)
    assert m, out[-3000:]
    bundle = Path(m.group(1))
    assert bundle.is_relative_to(REPO / "runs" / "localhost") and bundle.name == "capture"
    index = json.loads((bundle / "bundle.json").read_text())
    assert index["complete"] is False and index["cut_short"]["exit_code"] == 124
    assert "ran past 8 s (timeout of its docker run)" in index["cut_short"]["why"]
    assert samplers_lines(bundle / "samplers" / "vmstat.log") >= 2
    names = docker("ps", "-a", "--format", "{{.Names}}").split()
    assert not [n for n in names if n.startswith(f"{CONTAINER}-probe")]
    assert probe_runs() == kept  # its scratch output on the host is removed once fetched
    after = inspect("refdeploy-vllm")
    assert after is not None and after["Id"] == before["Id"] and after["State"]["Running"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
    assert not json.loads((bundle / "serving-container.json").read_text())["changed"]


def samplers_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())
