"""Will it fit? Decided at plan time, before any change, from one read of the host: free space where the model, the
runtime image and the engine's compile caches go (`df`), and the model's weights per rank against each GPU's memory
at the profile's gpu_memory_utilization, with the KV room that leaves in tokens (serving/plan/model_facts.py gives
the weight bytes and the KV bytes a token).

A host that cannot hold it is refused in one line with both figures. The GPU figures are before activations and
CUDA graphs, which vLLM's start-up profiling measures and takes from the same room: a plan that fits can still be
refused by the engine, never the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from serving.config.profile import Profile
from serving.config.schema import StrictModel
from serving.host.pinned_ram import GIB, format_size
from serving.plan.model_facts import ModelFacts

# What a build of each runtime image takes on Docker's data root: the image (`docker image ls`: the CPU image 4.29 GB
# here, 2026-12-06; the CUDA image about 9 GB, docs/gpu-classes.md) twice, for the layers a build writes before it
# squashes nothing and keeps its cache.
IMAGE_BYTES = {"vllm-cpu": 4_290_000_000, "vllm": 9_000_000_000}
BUILD_FACTOR = 2
# The tiny model the CPU default generates: 17.8 MB of weights and its tokenizer (measured here), with room.
GENERATED_MODEL_BYTES = 64 << 20
# The compile caches' floor: torch.compile's and vLLM's caches of one profile (the CPU default's took 32 KiB eager;
# a CUDA engine's compiled graphs and AOT artifacts take a few GiB a rank, a guess until measured on a class host).
CACHE_FLOOR_BYTES = {"cpu": 1 * GIB, "gpu": 16 * GIB}
# vLLM's default gpu_memory_utilization (REFERENCE §2).
DEFAULT_GPU_UTILIZATION = 0.92


class DiskNeed(StrictModel):
    place: str  # served:<dir>, docker_root, cache_dir
    path: str  # the directory df read (the nearest existing one)
    free_bytes: int
    needs_bytes: int
    what: str


class GpuRoom(StrictModel):
    gpu_memory_bytes: int  # the smallest planned GPU's memory.total
    utilization: float
    weights_per_rank_bytes: int
    kv_room_bytes: int  # what is left for the KV cache (before activations and CUDA graphs)
    kv_bytes_per_token_per_rank: int | None
    kv_tokens: int | None
    max_model_len: int | None


class Capacity(StrictModel):
    disk: list[DiskNeed]
    gpu: GpuRoom | None


def parse_df(reading: str) -> dict[str, tuple[str, int]]:
    """The host's df reading ("<place>\\t<path>" lines, a blank line, `df -B1 --output=target,avail,size` of those
    paths in order) -> {place: (path, available bytes)}."""
    head, _, table = reading.partition("\n\n")
    places = [line.split("\t", 1) for line in head.splitlines() if "\t" in line]
    rows = [r.split() for r in table.splitlines()[1:] if r.strip()]
    out: dict[str, tuple[str, int]] = {}
    for (place, path), row in zip(places, rows, strict=False):
        if len(row) >= 3 and row[-2].isdigit():
            out[place] = (path, int(row[-2]))
    return out


def _gb(n: int) -> str:
    return format_size(n, 1)


def disk_needs(
    profile: Profile, df: str | None, model_action: str, runtime_image_present: bool
) -> tuple[list[DiskNeed], list[str]]:
    """Each place's free space against what the deploy will write there, and a line for each that is short."""
    free = parse_df(df or "")
    wants: list[tuple[str, int, str]] = []
    if model_action == "generate":
        wants.append(
            (f"served:{profile.model.host_path}", GENERATED_MODEL_BYTES, "the tiny model the deploy generates")
        )
    if not runtime_image_present:
        size = IMAGE_BYTES.get(profile.image.distribution, IMAGE_BYTES["vllm"])
        wants.append(
            ("docker_root", size * BUILD_FACTOR, f"building the runtime image ({_gb(size)}, twice for its build)")
        )
    kind = "gpu" if profile.gpu is not None else "cpu"
    wants.append(("cache_dir", CACHE_FLOOR_BYTES[kind], "the engine's compile caches"))
    needs, failures = [], []
    for place, amount, what in wants:
        if place not in free:
            continue
        path, avail = free[place]
        needs.append(DiskNeed(place=place, path=path, free_bytes=avail, needs_bytes=amount, what=what))
        if avail < amount:
            failures.append(f"{path} has {_gb(avail)} free, and {what} needs {_gb(amount)}: free space there (or point "
                            f"{_setting(place)} elsewhere), then deploy again")  # fmt: skip
    return needs, failures


