"""Find the vLLM processes in this PID namespace and name their roles.

A probe container started with `--pid container:<vllm>` sees the serving container's processes in its own
/proc. vLLM 0.32 sets process titles: the API server runs as `vllm serve ...` (or the api_server module),
the engine as `VLLM::EngineCore`, each executor worker as `VLLM::Worker` (GPU builds add a suffix such as
`VLLM::Worker_PP1` or `VLLM::Worker_TP3`). Helper processes (multiprocessing's resource tracker, the
probes' own tools) are not serving processes and are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Role = Literal["api_server", "engine_core", "worker"]
# The order in which processes are reported: the request path.
ROLE_ORDER: tuple[Role, ...] = ("api_server", "engine_core", "worker")


_WORKER_TITLE = re.compile(r"^VLLM::Worker(?:_PP(?P<pp>\d+))?(?:_TP(?P<tp>\d+))?\b")


def worker_rank(title: str, tp_size: int) -> int | None:
    """A worker's rank from its process title: VLLM::Worker (one rank) is rank 0, VLLM::Worker_TP3 rank 3 of a TP
    group, VLLM::Worker_PP1 stage 1 of PP, VLLM::Worker_PP1_TP2 rank 1*tp+2; None for anything that is not a worker."""
    m = _WORKER_TITLE.match(title.strip())
    if m is None:
        return None
    return int(m["pp"] or 0) * tp_size + int(m["tp"] or 0)


def worker_label(title: str) -> str | None:
    """The rank part of a worker's title ("TP1", "PP1_TP2", "" for a single worker); None for a non-worker."""
    m = _WORKER_TITLE.match(title.strip())
    if m is None:
        return None
    return "_".join(f"{k.upper()}{m[k]}" for k in ("pp", "tp") if m[k] is not None)


@dataclass(frozen=True)
class VllmProcess:
    pid: int
    role: Role
    title: str  # the process title (cmdline joined), cut to 200 characters
    comm: str

    @property
    def name(self) -> str:
        """How reports name it: its role, and for a worker its rank (worker_TP1); one worker is plain "worker"."""
        label = worker_label(self.title) if self.role == "worker" else None
        return f"{self.role}_{label}" if label else self.role


@dataclass(frozen=True)
class ThreadInfo:
    tid: int
    comm: str


def classify(cmdline: str) -> Role | None:
    """The role a command line plays in vLLM serving, or None for anything else."""
    head = cmdline.strip()
    if head.startswith("VLLM::EngineCore"):
        return "engine_core"
    if head.startswith("VLLM::Worker"):
        return "worker"
    if "resource_tracker" in head or "multiprocessing" in head:
        return None
    words = head.split()
    for i, w in enumerate(words[:2]):
        if (w == "vllm" or w.endswith("/vllm")) and words[i + 1 : i + 2] == ["serve"]:
            return "api_server"
    if "vllm.entrypoints.openai.api_server" in head:
        return "api_server"
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:  # the process exited, or we may not look
        return None


def discover(proc_root: Path = Path("/proc")) -> list[VllmProcess]:
    """vLLM processes visible under proc_root, in request-path order, then by PID."""
    found: list[VllmProcess] = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        raw = _read(entry / "cmdline")
        if not raw:
            continue  # kernel thread or gone
        cmdline = raw.replace("\0", " ").strip()
        role = classify(cmdline)
        if role is None:
            continue
        comm = (_read(entry / "comm") or "").strip()
        found.append(VllmProcess(pid=int(entry.name), role=role, title=cmdline[:200], comm=comm))
    return sorted(found, key=lambda p: (ROLE_ORDER.index(p.role), p.pid))


def threads(pid: int, proc_root: Path = Path("/proc")) -> list[ThreadInfo]:
    """The threads of a process (empty when it is gone)."""
    task_dir = proc_root / str(pid) / "task"
    try:
        entries = sorted(task_dir.iterdir(), key=lambda p: int(p.name))
    except OSError:
        return []
    out = []
    for t in entries:
        comm = _read(t / "comm")
        if comm is not None:
            out.append(ThreadInfo(tid=int(t.name), comm=comm.strip()))
    return out


NO_VLLM = (
    "no vLLM process in this PID namespace (looked for 'vllm serve', VLLM::EngineCore, VLLM::Worker): "
    "is the serving container running? check with `make status`"
)
