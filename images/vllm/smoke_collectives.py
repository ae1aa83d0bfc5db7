"""The smoke test's collectives (issue 45): one process per planned rank, over the launch's own GPUs, image,
environment and /dev/shm, before a deploy's point of no return. gpu_smoke.py (beside this file) runs them after
its per-GPU phase; the controller's side is serving/plan/gpu_smoke.py.

The ranks are laid out as vLLM lays them out (vllm/distributed/parallel_state.py, initialize_model_parallel:
arange(world).reshape(-1, pp, tp)): rank = stage * tp + tp_rank, and rank r uses the container's GPU r. Each
rank joins one process group over a file rendezvous in a private directory, then:
- every TP group (the tp ranks of one stage) all-reduces a tensor of (rank + 1)s: each element must be exactly
  the sum of (r + 1) over the group (small integers: exact in float32);
- every pair of consecutive PP stages (rank s*tp + t to (s+1)*tp + t) sends a tensor of (sender + 1)s, which
  the receiver checks exactly.
Each rank prints one JSON line with each operation's seconds (the first call, so a communicator's set-up is
in it) and its error in the backend's own words. The parent bounds the whole: a rank still running at the bound
is killed and named; the process group's timeout is three quarters of the bound, so that a rank waiting for a
peer that never comes says so in the backend's words before that.

The backend is NCCL on GPUs and gloo on CPU ranks (the GPU test hosts' stand-in, which has no GPU: the same
code path, end to end, without CUDA). The container has --network none, so only the loopback interface
exists: NCCL's and gloo's bootstrap sockets are put on lo (NCCL_SOCKET_IFNAME=lo, GLOO_SOCKET_IFNAME=lo).
NCCL's environment variables page (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html,
NCCL_SOCKET_IFNAME) says lo is used only when no other interface exists; naming it keeps an operator's
NCCL_SOCKET_IFNAME for another network (multi-node) from failing here, where it cannot exist. The bootstrap is
not what is tested: within one host NCCL moves the data over P2P or shared memory (/dev/shm), which are.
NCCL_DEBUG=WARN, unless the launch sets NCCL_DEBUG, makes NCCL print its own warning before it returns an
error (the NCCL troubleshooting guide, "Errors"): the tail of a failed rank's stderr is kept for the quote.

Standard library and torch only (it runs in the image).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RANK_FLAG = "--collective-rank"
# 4 Mi float32 elements (16 MiB): large enough that NCCL moves it in chunks over its real transport, small
# enough for the stand-in's CPU ranks.
NUMEL = 1 << 22
STDERR_KEPT = 6


@dataclass(frozen=True)
class Args:
    tp: int
    pp: int
    backend: str
    bound_s: float
    numel: int
    absent_rank: int | None

    @classmethod
    def from_namespace(cls, a: argparse.Namespace) -> Args:
        return cls(a.tp, a.pp, a.backend, a.bound_s, a.numel, a.absent_rank)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per stage")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--bound-s", type=float, default=120.0, help="all collectives, start to finish")
    p.add_argument("--numel", type=int, default=NUMEL)
    # An induced fault for tests (the stand-in file's gpu_smoke.collectives.absent_rank): this rank is never
    # started, as one whose process died before the rendezvous.
    p.add_argument("--absent-rank", type=int, default=None)


def tp_groups(tp: int, pp: int) -> list[list[int]]:
    return [[stage * tp + t for t in range(tp)] for stage in range(pp)]


def pp_pairs(tp: int, pp: int) -> list[tuple[int, int]]:
    return [(stage * tp + t, (stage + 1) * tp + t) for stage in range(pp - 1) for t in range(tp)]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _rank(
    rank: int, world: int, tp: int, pp: int, backend: str, init: str, timeout_s: float, numel: int
) -> dict[str, Any]:
    """One rank's collectives; every rank makes every group, in the same order, as torch.distributed asks."""
    import datetime

    import torch
    import torch.distributed as dist

    out: dict[str, Any] = {"rank": rank, "all_reduce": [], "send_recv": [], "error": None}
    device: Any = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)

    def synced() -> float:
        if backend == "nccl":
            torch.cuda.synchronize(device)
        return time.monotonic()

    start = time.monotonic()
    dist.init_process_group(
        backend, init_method=init, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s)
    )
    out["init_s"] = round(time.monotonic() - start, 6)
    try:
        groups = [(ranks, dist.new_group(ranks)) for ranks in tp_groups(tp, pp)] if tp > 1 else []
        for ranks, group in groups:
            if rank not in ranks:
                continue
            x = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
            t0 = synced()
            dist.all_reduce(x, group=group)
            s = synced() - t0
            want = float(sum(r + 1 for r in ranks))
            out["all_reduce"].append({"ranks": ranks, "s": round(s, 6), "exact": bool(torch.all(x == want).item())})
        for src, dst in pp_pairs(tp, pp):  # stage order: a stage receives before it sends on
            if rank == dst:
                y = torch.zeros((numel,), dtype=torch.float32, device=device)
                t0 = synced()
                dist.recv(y, src=src)
                s = synced() - t0
                exact = bool(torch.all(y == float(src + 1)).item())
                out["send_recv"].append({"from": src, "to": dst, "s": round(s, 6), "exact": exact})
            elif rank == src:
                dist.send(torch.full((numel,), float(src + 1), dtype=torch.float32, device=device), dst=dst)
                synced()
    finally:
        dist.destroy_process_group()
    return out


