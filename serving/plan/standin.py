"""The stand-in engine: the one test seam of the GPU classes (README, "How this is tested without GPUs").

A GPU class's container cannot start where there are no GPUs, no NVIDIA driver and no CUDA engine: this
project's machines. When the environment variable REFDEPLOY_STAND_IN names a stand-in file (JSON, written by
tests/integration/test_gpu_hosts_ssh/conftest.py), `serving.plan.plan.build_plan` plans the class as on a real host
(class, NUMA plan, RAM budget, data drive, slice, the container spec and its digest) and then hands its launch to
`stand_in`, which replaces what cannot exist here and nothing else:

- the image: the CPU runtime image of the same vLLM version, base and patch series, for the CUDA one, as this
  machine built it (its wheelhouse and CA file: the stand-in file's cpu_build_files);
- the argv: the class's vLLM settings that the CPU build cannot run are dropped or scaled down (GPU memory,
  host KV offload, the 262,144-token context, --numa-bind*), the parallelism keeps its kind over at most 2
  ranks (PP=3 becomes PP=2, TP=8 becomes TP=2: this machine has 2 CPUs), the model is the tiny one the test
  stages at the class's model path; the rest (max_num_seqs, prefill chunk, prefix caching, seed, extra args)
  is the class's;
- the GPUs: the device requests are dropped; the probe containers get a replayed nvidia-smi (tests/replay,
  the class's recordings) where the nvidia runtime would mount the driver's;
- the GPU smoke test (serving/plan/gpu_smoke.py): the stand-in's container (its image, options and environment)
  runs the image's smoke test with the class's recorded per-GPU result (gpu-smoke.json in the host's
  recordings) in place of initialising CUDA, and the plan's collectives for real, with gloo over as many CPU
  processes as the plan has ranks (3 for PP=3, 8 for TP=8: processes, not CPUs, so the 2 CPUs carry them);
  with "gpu_smoke": {"gpu_request": true} in the stand-in file the planned GPU request is kept, and this
  machine's Docker Engine, which has no NVIDIA runtime, refuses it as a host without the container toolkit
  does; "gpu_smoke": {"collectives": {"absent_rank": N, "bound_s": S}} induces a fault (a rank never started,
  a bound too short for the ranks);
- the host: the container's cpuset and memory nodes are this machine's (the plan's come from the class host's
  replayed topology), its ulimits are lowered to this machine's hard limits (dockerd here cannot raise
  memlock or nofile), and no CPUs are kept back for the client and the probes.

Every artifact says so: the plan's and the manifest's `launch.stand_in` (what was replaced, planned beside
launched) and the container's label org.refdeploy.stand-in. The stand-in file:

  {"cpus": "0-1", "mems": "0", "ulimits_max": {"nofile": 20000, "memlock": 8388608},
   "nvidia_smi": {"replayer": "<abs path of tests/replay/nvidia-smi>",
                  "recordings": {"<inventory host>": "<abs dir with nvidia-smi-sampled.csv ...>"}},
   "gpu_smoke": {"gpu_request": false, "collectives": {"absent_rank": null, "bound_s": 120}},
   "cpu_build_files": {"wheelhouse_dir": "/opt/wheels", "extra_ca_file": "/etc/ssl/certs/ca-certificates.crt"}}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from serving.config.profile import Profile, VllmArgs
from serving.errors import InputError
from serving.host import numa
from serving.plan.gpu_smoke import SMOKE_IN_IMAGE, GpuSmoke, smoke_argv
from serving.plan.images import plan_images, read_build_files
from serving.plan.launch import GpuAccess, Launch, cpu_ranks, launch_spec
from serving.plan.render import PROFILE_LABEL, STAND_IN_LABEL, render_vllm_argv

ENV = "REFDEPLOY_STAND_IN"
MAX_RANKS = 2
REPLAY_DIR_IN_CONTAINER = "/opt/replay/nvidia-smi"
SMOKE_RECORDING = "gpu-smoke.json"


class StandInError(InputError):
    pass


def load_config() -> dict[str, Any] | None:
    """The stand-in file REFDEPLOY_STAND_IN names; None (production) when it is unset."""
    path = os.environ.get(ENV, "").strip()
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise StandInError(f"{ENV}={path}: cannot read the stand-in file: {e}") from None
    if not isinstance(data, dict) or not {"cpus", "mems"} <= set(data):
        raise StandInError(f"{ENV}={path}: expected a JSON object with cpus and mems (serving/plan/standin.py)")
    return data


def rank_binds(cpus: str, ranks: int) -> list[str]:
    """The CPUs split into `ranks` contiguous lists, one per rank (VLLM_CPU_OMP_THREADS_BIND)."""
    ids = numa.parse_cpulist(cpus)
    if len(ids) < ranks:
        raise StandInError(f"stand-in: {ranks} ranks need {ranks} CPUs, the stand-in has {cpus}")
    size = len(ids) // ranks
    return [numa.format_cpulist(ids[i * size : (i + 1) * size if i < ranks - 1 else None]) for i in range(ranks)]


def stand_in_vllm(v: VllmArgs, ranks: int) -> VllmArgs:
    """The class's vLLM settings as the CPU build can run them with the tiny model: `ranks` ranks of the class's
    kind of parallelism (pipeline stages for a PP class, tensor ranks otherwise)."""
    pp = (v.pipeline_parallel_size or 1) > 1
    # The CPU build with the tiny model: its context is 2048 positions, the CPU attention backend takes block
    # sizes in multiples of 32, and eager mode keeps start-up short (REFERENCE §1).
    return VllmArgs(
        dtype="float32",
        max_model_len=2048,
        block_size=32,
        enforce_eager=True,
        max_num_seqs=v.max_num_seqs,
        max_num_batched_tokens=v.max_num_batched_tokens,
        enable_prefix_caching=v.enable_prefix_caching,
        enable_chunked_prefill=v.enable_chunked_prefill,
        seed=v.seed,
        tensor_parallel_size=ranks if ranks > 1 and not pp else None,
        pipeline_parallel_size=ranks if ranks > 1 and pp else None,
        distributed_executor_backend="mp" if ranks > 1 else None,
        extra_args=list(v.extra_args),
    )


def _lowered(ulimit: str, maxima: Mapping[str, int]) -> str:
    """name:soft:hard within this machine's hard limit for that name (-1, unlimited, is above any)."""
    name, soft, hard = ulimit.split(":")
    top = maxima.get(name)
    if top is None:
        return ulimit
    values = [top if int(v) < 0 or int(v) > top else int(v) for v in (soft, hard)]
    return f"{name}:{values[0]}:{values[1]}"


