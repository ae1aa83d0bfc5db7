"""What `docker run` starts (the plan's launch, or a GPU test host's stand-in for it) and where each of its
ranks runs: shared by serving/plan/plan.py and the test seam serving/plan/standin.py, which both build one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field

from serving.config.profile import Model, VllmArgs
from serving.config.schema import StrictModel
from serving.host import numa
from serving.plan.images import ImagePlan
from serving.plan.render import SPEC_LABEL, spec_digest


class GpuAccess(StrictModel):
    """How a probe container reaches the GPUs' driver, so that the host's nvidia-smi runs inside it."""

    # Docker's --gpus through the nvidia runtime, `utility` capability only (nvidia-smi, NVML; no CUDA).
    device_requests: list[dict[str, Any]] = Field(default_factory=list)
    # The stand-in's replayed nvidia-smi, where no driver exists (serving/plan/standin.py).
    volumes: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class Launch(StrictModel):
    """What `docker run` starts: the planned container, or on a GPU test host the stand-in that plays it."""

    # Read back from JSON (parse_plan), its dataclasses (ImagePlan, RankExpectation) arrive as objects, which strict
    # validation refuses; the plan is written by build_plan, never by hand, so nothing it forgives is an operator's.
    model_config = ConfigDict(strict=False)

    spec: dict[str, Any]  # community.docker.docker_container parameters, labels included
    spec_digest: str
    images: ImagePlan  # what the images role builds for it
    # The settings its argv carries and the model it serves: what the effective-config check expects.
    vllm: VllmArgs
    model: Model
    env: dict[str, str]
    ranks: list[numa.RankExpectation]
    # Not None only on a GPU test host: what the stand-in replaced, field by field ([planned, launched]).
    stand_in: dict[str, Any] | None = None


def launch_spec(spec: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A spec with the labels that identify it: the profile and the digest of everything else."""
    body = {k: v for k, v in spec.items() if k != "labels"}
    labels = {k: v for k, v in (spec.get("labels") or {}).items() if k != SPEC_LABEL}
    digest = spec_digest(body)
    return {**body, "labels": {**labels, SPEC_LABEL: digest}}, digest


def cpu_ranks(
    vllm: VllmArgs, env: Mapping[str, str], mems: str | None, cpus: str | None = None
) -> tuple[list[numa.RankExpectation], list[str]]:
    """The CPU build's ranks: VLLM_CPU_OMP_THREADS_BIND binds rank i to the i-th '|'-separated cpulist; with
    `auto` (or unset) and `nobind` vLLM picks the CPUs itself, inside the container's cpuset (`cpus`, None where
    the profile sets none). A bound rank's CPUs must be in the cpuset. Without a binding each rank needs a CPU of
    its own; with one, ranks may share a CPU (vLLM 0.32.0's utils/ompmultiprocessing.py takes the lists as given):
    slower, but it runs, which is what a functional check of more stages than this machine has CPUs needs."""
    world = (vllm.tensor_parallel_size or 1) * (vllm.pipeline_parallel_size or 1)
    allowed = set(numa.parse_cpulist(cpus)) if cpus else None
    bind = env.get("VLLM_CPU_OMP_THREADS_BIND", "auto").strip()
    if bind in ("auto", "nobind", ""):
        if allowed is not None and world > len(allowed):
            return [], [
                f"{world} ranks (tensor x pipeline parallel size) on container.cpuset_cpus {cpus}, {len(allowed)} "
                "CPU(s): without VLLM_CPU_OMP_THREADS_BIND each CPU rank needs a CPU of its own; lower the "
                "parallelism, widen the cpuset, or bind each rank's CPUs (ranks may then share one)"
            ]
        return [numa.RankExpectation(r, None, mems) for r in range(world)], []
    parts = bind.split("|")
    if len(parts) != world:
        return [], [
            f"VLLM_CPU_OMP_THREADS_BIND={bind!r} names {len(parts)} CPU list(s) for {world} rank(s) "
            "(tensor x pipeline parallel size): give one per rank, separated by '|'"
        ]
    try:
        lists = [numa.format_cpulist(numa.parse_cpulist(p)) for p in parts]
    except numa.NumaError as e:
        return [], [f"VLLM_CPU_OMP_THREADS_BIND: {e}"]
    outside = [
        f"rank {r}'s CPUs {cl} (VLLM_CPU_OMP_THREADS_BIND) are not all in container.cpuset_cpus {cpus}"
        for r, cl in enumerate(lists)
        if allowed is not None and not set(numa.parse_cpulist(cl)) <= allowed
    ]
    if outside:
        return [], outside
    return [numa.RankExpectation(r, rank_cpus, mems) for r, rank_cpus in enumerate(lists)], []
