"""The serving package's decisions as filters, so the playbooks ask for them in-process (serving/bridge/playbooks.py).

  container | refdeploy_running(planned_spec[, target_id])   is it the planned container? (the one place)
  container | refdeploy_limit_drift(planned_spec, plan)      its limits at every cgroup level against the plan's
  readings  | refdeploy_main_affinity                        each process's affinity, kept at launch
  readings  | refdeploy_effective(plan)                      the engine's effective config against its launch
  log       | refdeploy_memory_phases                        the workers' memory by phase (patch 0003), per rank
  workers   | refdeploy_ranks(plan)                          each worker rank's CPUs and memory nodes
  plan      | refdeploy_capture_argv(settings)               the probe container of make capture / make probe
  plan      | refdeploy_probe_io_target(settings)            fio's target, and why the host's stat of it refuses it
  plan      | refdeploy_probe_io_argv(settings)              the fio container of make probe-io
  plan      | refdeploy_profiler_argv(settings)               the requests container of make profile
  plan      | refdeploy_correctness_argv(settings)           the fixed requests of make validate
  plan      | refdeploy_bench_plan(settings)                 the bench client's plan and manifest
  document  | refdeploy_redact                               secret-looking values hidden (serving/config/redact.py)
  settings  | refdeploy_docker_unreachable                   Docker did not answer: may this run set it up?
  readings  | refdeploy_docker_engine(settings)              what to install, how to start dockerd
  readings  | refdeploy_engine_restart(settings)             restart dockerd on new settings? may it stop containers?
  run       | refdeploy_io_outcome(settings)                 the fio container's exit: pass, FINDING or ERROR
  run       | refdeploy_capture_outcome(change, settings)    the probe container's exit: pass, FINDING or ERROR
  run       | refdeploy_gpu_smoke(plan, host, held)          the GPU smoke test's problems, one line each
  plan      | refdeploy_torch_source(settings)               the CPU image's torch: the wheelhouse or PyTorch's index?
  run       | refdeploy_torch_fetched(source, saved, bound_s)  its download from PyTorch's index: None or the one line
  run       | refdeploy_engine_start(bound_s)                 the engine's start, phase by phase (engine_wait.py)
  host      | refdeploy_status_lines(plan)                    make status: restarts, the samplers sidecar's state
  plan      | refdeploy_serve_due(host, settings)              what a deploy must change on the host ([]: converged)
  run       | refdeploy_run_add(items)                         the run record with a role's items added

serving.bridge.playbooks is imported when a filter is first called, not when Ansible loads the plugin: Ansible loads
filter plugins in every task's worker process, and importing pydantic there cost every task 0.1 s (a no-op
deploy went from 6.4 to 11.2 s). The workers are forked from ansible-playbook, which imports it once before the
first task (callback_plugins/refdeploy_preload.py), so the first call finds it there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NAMES = (
    "running",
    "limit_drift",
    "main_affinity",
    "effective",
    "memory_phases",
    "ranks",
    "capture_argv",
    "probe_io_target",
    "probe_io_argv",
    "profiler_argv",
    "correctness_argv",
    "bench_plan",
    "docker_unreachable",
    "docker_engine",
    "redact",
    "engine_restart",
    "io_outcome",
    "capture_outcome",
    "gpu_smoke",
    "torch_source",
    "torch_fetched",
    "engine_start",
    "status_lines",
    "serve_due",
    "run_add",
)


def _lazy(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        from serving.bridge import playbooks

        return getattr(playbooks, name)(*args, **kwargs)

    call.__name__ = f"refdeploy_{name}"
    return call


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {f"refdeploy_{name}": _lazy(name) for name in NAMES}