def rank_main(argv: list[str]) -> int:
    """A rank's process: gpu_smoke.py --collective-rank RANK WORLD TP PP BACKEND INIT TIMEOUT_S NUMEL."""
    rank, world, tp, pp = (int(v) for v in argv[:4])
    backend, init, timeout_s, numel = argv[4], argv[5], float(argv[6]), int(argv[7])
    try:
        out = _rank(rank, world, tp, pp, backend, init, timeout_s, numel)
    except Exception as e:  # the backend's own words, for the controller to quote
        out = {"rank": rank, "error": f"{type(e).__name__}: {_one_line(str(e))}"}
    print(json.dumps(out, sort_keys=True), flush=True)
    return 0 if out["error"] is None else 1


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["NCCL_SOCKET_IFNAME"] = "lo"
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env.setdefault("NCCL_DEBUG", "WARN")
    return env


def _stderr_tail(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    warned = [ln for ln in lines if "NCCL WARN" in ln]
    return " / ".join((warned or lines)[-STDERR_KEPT:])


def run(script: Path, a: Args) -> dict[str, Any]:
    """Every rank as its own process, bounded by a.bound_s; the result, with `error` None when every planned
    operation ran and was exact."""
    world = a.tp * a.pp
    result: dict[str, Any] = {
        "backend": a.backend, "tp": a.tp, "pp": a.pp, "world": world, "bound_s": a.bound_s, "numel": a.numel,
        "all_reduce": [], "send_recv": [], "ranks_unfinished": [], "error": None,
    }  # fmt: skip
    if a.absent_rank is not None:
        result["absent_rank"] = a.absent_rank
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="refdeploy-collectives-") as tmp:
        init = f"file://{tmp}/rendezvous"
        procs: dict[int, subprocess.Popen[str]] = {}
        for rank in range(world):
            if rank == a.absent_rank:
                continue
            argv = [sys.executable, str(script), RANK_FLAG, str(rank), str(world), str(a.tp), str(a.pp), a.backend,
                    init, str(a.bound_s * 0.75), str(a.numel)]  # fmt: skip
            procs[rank] = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp
            )
        outputs: dict[int, tuple[str, str]] = {}
        for rank, proc in procs.items():
            left = a.bound_s - (time.monotonic() - start)
            try:
                outputs[rank] = proc.communicate(timeout=max(left, 0.001))
            except subprocess.TimeoutExpired:
                result["ranks_unfinished"].append(rank)
        for rank in result["ranks_unfinished"]:  # past the bound: terminate, then kill
            procs[rank].terminate()
        for rank in result["ranks_unfinished"]:
            try:
                outputs[rank] = procs[rank].communicate(timeout=5)
            except subprocess.TimeoutExpired:
                procs[rank].kill()
                outputs[rank] = procs[rank].communicate()
    result["s"] = round(time.monotonic() - start, 6)
    errors: list[str] = []
    every_op: list[dict[str, Any]] = []
    said: dict[str, list[int]] = {}  # the same words from several ranks, said once
    for rank in sorted(outputs):
        stdout, stderr = outputs[rank]
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        got = json.loads(lines[-1]) if lines else None
        if got is None:
            if rank not in result["ranks_unfinished"]:
                errors.append(f"rank {rank} exited {procs[rank].returncode} without a result: {_stderr_tail(stderr)}")
            continue
        every_op += (got.get("all_reduce") or []) + (got.get("send_recv") or [])
        # One entry per group, as its first rank timed it; every rank's exactness is checked below.
        result["all_reduce"] += [op for op in got.get("all_reduce") or [] if op["ranks"][0] == rank]
        result["send_recv"] += got.get("send_recv") or []
        if got.get("error"):
            tail = _stderr_tail(stderr) if a.backend == "nccl" else ""
            said.setdefault(got["error"] + (f" (NCCL: {tail})" if tail else ""), []).append(rank)
    errors += [f"rank(s) {', '.join(map(str, ranks))}: {words}" for words, ranks in said.items()]
    if result["ranks_unfinished"]:
        unfinished = ", ".join(map(str, result["ranks_unfinished"]))
        errors.insert(0, f"not finished within the bound of {a.bound_s:g} s: rank(s) {unfinished} killed")
    if a.absent_rank is not None:
        errors.insert(0, f"rank {a.absent_rank} was never started (an induced fault: --absent-rank)")
    inexact = [op for op in every_op if not op["exact"]]
    if inexact:
        errors.append(f"wrong result: {json.dumps(inexact[0], sort_keys=True)}")
    expected = (len(tp_groups(a.tp, a.pp)) if a.tp > 1 else 0, len(pp_pairs(a.tp, a.pp)))
    if not errors and (len(result["all_reduce"]), len(result["send_recv"])) != expected:
        errors.append(f"ran {len(result['all_reduce'])} all-reduce(s) and {len(result['send_recv'])} send(s), "
                      f"expected {expected[0]} and {expected[1]}")  # fmt: skip
    result["error"] = "; ".join(errors) or None
    return result
