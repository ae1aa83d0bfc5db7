"""The decisions the playbooks ask for, in the shape Ansible's filters take them (ansible/filter_plugins).

Each takes the run's plan (the refdeploy_plan fact, serving/plan/plan.py) and plain settings from the role's
variables, and returns plain data. Bad input is returned as {"error": one line} for the role to stop on,
rather than raised through Jinja, which would bury the line in a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from serving.config.redact import API_KEY_MOUNT
from serving.errors import InputError
from serving.plan.plan import parse_plan, running_state, verify_ranks
from serving.plan.render import API_SOCKET_MOUNT, PROBE_GID, PROBE_UID


def redact(document: Any) -> Any:
    """The document with secret-looking values hidden, as every artifact is written (serving/config/redact.py)."""
    from serving.config.redact import redact as _redact

    return _redact(document)


def running(container: Any, planned: Any, target_id: Any = None) -> dict[str, Any]:
    """Is the container under the planned name the planned one (serving.plan.plan.running_state)?"""
    return running_state(container or None, planned or None, str(target_id) if target_id is not None else None)


def limit_drift(container: Any, spec: Any, plan: Mapping[str, Any], ours: Any = True) -> dict[str, Any]:
    """The running container's limits, Docker's and the kernel's at every level, against the plan's, and how a
    deploy restores them (serving.host.cgroup_limits); `ours`: it was started from the planned spec."""
    from serving.host.cgroup_limits import describe_drift
    from serving.host.cgroup_limits import limit_drift as drift_of

    found = drift_of(spec or None, container or None, ((plan or {}).get("gpu") or {}).get("slice"), bool(ours))
    return {**found, "line": describe_drift(found)}


def run_add(record: Any, items: Mapping[str, Any]) -> dict[str, Any]:
    """The run record (the variable refdeploy_run) with items added, as each role's set_fact adds them
    (serving/record/run_record.py). A key no role owns is the roles' own mistake, not an operator's input
    (tests/unit/record/test_run_record.py holds each key to its role): it raises, and the task fails naming it."""
    from serving.record.run_record import add

    return add(record if isinstance(record, Mapping) else None, items)


def serve_due(plan: Mapping[str, Any], host: Any, settings: Mapping[str, Any]) -> list[str]:
    """Why serve must run its changes on this host, one line each; [] on a converged host (serving.plan.converge)."""
    from serving.plan.converge import serve_due as due

    return due(plan, host or {}, settings)


def main_affinity(host_limits: Any) -> dict[str, list[str]] | None:
    """Each process's main-thread affinity in a container's readings, kept at launch (serving.host.cgroup_limits)."""
    from serving.host.cgroup_limits import main_affinity as of

    return of(host_limits or None)


def status_lines(host_state: Any, plan: Mapping[str, Any]) -> list[str]:
    """make status's lines on restarts and the samplers sidecar (serving.plan.status)."""
    from serving.plan.status import status_lines as lines

    return lines(host_state or None, plan)


def effective(readings: Mapping[str, Any], plan: Any) -> dict[str, Any]:
    """The engine's effective configuration against what its launch asked for."""
    from serving.record.effective import describe_mismatches, effective_config

    p = parse_plan(plan)
    if p.launch is None:
        return {"error": f"the plan has no container on {p.host}", "mismatches": []}
    try:
        result = effective_config(
            p.launch.vllm, p.launch.model, p.launch.env, str(readings.get("log", "")), str(readings.get("metrics", ""))
        )
    except InputError as e:
        return {"error": str(e), "mismatches": []}
    result["error"] = (
        f"effective config differs from the plan of profile {p.profile.name}: {describe_mismatches(result)}"
        if result["mismatches"]
        else None
    )
    return result


def memory_phases(log_text: Any) -> dict[str, Any]:
    """The engine log's memory-by-phase rows (patch 0003) as the manifest's per-rank table."""
    from serving.record.memory_phases import parse, table

    return table(parse(str(log_text or "")))