def _setting(place: str) -> str:
    if place.startswith("served:"):
        return "model.host_path"
    return {"docker_root": "Docker's data-root", "cache_dir": "container.compile_cache_dir"}.get(place, place)


def gpu_room(
    profile: Profile, model: ModelFacts | None, gpus: Sequence[Mapping[str, Any]] | None
) -> tuple[GpuRoom | None, list[str]]:
    """The weights per rank against the smallest planned GPU's memory at gpu_memory_utilization, and the KV room
    that leaves, in tokens; a line where the weights do not fit, or where the room holds fewer tokens than one
    sequence of max_model_len (vLLM refuses to start then)."""
    if profile.gpu is None or model is None or not model.weight_bytes or not gpus:
        return None, []
    wanted = {int(d) for d in profile.gpu.devices}
    mems = [int(g["memory_total_mib"]) << 20 for g in gpus if g.get("index") in wanted and g.get("memory_total_mib")]
    if not mems:
        return None, []
    tp = profile.vllm.tensor_parallel_size or 1
    pp = profile.vllm.pipeline_parallel_size or 1
    util = profile.vllm.gpu_memory_utilization or DEFAULT_GPU_UTILIZATION
    budget = int(min(mems) * util)
    per_rank = model.weight_bytes // (tp * pp)
    room = budget - per_rank
    kv: int | None = None
    if model.kv_bytes_per_token:
        kv = model.kv_bytes_per_token // pp // (tp if model.kv_sharded else 1)
    tokens = room // kv if kv and room > 0 else None
    max_len = profile.vllm.max_model_len
    found = GpuRoom(gpu_memory_bytes=min(mems), utilization=util, weights_per_rank_bytes=per_rank, kv_room_bytes=room,
                    kv_bytes_per_token_per_rank=kv, kv_tokens=tokens, max_model_len=max_len)  # fmt: skip
    src = model.gguf or model.config
    if room <= 0:
        return found, [
            f"the model's weights ({src}) take {_gb(per_rank)} a rank ({_gb(model.weight_bytes)} over TP {tp} x PP "
            f"{pp}), more than the {_gb(budget)} of each GPU vLLM may use ({_gb(min(mems))} x gpu_memory_utilization "
            f"{util:g}): it does not fit this class; serve a smaller quantization of it"
        ]
    if tokens is not None and max_len and tokens < max_len:
        return found, [
            f"after the weights ({_gb(per_rank)} a rank) {_gb(room)} is left for the KV cache: {tokens:,} tokens at "
            f"{kv:,} bytes a token, fewer than one sequence of max_model_len {max_len:,} (vLLM refuses to start): "
            "lower vllm.max_model_len, or raise gpu_memory_utilization"
        ]
    return found, []


def describe(model: ModelFacts | None, found: Capacity | None) -> list[str]:
    """The plan's lines on the model and its room (make plan, make preflight)."""
    lines: list[str] = []
    if model is not None:
        arch = ", ".join(model.architectures) or model.gguf_architecture or "?"
        size = f", weights {_gb(model.weight_bytes)}" if model.weight_bytes else ""
        lines.append(f"  model: {arch} ({model.model_type or model.gguf_architecture}), {model.layers} layers{size}")
    if found is not None:
        lines += [f"  free: {d.path} {_gb(d.free_bytes)} for {d.what} ({_gb(d.needs_bytes)})" for d in found.disk]
        g = found.gpu
        if g is not None:
            kv = f" = {g.kv_tokens:,} tokens of KV" if g.kv_tokens is not None else ""
            lines.append(
                f"  GPU room: weights {_gb(g.weights_per_rank_bytes)} a rank of {_gb(g.gpu_memory_bytes)} x "
                f"{g.utilization:g}, {_gb(g.kv_room_bytes)} left{kv} (before activations and CUDA graphs)"
            )
    return lines
