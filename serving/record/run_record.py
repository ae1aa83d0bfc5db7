"""The run record: what one deploy's roles read and did, added to as the playbook runs (the variable `refdeploy_run`,
which each role's set_fact adds to through the filter refdeploy_run_add) and written by the manifest role. Each key
has one role that adds it; the manifest reads the record, never another role's variables.

A variable, not a fact: Ansible deep-copies a host's facts twice for every task it runs (VariableManager.get_vars),
and the record holds the plan and the container's inspection (~100 KB); set_fact's variables are not copied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# key: the role that adds it
KEYS: dict[str, str] = {
    "plan": "plan",
    "deploy_started_utc": "plan",
    "docker_server_version": "plan",
    # The host's tuning (kernel command line, governor, THP, swappiness, NUMA balancing, GPU settings) as the
    # plan's read found it: the module's `tuning` readings, parsed by the manifest (serving/host/host_tuning.py).
    "host_tuning": "plan",
    "host_settings": "runtime",
    "slice_readings": "serving_slice",
    "launched": "serve",
    "rendered_path": "serve",
    "replaced": "serve",
    "effective": "serve",
    "healthy_observed_utc": "serve",
    # Each worker's memory at its phase boundaries, from the engine's log (patch 0003; serving/record/memory_phases.py).
    "memory_phases": "serve",
    # The running container as read once after the launch, in the same module run as the engine's wait (its
    # inspection, its image's, what it sees inside): placement checks the workers in it, the manifest records it.
    "container_readings": "serve",
    # The front door as the deploy started and checked it: its URL, certificate fingerprint, the check's answers.
    "front_door": "serve",
    "placement": "placement",
}


class RunRecordError(ValueError):
    pass


def add(record: Mapping[str, Any] | None, items: Mapping[str, Any]) -> dict[str, Any]:
    """record with items added (a key added again takes the new value); an unknown key is refused."""
    unknown = sorted(set(items) - set(KEYS))
    if unknown:
        raise RunRecordError(f"not a run record key: {', '.join(unknown)} (known: {', '.join(KEYS)})")
    return {**(record or {}), **items}
