"""What one capture is asked for (`CaptureConfig`), what each of its parts reported (`PartStatus`), and the input
checked before anything is written (`check_input`: CaptureInputError, exit 2 of probes/capture/bundle.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from probes.base.unix_http import VLLM_SOCKET
from probes.capture.parts import DEFAULT_PARTS, PARTS
from probes.readers import procs
from probes.senders import load

Status = Literal["successful", "failed", "skipped"]


class CaptureInputError(ValueError):
    """Bad input: nothing was captured."""


@dataclass
class PartStatus:
    status: Status
    reason: str | None = None
    files: list[str] = field(default_factory=list)


@dataclass
class CaptureConfig:
    out: Path
    seconds: float
    parts: tuple[str, ...] = DEFAULT_PARTS
    metrics_url: str = "http://localhost/metrics"
    # vLLM's unix socket (it has no address); None: metrics_url over TCP (a test's own server).
    metrics_socket: str | None = VLLM_SOCKET
    data_files: tuple[Path, ...] = ()
    cgroup_root: Path = Path("/sys/fs/cgroup")
    proc_root: Path = Path("/proc")
    stack_dumps: int = 3
    record_seconds: int = 0
    perf_seconds: int = 10
    wchan_rate_hz: float = 10.0
    host: str = "localhost"
    container: str = "refdeploy-vllm"
    # Why no data file was given (the page-cache reading is skipped with it); "" when files were given.
    data_file_note: str = ""
    # Why perf is skipped (the capture role found no capability to give it); "" when it runs.
    perf_skip_note: str = ""
    # The class's PCIe link (generation, width) that a busy GPU must reach; None where no class says.
    pcie_min: tuple[int, int] | None = None
    # The requests the capture sends through its window (make capture WORKLOAD=...); None: it only watches.
    load: load.LoadSpec | None = None
    # The patched runtime's rank trace directory (probes/readers/rank_steps.py); None where the engine writes none.
    rank_trace_dir: Path | None = None
    # What the serving container's labels said of its engine at the window's start (the capture role reads them):
    # {"profiler": "torch" or "", "stand_in": what stands in or ""}; None where the caller did not say.
    engine: dict[str, str] | None = None


def check_input(cfg: CaptureConfig) -> list[procs.VllmProcess]:
    """The vLLM processes to capture, or CaptureInputError before anything is written."""
    unknown = sorted(set(cfg.parts) - set(PARTS))
    if unknown:
        raise CaptureInputError(f"unknown part(s) {unknown}: choose from {', '.join(PARTS)}")
    if cfg.seconds <= 0:
        raise CaptureInputError(f"--seconds must be positive, got {cfg.seconds:g}")
    if cfg.out.exists() and any(cfg.out.iterdir()):
        raise CaptureInputError(f"{cfg.out} is not empty: a bundle goes into a new directory")
    found = procs.discover(cfg.proc_root)
    if not found:
        raise CaptureInputError(procs.NO_VLLM)
    for f in cfg.data_files:
        if not f.is_file():
            raise CaptureInputError(f"--data-file {f}: not a regular file (mount the served files read-only)")
    return found