def ranks(workers: Any, plan: Any) -> dict[str, Any]:
    """The running workers against the launch's ranks."""
    return verify_ranks(parse_plan(plan), list(workers or []))


def _pcie_min(gpu_class: Mapping[str, Any] | None) -> tuple[int, int] | None:
    if not gpu_class or gpu_class.get("pcie_min_gen") is None:
        return None
    return int(gpu_class["pcie_min_gen"]), int(gpu_class.get("pcie_min_width") or 1)


def capture_load(p: Any, workload: str) -> dict[str, Any] | None:
    """What a capture with WORKLOAD=<name or path> sends (probes/senders/load.py's LoadSpec fields), None without one.
    The workload's shape at its first concurrency level (or 1 where it has only arrival rates), to the served
    model on the serving container's own port."""
    from serving.config.workload import load_workload

    if not workload:
        return None
    w = load_workload(workload)
    if w.dataset not in ("random", "shared_prefix") or w.api != "completions":
        raise InputError(
            f"WORKLOAD={workload}: a capture's own load sends random token prompts to /v1/completions; for "
            f"{w.api} with {w.dataset} prompts, run `make bench WORKLOAD={workload}` and capture beside it"
        )
    if p.bench is None:
        raise InputError(f"WORKLOAD={workload}: the plan has no serving container on {p.host} to send requests to")
    return {
        "workload": w.name,
        "model": p.bench.served_name,
        "input_len": w.input_len,
        "output_len": w.output_len,
        "concurrency": w.concurrency[0] if w.concurrency else 1,
        "seed": w.seed,
        "timeout_s": w.run_timeout_s,
    }


