"""Interrupts that clean up, and one lock for every change (issue 31 items 3 and 4), on the embedded default.

A real Ctrl-C (SIGINT to make's process group, as a terminal sends it) in the middle of make bench, make capture
and make probe-io: afterwards no container of that run is left (`docker ps -a` by the run's label and by name),
the host's lock is released, the serving container still serves, the note the next operation prints says
what was removed and where the run's incomplete results are, and each run directory the run made holds that note
as its result (interrupted.json). Then make undeploy during a replacing make deploy:
refused with the lock's line, and the deploy ends serving.

Tests run in file order and share the one deployment of cpu-tiny (the `deployed` fixture); the last test replaces
it once (one engine start).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from serving.bridge import hostlock
from tests.integration.conftest import CONTAINER, REPO, TEST_HOST_CONTAINERS, BackgroundMake, complete, docker, make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("deployed")]
ENGINE_STARTS = 1

STATE = Path("/var/lib/refdeploy")
LOCK = STATE / "lock"
NOTE = STATE / "interrupted.json"


def _run_containers(run_id: str) -> list[str]:
    out = docker("ps", "-a", "--filter", f"label={hostlock.RUN_LABEL}={run_id}", "--format", "{{.Names}}")
    return out.split()


def _product_containers() -> list[str]:
    """Every container whose name starts with the serving container's, the serving container and its sidecar
    aside: what a bench, capture or probe left behind. Not the SSH test hosts' (refdeploy-vllm-gpu*), which the
    other lane starts and removes meanwhile."""
    names = docker("ps", "-a", "--format", "{{.Names}}").split()
    return [
        n for n in names
        if n.startswith(f"{CONTAINER}-") and n != f"{CONTAINER}-samplers" and not TEST_HOST_CONTAINERS.match(n)
    ]  # fmt: skip


# (make arguments, what shows the run is under way: a container of the run that has run this long, seconds)
RUNS = {
    "bench": (("bench", "WORKLOAD=smoke"), 4),
    "capture": (("capture", "SECONDS=60"), 4),
    "probe-io": (("probe-io",), 2),
}


@pytest.mark.parametrize("target", list(RUNS))
def test_ctrl_c_mid_run_removes_its_containers_and_releases_the_lock(target: str) -> None:
    args, settle_s = RUNS[target]
    NOTE.unlink(missing_ok=True)
    runs = REPO / "runs" / "localhost"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")} | {"ANSIBLE_NOCOLOR": "1"}
    # Its own session: SIGINT to its process group reaches make, the wrapper, ansible-playbook and its workers,
    # as a terminal's Ctrl-C does.
    proc = subprocess.Popen(["make", "--no-print-directory", "-C", str(REPO), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        run_id, started = "", []
        while not started:
            assert proc.poll() is None, proc.communicate()[0][-4000:]
            assert time.monotonic() < deadline, f"make {target} started no container within 240 s"
            if not run_id and (LOCK / "holder.json").is_file():
                run_id = json.loads((LOCK / "holder.json").read_text() or "{}").get("run_id", "")
            started = _run_containers(run_id) if run_id else []
            time.sleep(0.5)
        time.sleep(settle_s)
        assert _run_containers(run_id), f"make {target}'s container ended before the interrupt: widen settle_s"
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    took = time.monotonic() - t0
    said = " ".join(out.split())
    assert proc.returncode != 0, out[-4000:]
    assert f"make {target} ended early (interrupted by SIGINT)" in said, out[-4000:]
    assert _run_containers(run_id) == [], out[-4000:]
    assert _product_containers() == [], out[-4000:]
    assert not LOCK.exists(), out[-4000:]
    note = json.loads(NOTE.read_text())
    assert (note["run_id"], note["operation"], note["lock"]) == (run_id, target, "released")
    # What it wrote is kept and named; each run directory it made holds its result, the note (issue 46 item 6):
    # interrupted, what the cleanup removed, where the host kept the run's scratch (its partial output).
    made = sorted(set(runs.iterdir()) - before)
    assert made, "the run made no run directory before the interrupt: widen settle_s"
    assert [d for d in made if json.loads((d / "interrupted.json").read_text()) != note] == [], (made, note)
    assert sorted(str((REPO / d).resolve()) for d in note["run_dirs"].split()) == [str(d) for d in made], (note, made)
    assert set(note["removed"].split()) >= set(started), note
    # Named, and kept for what it holds: the run's scratch directory on the host (the bench's and the probes').
    host_dirs = [Path(d) for d in note["host_dirs"].split()]
    assert host_dirs and all(d.is_dir() for d in host_dirs), note
    # The product keeps them for the operator; the test made them, so it removes them: a later module that checks
    # nothing was left in probe-runs/ (or waits for a capture's window to open there) must see only its own.
    for d in host_dirs:
        assert d.is_relative_to(STATE), d
        shutil.rmtree(d)
    print(f"make {target}: interrupted {took:.1f} s after SIGINT; removed {note['removed']}; wrote {note['run_dirs']}")
    # The engine was not touched: it still answers.
    assert complete("Hello", 4)["choices"]


def test_the_next_operation_says_what_the_interrupted_one_left() -> None:
    """The previous test left its note (probe-io's): the next operation that takes the lock says it, once."""
    assert NOTE.is_file(), "run after test_ctrl_c_mid_run_removes_its_containers_and_releases_the_lock"
    note = json.loads(NOTE.read_text())
    r = make("deploy")  # a no-op deploy: the engine runs the plan's spec
    assert r.rc == 0, r.output[-4000:]
    said = " ".join(r.output.split())
    assert f"the previous make probe-io on localhost (run {note['run_id']}) ended early (interrupted by SIGINT" in said
    assert not NOTE.exists()


def test_undeploy_during_a_deploy_is_refused_and_the_deploy_ends_serving() -> None:
    before = docker("inspect", "-f", "{{.Id}}", CONTAINER).strip()
    deploy = BackgroundMake("deploy", "ANSIBLE_ARGS=-e serve_force_replace=true")
    deadline = time.monotonic() + 240
    while not (LOCK / "holder.json").is_file():
        assert deploy.running and time.monotonic() < deadline, "the deploy never took the lock"
        time.sleep(0.2)
    held = json.loads((LOCK / "holder.json").read_text())
    r = make("undeploy")
    assert r.rc != 0
    assert (
        f"make undeploy on localhost is refused, nothing was changed: the host is held by make deploy "
        f"(run {held['run_id']})"
    ) in " ".join(r.output.split())
    done = deploy.result(timeout=600)
    assert done.rc == 0, done.output[-4000:]
    assert docker("inspect", "-f", "{{.Id}}", CONTAINER).strip() != before  # replaced, and serving
    assert complete("Hello", 4)["choices"]
    assert not LOCK.exists()
