"""The numa role against real running workers: the CPU deployment's one VLLM::Worker, checked against a
NUMA plan written for this machine (one node; the "GPU" of rank 0 is only a label here). The role reads
/proc/<pid>/status inside the serving container and the controller compares; a plan the worker does not
follow is refused with the rank's line.

The CPU build binds the worker's threads itself (VLLM_CPU_OMP_THREADS_BIND=auto in the profile): its main
thread runs on CPU 0 of the container's cpuset 0-1, which is what the role reads (measured here)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CONTAINER, REPO, inspect, make

pytestmark = pytest.mark.integration


def _plan(cpus: str) -> dict[str, object]:
    return {
        "schema_version": 1,
        "groups": [
            {
                "gpus": [0],
                "nodes": [0],
                "cpus": cpus,
                "ranks": [{"rank": 0, "gpu": 0, "pci_bus_id": "none (CPU host)", "node": 0, "cpus": cpus}],
            }
        ],
        "cpuset_cpus": "0-1",
        "cpuset_mems": "0",
        "reserved": {"client_cpus": "", "probe_cpus": ""},
        "vllm_args": [],
        "env": {},
    }


def _run_role(tmp_path: Path, plan: dict[str, object]) -> subprocess.CompletedProcess[str]:
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(
        json.dumps(
            {
                "gpu_facts_plan": {"numa_plan": plan},
                "preflight_plan": {"container_spec": {"name": CONTAINER}, "profile": {"vllm": {}}},
            }
        )
    )
    playbook = tmp_path / "numa.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.include_role:\n        name: numa\n"
    )
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    env["ANSIBLE_ROLES_PATH"] = str(REPO / "ansible" / "roles")
    return subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            *("-i", str(REPO / "inventory" / "local"), "--limit", "localhost"),
            *("-e", f"@{vars_file}", str(playbook)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )


@pytest.fixture(scope="module", autouse=True)
def deployed() -> Iterator[None]:
    """Deploy when nothing runs, and leave the host as it was found."""
    c = inspect(CONTAINER)
    started = c is None or c["State"]["Status"] != "running"
    if started:
        r = make("deploy")
        assert r.rc == 0, r.output[-3000:]
    yield
    if started:
        r = make("undeploy")
        assert r.rc == 0, r.output[-3000:]


def test_the_running_worker_follows_a_plan_of_this_machines_cpus(tmp_path: Path) -> None:
    r = _run_role(tmp_path, _plan("0"))
    assert r.returncode == 0, r.stdout[-3000:]
    # The comparison ran on the controller and passed; the refusal task was skipped.
    assert "TASK [numa : NUMA | Compare the workers with the plan on the controller]" in r.stdout
    assert "skipping: [localhost]" in r.stdout.split("NUMA | Stop when a worker runs outside its plan")[1]


def test_a_worker_outside_its_plan_is_refused_with_its_rank(tmp_path: Path) -> None:
    r = _run_role(tmp_path, _plan("0-1"))
    out = " ".join(r.stdout.split())
    assert r.returncode != 0
    assert (
        "the vLLM workers on localhost are not bound as planned: "
        "rank 0 (GPU 0): Cpus_allowed_list is 0, the plan binds it to 0-1"
    ) in out, out[-3000:]
