"""How long a deploy waits for a new engine to answer /health: from the plan, not a constant (issue 28 item 5).

A first start reads the weights from the served drive (and, on a GPU host, copies them to the devices), then
profiles memory, compiles and captures CUDA graphs. A fixed 300 s is enough for the embedded default and far too
little for seed 004's GLM-5 GGUF (hundreds of GB on the PRO 6000 class), whose deploy would roll back a healthy
engine still loading. So the bound is computed:

    timeout = max(FLOOR_S, 2 x weights / load rate + compile allowance + START_S)

The weights are the model directory's files as the plan's read of the host listed them. The load rate is the
class's `load_mib_s` (inventory gpu_class), else DEFAULT_LOAD_MIB_S; it is taken twice, once for the read and
once for the copy and the margin a cold page cache needs. The compile allowance is 0 for an eager engine
(enforce_eager) and COMPILE_S otherwise. These constants are judgements, not measurements on the classes' hardware
(none has been at hand): each says where it comes from, and an operator sets serve_health_timeout_s to override.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from serving.config.profile import Profile

# The bound before this module: what the embedded default and the test hosts were measured against.
FLOOR_S = 300
# A SATA SSD's sequential read (about 500 MB/s), where a class names no rate of its own: the slowest drive a
# class host is expected to serve from, so an NVMe host waits longer than it needs, never shorter.
DEFAULT_LOAD_MIB_S = 500.0
# torch.compile of every shape vLLM compiles for plus CUDA graph capture: vLLM's own logs for large models on
# one node report minutes for each; ten minutes for both, a compile cache (serving/plan/render.py) makes later starts
# shorter.
COMPILE_S = 600
# The engine's processes starting and importing before they read anything (about 20 s for the CPU build here).
START_S = 60


def health_timeout(model_bytes: int, load_mib_s: float | None, enforce_eager: bool | None) -> tuple[int, str]:
    """(seconds, the line that says how they were reached)."""
    rate = float(load_mib_s) if load_mib_s else DEFAULT_LOAD_MIB_S
    source = "gpu_class load_mib_s" if load_mib_s else "no class rate: a SATA SSD"
    load_s = model_bytes / (rate * 2**20)
    compile_s = 0 if enforce_eager else COMPILE_S
    computed = math.ceil(2 * load_s + compile_s + START_S)
    timeout = max(FLOOR_S, computed)
    why = (
        f"{model_bytes / 2**30:.2f} GiB of weights at {rate:g} MiB/s ({source}), twice: {2 * load_s:.0f} s; "
        f"compile {'none (enforce_eager)' if enforce_eager else f'{compile_s} s'}; start {START_S} s"
    )
    if computed < FLOOR_S:
        why += f"; {computed} s, raised to the floor of {FLOOR_S} s"
    return timeout, f"the engine has {timeout} s to answer /health ({why})"


def model_bytes(files: Sequence[tuple[int, str]], model_dir: str) -> int:
    """The bytes of the served files under the model's directory (a listing of (size, path))."""
    prefix = model_dir.rstrip("/") + "/"
    return sum(size for size, path in files if path.startswith(prefix))


def plan_fields(
    profile: Profile, files: Sequence[tuple[int, str]], gpu_class: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The plan's health_timeout_s and health_timeout_line (serving/plan/plan.py)."""
    load = (gpu_class or {}).get("load_mib_s")
    seconds, line = health_timeout(
        model_bytes(files, profile.model.host_path), float(load) if load else None, profile.vllm.enforce_eager
    )
    return {"health_timeout_s": seconds, "health_timeout_line": line}
