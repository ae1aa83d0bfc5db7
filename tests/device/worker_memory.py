"""Patch 0003's readings (memory by phase per worker) from a worker-like process on a real GPU (issue 28, item 10).

vLLM is not installed on the device machine, so the patch's new module is taken from the patch file itself,
with a stand-in `vllm.logger` (Python's logging, in vLLM's line format), and wrapped around a worker-like
object whose phases do what a worker's do to memory: load "weights" to the GPU, profile (a peak of
activations), allocate a "KV cache", warm up, then execute prefill and decode steps with a pinned staging
buffer. The log lines are what the deploy, capture and bench parse ("refdeploy-memory-phase {json}").
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

PATCH = Path(__file__).resolve().parents[2] / "images/vllm/patches/0003-memory-by-phase-per-worker.patch"
TARGET = "+++ b/vllm/v1/worker/refdeploy_memory.py"


def extract(to: Path) -> None:
    lines = PATCH.read_text().splitlines()
    start = lines.index(TARGET) + 2  # past the @@ line
    body = []
    for line in lines[start:]:
        if line.startswith("diff "):
            break
        body.append(line[1:])
    pkg = to / "vllm" / "v1" / "worker"
    pkg.mkdir(parents=True)
    for d in (to / "vllm", to / "vllm" / "v1", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "refdeploy_memory.py").write_text("\n".join(body) + "\n")
    (to / "vllm" / "logger.py").write_text(
        "import logging\n"
        "logging.basicConfig(level=logging.INFO, stream=__import__('sys').stdout,\n"
        "    format='(Worker pid=%(process)d) INFO %(asctime)s [%(filename)s:%(lineno)d] %(message)s')\n"
        "def init_logger(name):\n    return logging.getLogger(name)\n"
    )


class Worker:
    rank = 0
    local_rank = 0

    def load_model(self) -> None:
        import torch

        self.weights = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(64)]  # 2 GiB

    def determine_available_memory(self) -> int:
        import torch

        peak = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")  # an activation peak, freed again
        del peak
        free, _ = torch.cuda.mem_get_info()
        return free

    def initialize_from_config(self, _config: object) -> None:
        import torch

        self.kv = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
        self.staging = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)

    def compile_or_warm_up_model(self) -> None:
        import torch

        x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
        for w in self.weights[:8]:
            x = x @ w
        torch.cuda.synchronize()

    def execute_model(self, scheduler_output: object) -> None:
        import torch

        tokens = scheduler_output.total_num_scheduled_tokens  # type: ignore[attr-defined]
        x = torch.randn(tokens, 4096, device="cuda", dtype=torch.bfloat16)
        for w in self.weights:
            x = torch.tanh(x @ w)
        self.staging[:1024].copy_(x.flatten().view(torch.uint8)[:1024], non_blocking=False)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    extract(tmp)
    sys.path.insert(0, str(tmp))
    from vllm.v1.worker.refdeploy_memory import instrument  # type: ignore[import-not-found]

    w = Worker()
    instrument(w)
    w.load_model()
    w.determine_available_memory()
    w.initialize_from_config(None)
    w.compile_or_warm_up_model()
    w.execute_model(
        SimpleNamespace(
            scheduled_new_reqs=["r1", "r2"],
            num_scheduled_tokens={"r1": 512, "r2": 512},
            total_num_scheduled_tokens=1024,
        )
    )
    for _ in range(40):
        w.execute_model(
            SimpleNamespace(
                scheduled_new_reqs=[], num_scheduled_tokens={"r1": 1, "r2": 1}, total_num_scheduled_tokens=2
            )
        )
    logging.shutdown()


if __name__ == "__main__":
    main()
