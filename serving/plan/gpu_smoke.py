"""The GPU smoke test, controller side (issue 28): what to run before a deploy's point of no return, and what
its answer means.

The image side (images/vllm/gpu_smoke.py, at SMOKE_IN_IMAGE) initialises CUDA on every GPU its container sees
and multiplies a small matrix on each, then, for a plan of more than one rank, runs the collectives the engine
depends on (images/vllm/smoke_collectives.py, issue 45): an all-reduce over each TP group and a send/receive
between consecutive PP stages, with NCCL, within a bound; it only measures. Here:
- `smoke_argv` turns the serving container's spec (serving/plan/gpu_plan.py) into one `docker run` of the same image
  with the same GPUs, runtime, cgroup parent, cpuset, memory, shm and ulimits, and the same environment (an
  allocator setting the image's torch refuses fails here, not in the engine; tests/fixtures/recorded-h200), with
  no network, no ports and no model;
- `judge` reads what it printed against the plan: one line per problem, the tool's own words first;
- `plan_smoke` is what the plan carries (`Plan.gpu_smoke`) and `outcome` what the deploy asks of a run
  (ansible/roles/serve/tasks/smoke.yml, through the refdeploy_gpu_smoke filter).
On a GPU test host the stand-in (serving/plan/standin.py) replaces the run at this seam, and its `seam` says how.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from serving.config.redact import secret_env_names
from serving.config.schema import StrictModel
from serving.errors import InputError
from serving.host.gpu_facts import GpuFactsError, GpuInfo, normalise_bus_id

SMOKE_IN_IMAGE = "/opt/refdeploy/gpu_smoke.py"
SMOKE_SUFFIX = "-gpu-smoke"
# docker_container parameter -> `docker run` flag, for the options the two share one to one.
_FLAGS = (
    ("runtime", "--runtime"),
    ("cgroup_parent", "--cgroup-parent"),
    ("cpuset_cpus", "--cpuset-cpus"),
    ("cpuset_mems", "--cpuset-mems"),
    ("memory", "--memory"),
    ("memory_swap", "--memory-swap"),
    ("shm_size", "--shm-size"),
    ("ipc_mode", "--ipc"),
    ("pids_limit", "--pids-limit"),
)
GIB = 1 << 30
# The first CUDA call on eight GPUs, with the image already on the host: well under a minute on a real host.
TIMEOUT_S = 300
# The collectives, from the first rank's start to the last rank's result: eight processes importing torch and
# an NCCL communicator's set-up take seconds (8 CPU ranks importing torch on 2 cores: 14 s here); a group
# that cannot talk hangs until this bound, which stays well inside TIMEOUT_S.
COLLECTIVES_BOUND_S = 120.0
# What Docker Engine says when no runtime on the host can serve a GPU request (20.10 names the driver "",
# later versions "nvidia").
_NO_TOOLKIT = "could not select device driver"


class PlannedGpu(StrictModel):
    index: int
    name: str
    pci_bus_id: str | None


class Collectives(StrictModel):
    """The collectives of the smoke test: the plan's TP x PP ranks, one per planned GPU, in vLLM's rank order."""

    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    backend: str = "nccl"  # gloo on the GPU test hosts' CPU ranks (serving/plan/standin.py)
    bound_s: float = Field(default=COLLECTIVES_BOUND_S, gt=0)
    absent_rank: int | None = None  # an induced fault, set only by the stand-in file (tests)

    def args(self) -> list[str]:
        """gpu_smoke.py's arguments for these collectives."""
        out = ["--tp", str(self.tp), "--pp", str(self.pp), "--backend", self.backend, "--bound-s", f"{self.bound_s:g}"]
        return out + (["--absent-rank", str(self.absent_rank)] if self.absent_rank is not None else [])


class GpuSmoke(StrictModel):
    """The smoke test a deploy runs before it touches the serving container."""

    argv: list[str] = Field(min_length=1)
    container: str
    timeout_s: int = TIMEOUT_S
    gpus: list[PlannedGpu]  # in rank order: the order the container sees them in
    model_substring: str
    gpu_memory_utilization: float | None
    # None for one rank: nothing to exchange.
    collectives: Collectives | None = None
    # None on a real host; on a GPU test host, what the stand-in put at this seam (serving/plan/standin.py).
    seam: str | None = None


class GpuSmokeError(InputError):
    pass


def _gpus_flag(requests: Sequence[Mapping[str, Any]]) -> str:
    ids = [str(d) for r in requests if r.get("driver") == "nvidia" for d in r.get("device_ids") or []]
    if not ids:
        raise GpuSmokeError("the container spec requests no NVIDIA GPUs (device_requests): nothing to smoke-test")
    # Docker's CLI form for several devices: the value itself is quoted, '"device=0,1,2"'.
    return f'"device={",".join(ids)}"'


