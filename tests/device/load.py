"""A load with known phases for the samplers to see (issue 28, item 10): idle, bf16 matrix products, host-to-device
copies from pinned memory, idle. Prints each phase's start and end (monotonic and wall clock) as JSON lines."""

from __future__ import annotations

import json
import sys
import time

import torch


def phase(name: str, seconds: float, work) -> None:  # type: ignore[no-untyped-def]
    start, wall = time.monotonic(), time.time()
    n = 0
    while time.monotonic() - start < seconds:
        work()
        n += 1
    torch.cuda.synchronize()
    print(
        json.dumps(
            {
                "phase": name,
                "mono": [round(start, 6), round(time.monotonic(), 6)],
                "wall": [round(wall, 6), round(time.time(), 6)],
                "iterations": n,
            }
        ),
        flush=True,
    )


def main() -> None:
    idle = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    phase("idle", idle, lambda: time.sleep(0.05))

    def matmul() -> None:
        for _ in range(20):
            torch.mm(a, b)
        torch.cuda.synchronize()

    def h2d() -> None:
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()

    phase("matmul_bf16_8192", 6.0, matmul)
    phase("h2d_copy_1GiB", 4.0, h2d)
    phase("idle", idle, lambda: time.sleep(0.05))


if __name__ == "__main__":
    main()
