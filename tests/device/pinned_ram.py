"""Host RAM of one 4.239 GiB pinned buffer (REFERENCE §5, serving/host/pinned_ram.py), read on a real GPU host.

  python3 pinned_ram.py torch       # torch.empty(pin_memory=True): the caching host allocator
  python3 pinned_ram.py registered  # pageable memory, then cudaHostRegister (vLLM's native offload path)

PYTORCH_CUDA_ALLOC_CONF is whatever the caller set. Prints one JSON object: /proc/self/status, /proc/meminfo and
torch's host allocator stats before the buffer, after it is allocated, after every page is written, after it is
freed, and after the host cache is emptied.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

GIB = 1 << 30
REQUEST = round(4.239 * GIB)


def kib(path: str, keys: tuple[str, ...]) -> dict[str, int]:
    out = {}
    with Path(path).open() as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in keys:
                out[name] = int(rest.split()[0]) * 1024
    return out


def reading() -> dict[str, Any]:
    r: dict[str, Any] = {"mono": round(time.monotonic(), 6)}
    r["status"] = kib("/proc/self/status", ("VmRSS", "VmHWM", "VmLck", "VmPin"))
    r["meminfo"] = kib("/proc/meminfo", ("MemAvailable", "Mlocked", "Unevictable", "AnonPages", "Shmem"))
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is not None:
        s = stats()
        r["host_memory_stats"] = {k: v for k, v in s.items() if k.endswith(".current") or k.endswith(".peak")}
    return r


def main() -> None:
    mode = sys.argv[1]
    torch.zeros(1, device="cuda")  # the CUDA context first, so its own pinned pages are in "before"
    out: dict[str, Any] = {
        "mode": mode,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "torch": torch.__version__,
        "request_bytes": REQUEST,
        "readings": {},
    }
    out["readings"]["before"] = reading()
    start = time.monotonic()
    if mode == "torch":
        buf = torch.empty(REQUEST, dtype=torch.uint8, pin_memory=True)
    else:
        buf = torch.empty(REQUEST, dtype=torch.uint8)
        rc = torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), REQUEST, 0)
        out["cudaHostRegister_rc"] = int(rc) if not isinstance(rc, tuple) else [int(x) for x in rc]
    out["alloc_s"] = round(time.monotonic() - start, 3)
    out["is_pinned"] = bool(buf.is_pinned())
    out["readings"]["allocated"] = reading()
    buf.fill_(1)
    out["readings"]["written"] = reading()
    if mode != "torch":
        torch.cuda.cudart().cudaHostUnregister(buf.data_ptr())
    del buf
    out["readings"]["freed"] = reading()
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()
        out["readings"]["cache_emptied"] = reading()
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