def smoke_container(spec: Mapping[str, Any]) -> str:
    return f"{spec['name']}{SMOKE_SUFFIX}"


def smoke_argv(
    spec: Mapping[str, Any],
    *,
    gpus: bool = True,
    volumes: Sequence[str] = (),
    command: Sequence[str] = ("python3", SMOKE_IN_IMAGE),
) -> list[str]:
    """`docker run` of the smoke test in the spec's image, with the spec's GPUs, runtime and options. The stand-in
    (serving/plan/standin.py) runs another command with a volume of its recordings, with or without the GPUs."""
    argv = ["docker", "run", "--rm", "--name", smoke_container(spec), "--network", "none"]
    if gpus:
        argv += ["--gpus", _gpus_flag(spec.get("device_requests") or [])]
    for key, flag in _FLAGS:
        if spec.get(key):
            argv += [flag, str(spec[key])]
    for ulimit in spec.get("ulimits") or []:
        name, _, limits = str(ulimit).partition(":")  # docker_container's name:soft:hard, the CLI's name=soft:hard
        argv += ["--ulimit", f"{name}={limits}"]
    for cap in spec.get("cap_drop") or []:
        argv += ["--cap-drop", str(cap)]
    for cap in spec.get("capabilities") or []:
        argv += ["--cap-add", str(cap)]
    for opt in spec.get("security_opts") or []:
        argv += ["--security-opt", str(opt)]
    # A secret's value never reaches the argv (it is visible in `ps` and at -vvv): left out are the variables whose
    # values every artifact redacts (serving/config/redact.py secret_env_names, the plan's api.secret_env), a proxy's
    # URL with a password in it too. The run has no network and reads no model, so no token or proxy is missed.
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    hidden = set(secret_env_names(env))
    for name, value in sorted(env.items()):
        if name not in hidden:
            argv += ["--env", f"{name}={value}"]
    for volume in volumes:
        argv += ["--volume", volume]
    return [*argv, "--entrypoint", command[0], str(spec["image"]), *command[1:]]


