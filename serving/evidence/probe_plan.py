"""Render how a probe runs on a host: the `docker run` argv of the probe image.

The probe container sees the data directories read-only at their host paths
(so the probe's own checks, "inside a data directory" and "not a block device",
apply to the real paths) and one writable output directory, and nothing else:
no network, no other mounts.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from probes.capture.parts import DEFAULT_PARTS, PARTS
from serving.config.redact import API_KEY_MOUNT
from serving.errors import InputError
from serving.plan.render import (
    API_GID,
    API_SOCKET,
    API_SOCKET_MOUNT,
    GPU_ACCESS_ENV,
    PROBE_USER,
    RANK_TRACE_MOUNT,
    RUNTIME_GID,
    SOCKET_URL,
    gpu_access_description,
)


class ProbePlanError(InputError):
    pass


@dataclass(frozen=True)
class IoThresholds:
    min_iops: float | None = None
    max_p999_ms: float | None = None
    max_ms: float | None = None


def _depth_flags(flag: str, values: dict[int, float | None]) -> list[str]:
    return [f"{flag}={depth}:{value:g}" for depth, value in sorted(values.items()) if value is not None]


def io_target_outside(target: str, data_dirs: list[str]) -> str | None:
    """Why fio may not read `target` at all, in one line, or None: the probe reads only what the serving stack reads
    (its data directories). Judged before the host is asked anything of the target."""
    if not data_dirs:
        return "probe_io_data_dirs is empty: name the directories the serving stack reads"
    if not any(PurePosixPath(target).is_relative_to(d) for d in data_dirs):
        return (
            f"target {target} is outside the data directories ({', '.join(data_dirs)}): the probe reads only "
            "what the serving stack reads; set probe_io_data_dirs or choose another probe_io_target"
        )
    return None


def render_probe_io_argv(
    probes_image: str,
    target: str,
    data_dirs: list[str],
    host_out_dir: str,
    runtime_s: int,
    depths: list[int],
    thresholds: dict[int, IoThresholds],
    container_name: str = "refdeploy-probe-io",
    cpus: str = "",
) -> list[str]:
    if not data_dirs:
        raise ProbePlanError(str(io_target_outside(target, data_dirs)))
    for path in (target, *data_dirs, host_out_dir):
        if not PurePosixPath(path).is_absolute():
            raise ProbePlanError(f"{path}: probe paths must be absolute host paths")
    problem = io_target_outside(target, data_dirs)
    if problem:
        raise ProbePlanError(problem)
    if not depths or any(d < 1 for d in depths):
        raise ProbePlanError(f"probe_io_depths must be positive queue depths, got {depths}")
    unknown = sorted(set(thresholds) - set(depths))
    if unknown:
        raise ProbePlanError(f"probe_io_thresholds names depths {unknown} that are not probed ({depths})")
    # Not root, and no capability: fio's O_DIRECT reads of a regular file, libaio, the target's stat and a few
    # ranges' sha256 are all unprivileged, so it runs as the probe image's user (PROBE_USER), whose /out the role
    # makes (0700). The target must be readable by that user by its mode bits, as it had to be for the root with no
    # DAC capability that ran fio before: any user's reading of the served files, nothing of the engine's own (0660).
    argv = ["docker", "run", "--rm", "--name", container_name, "--user", PROBE_USER, "--network", "none",
            "--read-only", "--tmpfs", "/tmp", "--volume", f"{host_out_dir}:/out",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--pids-limit", "512"]  # fmt: skip
    if cpus:
        argv += ["--cpuset-cpus", cpus]
    for d in data_dirs:
        argv += ["--volume", f"{d}:{d}:ro"]
    argv += [probes_image, "python3", "-m", "probes.io.probe", "--target", target, "--out", "/out/probe-io",
             "--runtime", str(runtime_s)]  # fmt: skip
    for d in data_dirs:
        argv += ["--data-dir", d]
    for depth in depths:
        argv += ["--depth", str(depth)]
    argv += _depth_flags("--min-iops", {k: v.min_iops for k, v in thresholds.items()})
    argv += _depth_flags("--max-p999-ms", {k: v.max_p999_ms for k, v in thresholds.items()})
    argv += _depth_flags("--max-ms", {k: v.max_ms for k, v in thresholds.items()})
    return argv


def parse_thresholds(data: object) -> dict[int, IoThresholds]:
    """Inventory form {depth: {min_iops, max_p999_ms, max_ms}} -> typed thresholds; bad keys are errors."""
    if data in (None, ""):
        return {}
    if not isinstance(data, dict):
        raise ProbePlanError(f"probe_io_thresholds: expected a mapping of depth to limits, got {data!r}")
    out: dict[int, IoThresholds] = {}
    allowed = set(IoThresholds.__dataclass_fields__)
    for depth, limits in data.items():
        try:
            d = int(depth)
        except (TypeError, ValueError):
            raise ProbePlanError(f"probe_io_thresholds: {depth!r} is not a queue depth") from None
        if not isinstance(limits, dict) or set(limits) - allowed:
            raise ProbePlanError(f"probe_io_thresholds.{depth}: expected keys among {sorted(allowed)}, got {limits!r}")
        values: dict[str, float] = {}
        for k, v in limits.items():
            try:
                values[k] = float(v)
            except (TypeError, ValueError):
                values[k] = math.nan
            if isinstance(v, bool) or not math.isfinite(values[k]) or values[k] < 0:
                raise ProbePlanError(f"probe_io_thresholds.{depth}.{k}: expected a number of 0 or more, got {v!r}")
            # No read completes in 0 ms: a latency bound of 0 would call every drive failing (issue 46's finding).
            if k.startswith("max_") and values[k] == 0:
                raise ProbePlanError(
                    f"probe_io_thresholds.{depth}.{k}: a latency bound of 0 ms fails every drive: give the slowest "
                    "read you accept in ms (above 0), or leave it out"
                )
        if d < 1:
            raise ProbePlanError(f"probe_io_thresholds: {depth!r} is not a queue depth (1 or more)")
        out[d] = IoThresholds(**values)
    return out


# Parts of probes/capture/bundle.py, and the one-part probes `make probe PROBE=<name>` runs (io has its own playbook).
CAPTURE_PARTS = PARTS
DEFAULT_CAPTURE_PARTS = DEFAULT_PARTS
CGROUP_MOUNT = "/host/sys/fs/cgroup"
# The capture container's CPU weight against vLLM's (Docker's default is 1024). Measured here, with 4 clients
# streaming from the CPU engine on both cores: `perf record -g -p <worker> -- sleep 5` took 107.9 s and its
# `perf report` 8.6 s at 1024; at 8192, 7.5 s and 1.7 s. The capture's work is the same either way (it is only
# no longer starved), so the engine gives up the same CPU time over a shorter stretch; the bundle's cgroup
# readings still show what the engine got.
PROBE_CPU_SHARES = 8192


def gpu_run_flags(gpu_access: Mapping[str, Any] | None) -> list[str]:
    """`docker run` flags that give a probe container the GPUs' driver: Docker's --gpus with the `utility`
    capability (the nvidia runtime mounts the host driver's nvidia-smi and NVML, no CUDA), or the test
    stand-in's replayed nvidia-smi (serving/plan/standin.py). [] where the profile has no GPUs."""
    if not gpu_access:
        return []
    flags: list[str] = []
    for req in gpu_access.get("device_requests") or []:
        ids = ",".join(str(d) for d in req.get("device_ids") or [])
        caps = ",".join(c for group in req.get("capabilities") or [] for c in group)
        # Docker reads --gpus as CSV: a device list with commas is one quoted field.
        flags += ["--gpus", f'"device={ids}",capabilities={caps}' if ids else f"all,capabilities={caps}"]
    for v in gpu_access.get("volumes") or []:
        flags += ["--volume", v]
    env = {**(gpu_access.get("env") or {}), GPU_ACCESS_ENV: gpu_access_description(dict(gpu_access))}
    for k, v in sorted(env.items()):
        flags += ["--env", f"{k}={v}"]
    return flags


def render_capture_argv(
    probes_image: str,
    serving_container: str,
    socket_dir: str,
    host_out_dir: str,
    seconds: float,
    parts: list[str],
    data_files: list[str],
    data_dirs: list[str],
    host: str,
    perf_capability: str = "PERFMON",
    record_seconds: int = 0,
    container_name: str = "refdeploy-probe",
    *,
    perf_skip: str = "",
    gpu_access: Mapping[str, Any] | None = None,
    cpus: str = "",
    data_file_note: str = "",
    pcie_min: tuple[int, int] | None = None,
    workload: Mapping[str, Any] | None = None,
    api_key_copy: str = "",
    rank_trace_dir: str = "",
    engine: Mapping[str, Any] | None = None,
) -> list[str]:
    """`docker run` of probes.capture.bundle beside the serving container.

    It joins the serving container's PID namespace (py-spy, pidstat, wchan see vLLM's processes), has no network,
    and reads `/metrics` through vLLM's socket (`socket_dir`, the host directory of it, mounted read-only; the
    container is of the socket's group), sees the host's cgroup tree with `--cgroupns
    host` read-only, the data directories read-only, and writes only its output directory. Capabilities: none but
    SYS_PTRACE (py-spy, smaps_rollup, wchan), FOWNER where it reads the served files' page-cache residency (below),
    plus the perf capability when perf is one of the parts: PERFMON, or SYS_ADMIN on Docker releases that do not
    know PERFMON (`choose_perf_capability`); with `perf_skip` (why no capability could be chosen) perf gets none and
    the bundle records perf as skipped with that reason. On a GPU profile it gets the GPUs' driver
    (`gpu_run_flags`), and it runs on the CPUs the NUMA plan keeps for the probes (`cpus`). `data_file_note` says
    why no data file is given (the page-cache reading is then skipped); `pcie_min` is the class's PCIe (generation,
    width), which a link under load must reach. `workload` is what the capture sends through its window
    (probes/senders/load.py's LoadSpec fields), with the API key's host copy `api_key_copy` mounted read-only where
    the server has a key; the argv carries the key's path, never the key. `rank_trace_dir`: the host directory of
    the patched runtime's rank trace (the plan's), mounted read-only; the bundle keeps the window's steps.
    `engine`: the serving container's labels as the capture role found them ({"profiler", "stand_in"}), kept in
    bundle.json so that a diagnosis can say whether the figures were a profiled or stand-in engine's.
    """
    unknown = sorted(set(parts) - set(CAPTURE_PARTS))
    if not parts or unknown:
        raise ProbePlanError(
            f"unknown probe {', '.join(unknown) or '(none given)'}: choose from io, {', '.join(CAPTURE_PARTS)}"
        )
    if seconds <= 0 or seconds > 3600:
        raise ProbePlanError(f"SECONDS={seconds:g}: a capture window is 1 to 3600 seconds")
    if perf_capability not in ("PERFMON", "SYS_ADMIN"):
        raise ProbePlanError(f"perf capability {perf_capability!r}: PERFMON or SYS_ADMIN")
    for path in (*data_files, *data_dirs, host_out_dir):
        if not PurePosixPath(path).is_absolute():
            raise ProbePlanError(f"{path}: probe paths must be absolute host paths")
    for f in data_files:
        if not any(PurePosixPath(f).is_relative_to(d) for d in data_dirs):
            raise ProbePlanError(f"data file {f} is outside the data directories ({', '.join(data_dirs)})")
    # Root, unlike probe-io and the sidecar (PROBE_USER): py-spy, perf, wchan and fincore need the capabilities added
    # below, and Docker 20.10 (Debian's docker.io) gives added capabilities to uid 0 only; a non-root --user would
    # start with none (no ambient capabilities; measured: CapEff 0 for --user 10003 --cap-add SYS_PTRACE), and file
    # capabilities would not help, as no-new-privileges stops execve from granting them. What keeps it small is the
    # drop of ALL, no-new-privileges and the few capabilities added back.
    argv = ["docker", "run", "--rm", "--name", container_name,
            "--pid", f"container:{serving_container}", "--network", "none",
            "--group-add", str(API_GID), "--volume", f"{socket_dir}:{API_SOCKET_MOUNT}:ro",
            "--cgroupns", "host", "--read-only", "--tmpfs", "/tmp:size=256m",
            "--cap-drop", "ALL", "--cap-add", "SYS_PTRACE", "--security-opt", "no-new-privileges",
            "--memory", "1g", "--pids-limit", "512", "--cpu-shares", str(PROBE_CPU_SHARES), "--env", "LC_ALL=C",
            "--volume", f"/sys/fs/cgroup:{CGROUP_MOUNT}:ro", "--volume", f"{host_out_dir}:/out"]  # fmt: skip
    if "perf" in parts and not perf_skip:
        argv += ["--cap-add", perf_capability]
    if "hoststate" in parts and data_files:
        # fincore's mincore(2) tells the truth only about files its caller owns or may write: for any other the
        # kernel reports every page resident (a side-channel guard). The served files were neither (then nobody's,
        # and mounted read-only), so without FOWNER a capture read 100% resident after the file had been evicted;
        # an operator's staged files may still be anyone's.
        argv += ["--cap-add", "FOWNER"]
    if cpus:
        argv += ["--cpuset-cpus", cpus]
    argv += gpu_run_flags(gpu_access)
    for d in data_dirs:
        argv += ["--volume", f"{d}:{d}:ro"]
    if workload and api_key_copy:
        argv += ["--volume", f"{api_key_copy}:{API_KEY_MOUNT}:ro"]
    if rank_trace_dir:
        # The engine writes its rank files 0660 (its entrypoint's umask 0007, for the socket), and this container's
        # root has no DAC capability: it reads them as a member of the runtime's group.
        argv += ["--group-add", str(RUNTIME_GID), "--volume", f"{rank_trace_dir}:{RANK_TRACE_MOUNT}:ro"]
    argv += [probes_image, "python3", "-m", "probes.capture.bundle",
             "--out", "/out/bundle", "--archive", "/out/bundle.tar.gz",
             "--seconds", f"{seconds:g}",
             "--only", ",".join(parts), "--metrics-url", f"{SOCKET_URL}/metrics", "--metrics-socket", API_SOCKET,
             "--cgroup-root", CGROUP_MOUNT, "--host", host, "--container", serving_container]  # fmt: skip
    if record_seconds > 0:
        argv += ["--record-seconds", str(record_seconds)]
    for f in data_files:
        argv += ["--data-file", f]
    if not data_files and data_file_note:
        argv += ["--data-file-note", data_file_note]
    if "perf" in parts and perf_skip:
        argv += ["--perf-skip-note", perf_skip]
    if rank_trace_dir:
        argv += ["--rank-trace-dir", RANK_TRACE_MOUNT]
    if pcie_min is not None:
        argv += ["--pcie-min-gen", str(pcie_min[0]), "--pcie-min-width", str(pcie_min[1])]
    if engine is not None:
        labels = {k: str(engine.get(k) or "") for k in ("profiler", "stand_in")}
        argv += ["--engine-json", json.dumps(labels, sort_keys=True, separators=(",", ":"))]
    if workload:
        spec = {**workload, "api_key_file": API_KEY_MOUNT if api_key_copy else ""}
        argv += ["--workload-json", json.dumps(spec, sort_keys=True, separators=(",", ":"))]
    return argv


# What Docker says when it does not know a capability, from either of the two places that check one. The daemon:
# `docker: Error response from daemon: invalid CapAdd: unknown capability: "CAP_PERFMON".` (exit 125; docker/cli#3960,
# Docker 20.10.22, and docker/docs#14124). An engine whose daemon knows PERFMON but whose runc does not:
# `docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: starting container process
# caused: unknown capability "CAP_PERFMON": unknown.` (moby/moby#41562, 20.10.0-beta1). Both are Docker refusing
# the capability itself; nothing else is (a missing image, a dead daemon, a timeout say nothing of PERFMON).
_UNKNOWN_PERFMON = re.compile(r'unknown capability:? "?(CAP_)?PERFMON\b', re.IGNORECASE)
DOCKER_ERROR_EXIT = 125  # `docker run`'s own failure, before or while creating the container


@dataclass(frozen=True)
class PerfChoice:
    """perf's capability for a capture: PERFMON or SYS_ADMIN, or "" with `skip` (why perf is skipped).
    `keep`: a capability Docker itself answered on, which the role keeps for this Docker version and kernel."""

    capability: str
    skip: str = ""
    keep: bool = False


def choose_perf_capability(setting: str, check: str) -> PerfChoice:
    """The capture role's setting (auto, PERFMON or SYS_ADMIN) and, with auto, what its check printed: `cached` and
    the capability kept from an earlier check, or `checked <exit>` and what `docker run --cap-add PERFMON` said.
    SYS_ADMIN (the wider capability) only where Docker refused PERFMON as unknown; any other failure skips perf."""
    if setting in ("PERFMON", "SYS_ADMIN"):
        return PerfChoice(setting)
    if setting != "auto":
        raise ProbePlanError(f"capture_perf_capability={setting!r}: auto, PERFMON or SYS_ADMIN")
    head, _, said = check.strip().partition("\n")
    word, _, value = head.partition(" ")
    if word == "cached" and said.strip() in ("PERFMON", "SYS_ADMIN"):
        return PerfChoice(said.strip())
    if word != "checked" or not value.strip().isdigit():
        return PerfChoice("", f"the PERFMON check printed no result ({' '.join(check.split())[-200:] or 'nothing'})")
    rc = int(value)
    said = " ".join(said.split())
    if rc == 0:
        return PerfChoice("PERFMON", keep=True)
    if rc == DOCKER_ERROR_EXIT and _UNKNOWN_PERFMON.search(said):
        return PerfChoice("SYS_ADMIN", keep=True)
    why = {124: "it ran past its bound (timeout)", 137: "it was killed past its bound"}.get(rc, f"exit {rc}")
    return PerfChoice(
        "",
        f"no perf capability: a container with --cap-add PERFMON did not start ({why}: {said[-200:] or 'no output'});"
        " Docker did not refuse PERFMON as unknown, so SYS_ADMIN is not tried. Set capture_perf_capability to "
        "PERFMON or SYS_ADMIN to choose one",
    )


def probe_parts(probe: str) -> list[str]:
    """PROBE=<name> (or `capture`) -> the capture parts it runs."""
    if probe == "capture":
        return list(DEFAULT_CAPTURE_PARTS)
    if probe not in CAPTURE_PARTS:
        raise ProbePlanError(f"unknown PROBE={probe!r}: choose from io, {', '.join(CAPTURE_PARTS)} (or make capture)")
    return [probe]


# Seconds the probe container gets beyond its own work before timeout(1) stops it: start-up, the host state
# before and after, perf report, the bundle's files.
CAPTURE_MARGIN_S = 300
# probes.io.probe bounds each fio run at runtime + 60 s; the container gets that per depth and this for the rest.
PROBE_IO_MARGIN_S = 60


def capture_timeout_s(seconds: float, record_seconds: int = 0) -> int:
    """The bound on the capture's `docker run` (timeout(1); the container is removed after it whatever happens)."""
    return int(seconds) + max(0, record_seconds) + CAPTURE_MARGIN_S


def probe_io_timeout_s(runtime_s: int, depths: int) -> int:
    """The bound on the fio container's `docker run`: every depth's own bound (runtime + 60 s) and a margin."""
    return depths * (runtime_s + 60) + PROBE_IO_MARGIN_S
