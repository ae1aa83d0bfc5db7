"""The serving package's decisions as filters, so the playbooks ask for them in-process (serving/playbooks.py).

container | refdeploy_running(planned_spec[, target_id])   is it the planned container? (the one place)
readings  | refdeploy_effective(plan)                      the engine's effective config against its launch
workers   | refdeploy_ranks(plan)                          each worker rank's CPUs and memory nodes
plan      | refdeploy_capture_argv(settings)               the probe container of make capture / make probe
plan      | refdeploy_probe_io_argv(settings)              the fio container of make probe-io
plan      | refdeploy_bench_plan(settings)                 the bench client's plan and manifest
"""

from __future__ import annotations

from typing import Any


class FilterModule:
    def filters(self) -> dict[str, Any]:
        from serving import playbooks

        return {
            "refdeploy_running": playbooks.running,
            "refdeploy_effective": playbooks.effective,
            "refdeploy_ranks": playbooks.ranks,
            "refdeploy_capture_argv": playbooks.capture_argv,
            "refdeploy_probe_io_argv": playbooks.probe_io_argv,
            "refdeploy_bench_plan": playbooks.bench_plan,
        }