def capture_argv(plan: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The probe container's `docker run` argv of a capture (or one part), from the plan's probe targets."""
    from serving.evidence.probe_plan import (
        capture_timeout_s,
        choose_perf_capability,
        probe_parts,
        render_capture_argv,
    )

    p = parse_plan(plan)
    try:
        load = capture_load(p, str(settings.get("workload") or ""))
        parts = probe_parts(str(settings.get("probe") or "capture"))
        # settings["perf_check"]: what the role's PERFMON check printed (serving/evidence/probe_plan.py says what).
        perf = choose_perf_capability(
            str(settings.get("perf_capability") or "PERFMON"), str(settings.get("perf_check") or "")
        )
        files = [str(f) for f in settings.get("data_files") or []]
        if not files and p.probes.data_file:
            files = [p.probes.data_file]
        argv = render_capture_argv(
            p.images.probes_tag,
            p.profile.container.name,
            p.api.socket_dir,
            str(settings["out"]),
            float(settings["seconds"]),
            parts,
            files,
            p.probes.data_dirs,
            p.host,
            perf.capability or "PERFMON",
            int(settings.get("record_seconds") or 0),
            gpu_access=p.probes.gpu_access.model_dump() if p.probes.gpu_access else None,
            cpus=p.probes.cpus,
            data_file_note="" if files else p.probes.data_file_note,
            pcie_min=_pcie_min(settings.get("gpu_class")),
            workload=load,
            api_key_copy=p.api.key_copy if p.api.key_file else "",
            rank_trace_dir=p.rank_trace_dir or "",
            engine=settings.get("engine"),
            container_name=str(settings.get("container") or f"{p.profile.container.name}-probe"),
            perf_skip=perf.skip,
        )
    except InputError as e:
        return {"error": str(e)}
    timeout_s = int(settings.get("timeout_s") or 0) or capture_timeout_s(
        float(settings["seconds"]), int(settings.get("record_seconds") or 0)
    )
    if load:
        timeout_s += int(load["timeout_s"])
    # perf_keep: the capability Docker answered on, for the role to keep for this Docker version and kernel.
    return {"argv": argv, "timeout_s": timeout_s, "container": argv[argv.index("--name") + 1],
            "workload": load, "perf_keep": perf.capability if perf.keep and "perf" in parts else "",
            "perf_skip": perf.skip if "perf" in parts else ""}  # fmt: skip


def _requests_container(p: Any, name: str, out: str) -> list[str]:
    """`docker run` of a probe-image container that sends requests to vLLM's socket (make profile, make validate):
    no network, of the socket's group with its directory mounted read-only, read-only, no capability, 256 MiB,
    writing only `out` (at /out), on the CPUs the plan keeps for the probes, with the API key's copy where the
    server has one; up to the image."""
    argv = ["docker", "run", "--rm", "--name", name, "--network", "none",
            "--group-add", str(p.api.socket_gid), "--volume", f"{p.api.socket_dir}:{API_SOCKET_MOUNT}:ro",
            "--read-only", "--tmpfs", "/tmp:size=16m", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--memory", "256m", "--pids-limit", "256", "--volume", f"{out}:/out"]  # fmt: skip
    if p.probes.cpus:
        argv += ["--cpuset-cpus", p.probes.cpus]
    if p.api.key_file:
        argv += ["--volume", f"{p.api.key_copy}:{API_KEY_MOUNT}:ro"]
    return [*argv, p.images.probes_tag]


def correctness_argv(plan: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The probe container of `make validate`: the fixed requests (probes/senders/correctness.py) inside vLLM's network
    namespace, read-only, no capability; its output in settings["out"] on the host."""
    p = parse_plan(plan)
    name = f"{p.profile.container.name}-validate"
    key = bool(p.api.key_file)
    argv = _requests_container(p, name, str(settings["out"]))
    argv += ["python3", "-m", "probes.senders.correctness", "--out", "/out",
             "--socket", p.api.container_socket, "--model", p.profile.model.served_name]  # fmt: skip
    if key:
        argv += ["--api-key-file", API_KEY_MOUNT]
    # The first request after a start waits on the engine's warm-up (16 s here); eight requests of at most 5 min.
    return {"argv": argv, "timeout_s": 8 * 300 + 60, "container": name}


def profiler_argv(plan: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The probe container of `make profile`: /start_profile, REQUESTS requests of WORKLOAD, /stop_profile
    (probes/senders/profiler_run.py), over vLLM's socket; {"error": line} on bad input."""
    p = parse_plan(plan)
    try:
        if p.profiler is None:
            raise InputError(f"the plan of {p.host} runs no profiler: make profile plans it (refdeploy_profiler=torch)")
        requests = int(settings.get("requests") or 0)
        if not 1 <= requests <= 1000:
            raise InputError(f"REQUESTS={settings.get('requests')!r}: profile 1 to 1000 requests (a few are enough)")
        spec = capture_load(p, str(settings.get("workload") or "smoke"))
        assert spec is not None
        key = bool(p.api.key_file)
        spec["api_key_file"] = API_KEY_MOUNT if key else ""
        name = f"{p.profile.container.name}-profile"
        argv = _requests_container(p, name, str(settings["out"]))
        stop_s = int(settings.get("stop_timeout_s") or 600)
        argv += ["python3", "-m", "probes.senders.profiler_run", "--out", "/out",
                 "--requests", str(requests), "--stop-timeout-s", str(stop_s),
                 "--spec-json", json.dumps(spec, sort_keys=True, separators=(",", ":"))]  # fmt: skip
    except InputError as e:
        return {"error": str(e)}
    # Each request bounded by the workload's run timeout; the stop by its own; a minute for the rest.
    timeout_s = requests * int(spec["timeout_s"]) + stop_s + 60
    return {"argv": argv, "timeout_s": timeout_s, "container": name, "workload": spec}


def _depths(value: Any) -> list[int]:
    """probe_io_depths as queue depths: a list, or one depth or "1,64" (what `-e probe_io_depths=64` gives)."""
    if value in (None, "", []):
        return [1, 64]
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    try:
        depths = [int(str(d).strip()) for d in items]
    except ValueError:
        raise InputError(
            f"probe_io_depths: expected queue depths like [1, 64] (or -e probe_io_depths=1,64), got {value!r}"
        ) from None
    return depths


def probe_io_target(plan: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """fio's target, {"target"}: the inventory's probe_io_target (settings "target"), else the plan's largest
    served file; "error", one line, where it is outside the data directories (settings "data_dirs", else the
    plan's), and, with the host's stat of it (settings "stat": rc, stdout, stderr), where fio could not read it
    (serving/evidence/probe_outcome.py io_target_problem). "" and an error where there is none."""
    from serving.evidence.probe_outcome import io_target_problem
    from serving.evidence.probe_plan import io_target_outside

    p = parse_plan(plan)
    target = str(settings.get("target") or "") or p.probes.data_file or ""
    if not target:
        return {
            "target": "",
            "error": f"nothing to read on {p.host}: {p.probes.data_file_note}; stage the model, or set "
            "probe_io_target to a file the server reads",
        }
    outside = io_target_outside(target, [str(d) for d in settings.get("data_dirs") or []] or p.probes.data_dirs)
    if outside:
        return {"target": target, "error": outside}
    stat = settings.get("stat")
    if not isinstance(stat, Mapping):
        return {"target": target}
    problem = io_target_problem(
        p.host, target, int(stat.get("rc", -1)), str(stat.get("stdout") or ""), str(stat.get("stderr") or "")
    )
    return {"target": target} if problem is None else {"target": target, "error": problem}


def probe_io_argv(plan: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """fio's `docker run` argv: the largest served file unless the inventory names a target."""
    from serving.evidence.probe_plan import parse_thresholds, probe_io_timeout_s, render_probe_io_argv

    p = parse_plan(plan)
    target = str(settings.get("target") or "") or p.probes.data_file
    dirs = [str(d) for d in settings.get("data_dirs") or []] or p.probes.data_dirs
    if not target:
        return {
            "error": f"nothing to read on {p.host}: {p.probes.data_file_note}; stage the model, or set "
            "probe_io_target to a file the server reads"
        }
    runtime_s = int(settings.get("runtime_s") or 10)
    try:
        depths = _depths(settings.get("depths"))
        argv = render_probe_io_argv(
            p.images.probes_tag,
            target,
            dirs,
            str(settings["out"]),
            runtime_s,
            depths,
            parse_thresholds(settings.get("thresholds") or {}),
            # Named after the serving container, as the capture's is: one engine may run two serving stacks.
            container_name=f"{p.profile.container.name}-probe-io",
            cpus=p.probes.cpus,
        )
    except InputError as e:
        return {"error": str(e)}
    timeout_s = int(settings.get("timeout_s") or 0) or probe_io_timeout_s(runtime_s, len(depths))
    # out_owner: the fio container's user (PROBE_UID:PROBE_GID), the owner the role gives the output directory.
    return {"argv": argv, "target": target, "timeout_s": timeout_s, "container": argv[argv.index("--name") + 1],
            "out_owner": {"owner": PROBE_UID, "group": PROBE_GID}}  # fmt: skip


def bench_plan(plan: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The bench client's plan, its docker argv, the bench manifest and a timeout (serving/bench/protocol.py)."""
    from serving.bench.protocol import cache_salt_for, plan_bench
    from serving.config.workload import load_workload

    try:
        workload = load_workload(str(settings["workload"]))
        runs = settings.get("runs")
        if runs not in (None, ""):
            if not str(runs).strip().isdigit() or int(runs) < 1:
                raise InputError(f"RUNS={runs}: expected a whole number of measured runs, 1 or more")
            workload = workload.model_copy(update={"runs": int(runs)})
        return plan_bench(
            workload,
            parse_plan(plan),
            str(settings["host_out"]),
            str(settings["host_cpus"]),
            str(settings.get("server_cpuset") or ""),
            str(settings.get("client_cpus") or ""),
            settings.get("gpu_class") or None,
            int(settings.get("seed_offset") or 0),
            # bench_cache_salt given: the runs reuse the blocks an earlier bench with it cached (flagged hits).
            (str(settings.get("cache_salt") or "") if workload.prefix_cache != "off" else None)
            or cache_salt_for(workload, time.time()),
            str(settings.get("via") or ""),
            int(settings["engine_pid"]) if settings.get("engine_pid") else None,
            str(settings.get("search") or ""),
        )
    except InputError as e:
        return {"error": str(e)}


def docker_unreachable(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Docker did not answer: may this run install and start it (serving/host/docker_engine.py)?"""
    from serving.host.docker_engine import unreachable

    return unreachable(settings)


def docker_engine(readings: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """What the docker_engine role installs, and how it starts dockerd (serving/host/docker_engine.py)."""
    from serving.host.docker_engine import engine_plan

    return engine_plan(readings, settings)


def engine_restart(readings: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the runtime role restarts dockerd on its new settings, and whether it may
    (serving/host/docker_engine.py)."""
    from serving.host.docker_engine import restart_plan

    return restart_plan(readings, settings)


def io_outcome(run: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The fio container's exit: pass, finding or error, and its line (serving/evidence/probe_outcome.py)."""
    from serving.evidence.probe_outcome import io_outcome as outcome

    return outcome(run, settings)


def capture_outcome(run: Mapping[str, Any], change: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The probe container's exit and the serving container's change: pass, finding or error, and its line."""
    from serving.evidence.probe_outcome import capture_outcome as outcome

    return outcome(run, change, settings)


def gpu_smoke(run: Mapping[str, Any], plan: Any, host: Any, held: Any) -> dict[str, Any]:
    """The GPU smoke test's run (a command task's result) against the plan's: {"problems": [one line each],
    "measured": the collectives' seconds in one line, or "" where they did not run (a failed run)}."""
    from serving.plan.gpu_smoke import measured, outcome

    smoke = parse_plan(plan).gpu_smoke
    if smoke is None:
        return {"problems": [f"the plan of {host} has no GPU smoke test to judge"], "measured": ""}
    problems = outcome(
        str(run.get("stdout") or ""), str(run.get("stderr") or ""), int(run.get("rc", -1)), smoke, str(host),
        bool(held),
    )  # fmt: skip
    return {"problems": problems, "measured": measured(str(run.get("stdout") or "")) or ""}


def torch_source(plan: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Where the CPU image's torch comes from: the wheelhouse or PyTorch's CPU index (serving/plan/wheelhouse.py).

    settings: host, wheelhouse_dir, is_dir (images_wheelhouse_dir is a directory on the host), found (its
    torch-*.whl paths), arch (the host's architecture), context (the build context on the host)."""
    from dataclasses import asdict

    from serving.plan.wheelhouse import torch_source as decide

    try:
        source = decide(
            parse_plan(plan).images,
            host=str(settings.get("host") or ""),
            wheelhouse_dir=str(settings.get("wheelhouse_dir") or ""),
            found=[str(f) for f in settings.get("found") or []] if settings.get("is_dir") else None,
            arch=str(settings.get("arch") or ""),
            context=str(settings.get("context") or ""),
        )
    except InputError as e:
        return {"error": str(e)}
    return {**asdict(source), "error": None}


def torch_fetched(
    run: Mapping[str, Any], source: Mapping[str, Any], saved: Any, timeout_s: Any = None
) -> dict[str, Any]:
    """The download from PyTorch's index (a refdeploy_watch result, bounded by timeout_s) and the torch wheels the
    build context then holds: {"error": None}, or the one line naming both remedies (serving/plan/wheelhouse.py)."""
    from serving.plan.wheelhouse import TorchSource, fetch_outcome

    known = {k: v for k, v in source.items() if k in TorchSource.__dataclass_fields__}
    rc = run.get("rc")
    line = fetch_outcome(
        TorchSource(**known), -1 if rc is None else int(rc), str(run.get("stdout") or ""),
        str(run.get("stderr") or run.get("msg") or ""), [str(f) for f in saved or []],
        int(timeout_s) if timeout_s else None,
    )  # fmt: skip
    return {"error": line}


def engine_start(run: Mapping[str, Any], bound_s: Any) -> str:
    """The line for the engine's start that serving/standalone/engine_wait.py followed (refdeploy_watch's result)."""
    from serving.standalone.engine_wait import describe

    return describe(run.get("rc"), str(run.get("stdout") or ""), bound_s)