def stand_in(profile: Profile, launch: Any, config: Mapping[str, Any], host: str) -> tuple[Any, Any]:
    """(the stand-in Launch, the probes' GpuAccess) in place of the planned launch. `launch` is a plan.Launch."""

    planned = launch.spec
    v = profile.vllm
    world = (v.tensor_parallel_size or 1) * (v.pipeline_parallel_size or 1)
    ranks = max(1, min(world, MAX_RANKS, len(numa.parse_cpulist(str(config["cpus"])))))
    vllm = stand_in_vllm(v, ranks)
    env = {
        **planned["env"],
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "|".join(rank_binds(str(config["cpus"]), ranks)),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    images = launch.images
    patches_dir = Path(images.patches[0].path).parent if images.patches else None
    # This machine's CPU images, built from this machine's wheelhouse and CA file (the stand-in file names them):
    # not the class host's, whose files the plan read.
    built_from = config.get("cpu_build_files") or {}
    cpu_images = plan_images(
        "vllm-cpu",
        images.version,
        patches_dir,
        base_image=None if images.base_build else images.base_tag,
        build_files=read_build_files(
            str(built_from.get("wheelhouse_dir") or ""), str(built_from.get("extra_ca_file") or "")
        ),
    )
    spec = {k: val for k, val in planned.items() if k != "device_requests"}
    spec.update(
        image=cpu_images.runtime_tag,
        command=render_vllm_argv(profile.model_copy(update={"vllm": vllm})),
        env=dict(sorted(env.items())),
        cpuset_cpus=str(config["cpus"]),
        cpuset_mems=str(config["mems"]),
        ulimits=[_lowered(u, config.get("ulimits_max") or {}) for u in planned["ulimits"]],
        labels={PROFILE_LABEL: profile.name, STAND_IN_LABEL: "serving/plan/standin.py"},
    )
    spec, digest = launch_spec(spec)
    replaced = {
        k: [planned.get(k), spec.get(k)]
        for k in ("image", "command", "device_requests", "cpuset_cpus", "cpuset_mems", "ulimits")
        if planned.get(k) != spec.get(k)
    }
    replaced["env_added"] = [None, {k: env[k] for k in sorted(set(env) - set(planned["env"]))}]
    kind = "PP" if vllm.pipeline_parallel_size else "TP"
    what = (
        f"the CPU engine ({cpu_images.runtime_tag}, {kind}={ranks} on CPUs {config['cpus']}) in place of "
        f"{world} GPU rank(s) of {planned['image']}; no GPUs; probes see a replayed nvidia-smi"
    )
    ranks_expected, failures = cpu_ranks(vllm, env, str(config["mems"]), str(config["cpus"]))
    if failures:
        raise StandInError("stand-in: " + "; ".join(failures))
    new = Launch(
        spec=spec,
        spec_digest=digest,
        images=cpu_images,
        vllm=vllm,
        model=launch.model,
        env=dict(spec["env"]),
        ranks=ranks_expected,
        stand_in={"what": what, "module": "serving/plan/standin.py", "replaced": replaced},
    )
    nvsmi = config.get("nvidia_smi") or {}
    recordings = (nvsmi.get("recordings") or {}).get(host)
    access = GpuAccess(
        volumes=[f"{nvsmi['replayer']}:/usr/local/bin/nvidia-smi:ro", f"{recordings}:{REPLAY_DIR_IN_CONTAINER}:ro"]
        if recordings and nvsmi.get("replayer")
        else [],
        env={"REFDEPLOY_REPLAY_DIR": REPLAY_DIR_IN_CONTAINER} if recordings else {},
    )
    return new, access


def stand_in_smoke(smoke: GpuSmoke, launch: Any, config: Mapping[str, Any], host: str) -> GpuSmoke:
    """The smoke test at its seam: `launch` is the stand-in's (a plan.Launch), `smoke` the planned test."""
    recordings = ((config.get("nvidia_smi") or {}).get("recordings") or {}).get(host)
    if not recordings:
        raise StandInError(f"stand-in: no recordings for {host} (nvidia_smi.recordings), so no GPU smoke result")
    settings = config.get("gpu_smoke") or {}
    keep_request = bool(settings.get("gpu_request"))
    recorded = f"{recordings}/{SMOKE_RECORDING}"
    collectives = smoke.collectives
    if collectives is not None:
        collectives = collectives.model_copy(update={"backend": "gloo", **_collective_faults(settings, collectives)})
    in_container = f"/opt/replay/{SMOKE_RECORDING}"
    argv = smoke_argv(
        {**launch.spec, "device_requests": [{"driver": "nvidia", "device_ids": [str(g.index) for g in smoke.gpus]}]},
        gpus=keep_request,
        volumes=[f"{recorded}:{in_container}:ro"],
        command=("python3", SMOKE_IN_IMAGE, "--devices-recorded", in_container,
                 *(collectives.args() if collectives else [])),
    )  # fmt: skip
    how = "the planned GPU request kept, for this machine's Docker Engine to answer" if keep_request else "no GPUs"
    ran = (
        f"; the collectives of TP={collectives.tp} x PP={collectives.pp} run for real with gloo over "
        f"{collectives.tp * collectives.pp} CPU processes"
        if collectives
        else ""
    )
    seam = f"stand-in (serving/plan/standin.py): a container of the CPU image ({how}) replays {recorded}{ran}"
    return smoke.model_copy(update={"argv": argv, "seam": seam, "collectives": collectives})


def _collective_faults(settings: Mapping[str, Any], planned: Any) -> dict[str, Any]:
    """The stand-in file's gpu_smoke.collectives (absent_rank, bound_s), checked: a test's induced faults."""
    given = settings.get("collectives") or {}
    if not isinstance(given, Mapping) or set(given) - {"absent_rank", "bound_s"}:
        raise StandInError(f"{ENV}: gpu_smoke.collectives must be an object of absent_rank and bound_s, not {given!r}")
    out: dict[str, Any] = {}
    world = planned.tp * planned.pp
    rank = given.get("absent_rank")
    if rank is not None:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world:
            raise StandInError(f"{ENV}: gpu_smoke.collectives.absent_rank {rank!r} is not a rank of 0..{world - 1}")
        out["absent_rank"] = rank
    bound = given.get("bound_s")
    if bound is not None:
        if not isinstance(bound, (int, float)) or isinstance(bound, bool) or bound <= 0:
            raise StandInError(f"{ENV}: gpu_smoke.collectives.bound_s {bound!r} is not a positive number of seconds")
        out["bound_s"] = float(bound)
    return out