def parse(stdout: str) -> dict[str, Any]:
    """The smoke test's one JSON line; anything else (docker's own error) is an error naming it."""
    lines = [ln for ln in stdout.splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise GpuSmokeError(f"the GPU smoke test printed no result: {' '.join(stdout.split())[-300:] or 'nothing'}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _same_bus(seen: str, planned: str) -> bool:
    """nvidia-smi's 00000000:01:00.0 (what the smoke test prints) against the plan's sysfs form 0000:01:00.0."""
    try:
        return normalise_bus_id(seen) == normalise_bus_id(planned)
    except GpuFactsError:
        return False


def judge_collectives(result: Mapping[str, Any], host: str, planned: Collectives) -> list[str]:
    """The collectives' part of a result: one line, the backend's own words in it; [] when they passed."""
    what = f"the collectives of TP={planned.tp} x PP={planned.pp} ({planned.backend})"
    got = result.get("collectives")
    if not isinstance(got, Mapping):
        return [f"GPU smoke test on {host}: the image ran no collectives: is it older than the plan's smoke test?"]
    if got.get("error"):
        hint = (
            ": the GPUs cannot talk as the engine would (nvidia-smi topo -p2p r; ACS and the IOMMU in the manifest's "
            "peer section; NCCL_P2P_DISABLE; /dev/shm, the container's shm_size)"
            if planned.backend == "nccl"
            else ""
        )
        return [f"GPU smoke test on {host}: {what} failed: {got['error']}{hint}"]
    return []


def judge(
    result: Mapping[str, Any],
    host: str,
    planned: Sequence[Mapping[str, Any]],
    model_substring: str,
    gpu_memory_utilization: float | None,
    collectives: Collectives | None = None,
) -> list[str]:
    """One line per problem; [] when every planned GPU initialised, is the planned one, and has the memory the
    engine will ask for. planned: the plan's GPUs in rank order (index, name, pci_bus_id as nvidia-smi gives it).
    A GPU that holds less free memory than gpu_memory_utilization x its total would stop vLLM at start-up, so it
    is named here (another process holds it: nvidia-smi shows which)."""
    # The image's "error" repeats a failed collective's; said once, with what the collectives were.
    ran = result.get("collectives")
    if collectives is not None and isinstance(ran, Mapping) and ran.get("error"):
        return judge_collectives(result, host, collectives)
    if result.get("error"):
        return [f"GPU smoke test on {host} failed: {result['error']}"]
    seen = list(result.get("devices") or [])
    if len(seen) != len(planned):
        return [
            f"GPU smoke test on {host}: the container saw {len(seen)} GPU(s), the plan gives it {len(planned)}: "
            "check the container toolkit (nvidia-ctk) and the device request"
        ]
    problems = []
    for want, got in zip(planned, seen, strict=True):
        where = f"GPU {want['index']} on {host}"
        if model_substring not in str(got.get("name")):
            problems.append(f"{where}: CUDA sees {got.get('name')}, expected {model_substring}")
        bus = str(got.get("pci_bus_id") or "")
        if want.get("pci_bus_id") and not _same_bus(bus, str(want["pci_bus_id"])):
            problems.append(f"{where}: CUDA's device {got.get('index')} is at {bus}, planned at {want['pci_bus_id']}")
        if not got.get("matmul_exact"):
            problems.append(f"{where}: a small matrix product was wrong")
        total, free = int(got.get("total_bytes") or 0), int(got.get("free_bytes") or 0)
        wanted = (gpu_memory_utilization or 0) * total
        if free < wanted:
            problems.append(
                f"{where}: {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB, less than the {wanted / GIB:.1f} GiB "
                f"the profile's gpu_memory_utilization {gpu_memory_utilization:g} asks for: another process holds it "
                "(nvidia-smi)"
            )
    if collectives is not None and not problems:
        problems += judge_collectives(result, host, collectives)
    return problems


def plan_smoke(
    spec: Mapping[str, Any],
    host_gpus: Sequence[GpuInfo],
    devices: Sequence[int],
    model_substring: str,
    gpu_memory_utilization: float | None,
    tp: int = 1,
    pp: int = 1,
) -> GpuSmoke:
    """The smoke test of the serving container `spec` (its launch spec), on the host's GPUs `devices` (indices
    into `host_gpus`, nvidia-smi's rows as serving/plan/gpu_plan.py keeps them), in rank order; with the
    collectives of `tp` x `pp` ranks where that is more than one."""
    by_index = {g.index: g for g in host_gpus}
    # One GPU per rank: a profile whose devices are not TP x PP is refused by the plan (serving/plan/gpu_plan.py).
    collectives = Collectives(tp=tp, pp=pp) if tp * pp > 1 else None
    return GpuSmoke(
        argv=smoke_argv(spec, command=("python3", SMOKE_IN_IMAGE, *(collectives.args() if collectives else []))),
        collectives=collectives,
        container=smoke_container(spec),
        gpus=[PlannedGpu(index=d, name=by_index[d].name, pci_bus_id=by_index[d].pci_bus_id) for d in devices],
        model_substring=model_substring,
        gpu_memory_utilization=gpu_memory_utilization,
    )


def measured(stdout: str) -> str | None:
    """What a run's collectives measured, as one line for the deploy's output; None where it printed none."""
    try:
        ran = parse(stdout).get("collectives")
    except (GpuSmokeError, ValueError):
        return None
    if not isinstance(ran, Mapping):
        return None
    ops = [f"all-reduce over ranks {op['ranks']} {op['s']:.3f} s" for op in ran.get("all_reduce") or []]
    ops += [f"send {op['from']}->{op['to']} {op['s']:.3f} s" for op in ran.get("send_recv") or []]
    return (
        f"collectives ({ran.get('backend')}, TP={ran.get('tp')} x PP={ran.get('pp')}): {', '.join(ops) or 'none'}; "
        f"all {ran.get('world')} ranks in {float(ran.get('s') or 0):.1f} s of a {ran.get('bound_s')} s bound"
    )


def outcome(stdout: str, stderr: str, rc: int, smoke: GpuSmoke, host: str, held_by_serving: bool) -> list[str]:
    """A smoke run's problems, one line each; [] when it passed. held_by_serving: the running serving container
    holds the GPUs now (a replacing deploy), so their free memory says nothing about the new one's."""
    if rc == 124:
        return [f"GPU smoke test on {host} did not finish within {smoke.timeout_s} s: a GPU or the driver hangs "
                "(nvidia-smi; dmesg for Xid errors)"]  # fmt: skip
    said = " ".join(f"{stdout}\n{stderr}".split())
    if _NO_TOOLKIT in said:
        return [
            f"Docker Engine on {host} cannot give a container the GPUs: the NVIDIA container toolkit is not "
            f"installed or not configured (docker said: {said[said.index('could not select') :][:160]}); install "
            "nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker`, then deploy again"
        ]
    try:
        result = parse(stdout)
    except (GpuSmokeError, ValueError):
        return [f"GPU smoke test on {host} failed (exit {rc}): {said[-300:] or 'no output'}"]
    planned = [g.model_dump() for g in smoke.gpus]
    utilization = None if held_by_serving else smoke.gpu_memory_utilization
    return judge(result, host, planned, smoke.model_substring, utilization, smoke.collectives)
