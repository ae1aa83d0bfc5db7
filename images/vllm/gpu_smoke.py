"""The GPU smoke test: run inside the runtime image, with the launch's devices and runtime, before a deploy's
point of no return (issue 28; the controller's side is serving/plan/gpu_smoke.py).

It only measures; the controller judges the result against the plan. For every GPU this container sees, in
the container's own numbering (Docker's --gpus renumbers from 0): CUDA initialises, its name, compute
capability, total and free memory, and a small matrix product whose every element is known exactly. Then,
where the plan has more than one rank (issue 45), the collectives the engine will depend on, over the same
GPUs, environment and /dev/shm (smoke_collectives.py, beside this file).

  python3 gpu_smoke.py [--size N] [--tp N --pp N --backend nccl|gloo --bound-s S ...]

Prints one JSON object on stdout and exits 0 when CUDA initialised on at least one GPU, every GPU's product
was exact and every collective was exact within its bound; otherwise exits 1, with the same JSON (its "error"
the first failure, in the tool's own words) so that the controller can quote it. Standard library and torch
only: it runs in the image, not the controller's venv.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import smoke_collectives  # beside this file (/opt/refdeploy/ in the image): on sys.path as the script's directory


def _driver_version() -> int | None:
    """The CUDA version the driver supports, from libcuda's cuDriverGetVersion (13000 for 13.0); None where the
    driver's library is not mounted into the container."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        return int(version.value) if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 else None
    except OSError:
        return None


def _device(torch: Any, index: int, size: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    free, total = torch.cuda.mem_get_info(index)
    out: dict[str, Any] = {
        "index": index,
        "name": props.name,
        "capability": [props.major, props.minor],
        "total_bytes": int(total),
        "free_bytes": int(free),
        "multiprocessors": props.multi_processor_count,
        # nvidia-smi's form, 00000000:00:06.0, so the controller can match it to the planned GPU.
        "pci_bus_id": "{:08x}:{:02x}:{:02x}.0".format(
            int(getattr(props, "pci_domain_id", 0)),
            int(getattr(props, "pci_bus_id", 0)),
            int(getattr(props, "pci_device_id", 0)),
        ).upper(),
        "uuid": str(getattr(props, "uuid", "")) or None,
    }
    # ones(N, N) @ ones(N, N) is N everywhere: exact in bf16 for N up to 256, in fp32 far beyond.
    start = time.monotonic()
    a = torch.ones((size, size), device=f"cuda:{index}", dtype=torch.float32)
    c = a @ a
    torch.cuda.synchronize(index)
    out["matmul_s"] = round(time.monotonic() - start, 6)
    out["matmul_exact"] = bool(torch.all(c == float(size)).item())
    return out


def run(size: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "schema_version": 1,
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia_visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "devices": [],
        "error": None,
    }
    try:
        import torch
    except Exception as e:  # an image without torch is the image's fault, named as such
        result["error"] = f"torch does not import in this image: {e}"
        return result
    result["torch"] = torch.__version__
    result["cuda_runtime"] = torch.version.cuda
    result["driver_cuda"] = _driver_version()
    try:
        # torch.cuda.is_available() hides why; init() raises with the driver's own words.
        torch.cuda.init()
        count = torch.cuda.device_count()
    except Exception as e:
        result["error"] = f"CUDA did not initialise: {' '.join(str(e).split())}"
        return result
    result["device_count"] = count
    if count == 0:
        result["error"] = "CUDA initialised but sees no GPU"
        return result
    for index in range(count):
        try:
            result["devices"].append(_device(torch, index, size))
        except Exception as e:
            result["error"] = f"GPU {index}: {' '.join(str(e).split())}"
            return result
        if not result["devices"][-1]["matmul_exact"]:
            result["error"] = f"GPU {index}: a {size}x{size} product of ones was not {size} everywhere"
            return result
    return result


def recorded(path: str) -> dict[str, Any]:
    """The per-GPU phase's result as recorded elsewhere (the GPU test hosts' stand-in, serving/plan/standin.py,
    on a machine with no GPU): read, not measured, and labelled so in the result."""
    result: dict[str, Any] = json.loads(Path(path).read_text())
    result["devices_recorded"] = path
    return result


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == [smoke_collectives.RANK_FLAG]:
        return smoke_collectives.rank_main(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--devices-recorded", metavar="PATH", help="read the per-GPU result from PATH (stand-in only)")
    smoke_collectives.add_arguments(p)
    a = p.parse_args(argv)
    result = recorded(a.devices_recorded) if a.devices_recorded else run(a.size)
    if result.get("error") is None and a.tp * a.pp > 1:
        result["collectives"] = smoke_collectives.run(
            Path(__file__).resolve(), smoke_collectives.Args.from_namespace(a)
        )
        if result["collectives"]["error"] is not None:
            result["error"] = f"collectives ({a.backend}): {result['collectives']['error']}"
    print(json.dumps(result, sort_keys=True))
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
