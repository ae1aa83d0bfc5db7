"""The placement role against real running workers: the CPU deployment's one VLLM::Worker, checked against
plans of this machine's CPUs. Each worker's binding is read inside the serving container
(serving/standalone/inside_readings.py) by the same module run the serve role makes once the engine answers
(refdeploy_engine_readings, its container_readings), and the role compares it with the plan's ranks on the
controller; a rank the worker does not follow is refused with its line. (The multi-rank case, a rank per CPU,
is tests/integration/test_tp2.py.)

The CPU build binds the worker's threads itself (VLLM_CPU_OMP_THREADS_BIND=auto in the profile): its main
thread runs on CPU 0 of the container's cpuset 0-1 (vLLM keeps CPU 1 for the engine), which is what the role
reads (measured here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import CONTAINER, REPO, inspect, make, plan_here

pytestmark = pytest.mark.integration
ENGINE_STARTS = 0


def _plan(cpus: str | None) -> dict[str, Any]:
    """cpu-tiny's plan on this machine (refdeploy plan), rank 0 bound to `cpus` (None: anywhere in the cpuset)."""
    plan = plan_here()
    plan["launch"]["ranks"] = [{"rank": 0, "cpus": cpus, "mems": "0", "gpu": None, "node": None}]
    return plan


def _run_role(tmp_path: Path, plan: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    vars_file = tmp_path / "vars.json"
    inside = str(REPO / "serving" / "standalone" / "inside_readings.py")
    vars_file.write_text(
        json.dumps({"refdeploy_plan": plan, "kept_dir": str(tmp_path / "effective"), "inside": inside})
    )
    playbook = REPO / "ansible" / f".test-placement-{os.getpid()}.yml"
    # The container read as the serve role reads it after a launch (roles/serve/tasks/engine.yml), then the role.
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - refdeploy_engine_readings:\n"
        f"        container: {CONTAINER}\n"
        '        socket: "{{ refdeploy_plan.api.container_socket }}"\n'
        '        kept_dir: "{{ kept_dir }}"\n'
        "        inside_script: \"{{ lookup('ansible.builtin.file', inside) }}\"\n"
        '        inside_args: ["{{ refdeploy_plan.launch.model.container_path }}"]\n'
        "      register: got\n"
        "    - ansible.builtin.include_role:\n"
        "        name: placement\n"
        "      vars:\n"
        '        placement_readings: "{{ got.container_readings }}"\n'
    )
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    try:
        return subprocess.run(
            [
                str(REPO / ".venv" / "bin" / "ansible-playbook"),
                *("-i", str(REPO / "inventory" / "local"), "--limit", "localhost"),
                *("-e", f"@{vars_file}", str(playbook)),
            ],
            capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
        )  # fmt: skip
    finally:
        playbook.unlink()


@pytest.fixture(scope="module", autouse=True)
def deployed_if_idle() -> Iterator[None]:
    """Deploy when nothing runs, and leave the host as it was found (conftest's `deployed` leaves it deployed)."""
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
    for cpus in ("0", None):
        r = _run_role(tmp_path, _plan(cpus))
        assert r.returncode == 0, r.stdout[-3000:]
        out = " ".join(r.stdout.split())
        assert "rank 0: VLLM::Worker (pid" in out and "on CPUs 0, memory nodes 0" in out, out[-2000:]
        assert "as planned" in out and "NOT as planned" not in out
        # Where the worker's memory is, read from its numa_maps inside the container: all on this machine's one
        # node, and some of it (the loaded weights are 17 MiB).
        # Its own shared memory is a semaphore page or so on the CPU build (no pinned buffers): 0 MiB, or none.
        where = re.search(
            r"\(anonymous memory N0 (\d+) MiB; shared and pinned (?:N0 \d+ MiB|none): 0% outside its nodes\)", out
        )
        assert where and int(where.group(1)) >= 17, out[-2000:]


def test_a_worker_outside_its_plan_is_refused_with_its_rank(tmp_path: Path) -> None:
    r = _run_role(tmp_path, _plan("0-1"))
    out = " ".join(r.stdout.split())
    assert r.returncode != 0
    assert (
        "the vLLM workers on localhost are not bound as planned: "
        "rank 0: Cpus_allowed_list is 0, the plan binds it to 0-1"
    ) in out, out[-3000:]
