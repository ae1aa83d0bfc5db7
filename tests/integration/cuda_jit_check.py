"""Run inside the CUDA runtime image by tests/integration/test_cuda_image.py (its text is passed to `python3 -c`;
the machine that builds the image has no GPU). It prints one JSON object:

- `vllm_C`: vLLM's compiled CUDA extensions loaded into the image's Python. In 0.32 they are
  `vllm._C_stable_libtorch` and `vllm._moe_C_stable_libtorch` (vllm/platforms/cuda.py imports them; there is no
  `vllm._C` on CUDA), and an import of the `vllm` package alone never opens them. They link the driver's
  libcuda.so.1, which only the NVIDIA container runtime mounts, on a GPU host: so first the import as this machine
  can do it (`without_driver`: the loader's words), then with a libcuda.so.1 of no symbols built here by the image's
  g++ and bound lazily (`with_stub_driver`: "loaded" or the loader's words, every other library resolved for real),
  and whether loading registered their kernels with torch (`ops`);
- `nvcc`: the release line of $CUDA_HOME/bin/nvcc, the compiler FlashInfer's and DeepGEMM's JIT builds call
  (vLLM's _flashinfer_nvcc_path reads CUDA_HOME), and `gxx` that of the host compiler nvcc drives;
- `cubins`: a small kernel (half-precision arithmetic, so the toolkit's own headers are found) compiled by that nvcc
  with g++ as its host compiler into a cubin for each class's compute capability (sm_86: RTX 3090; sm_120: RTX PRO
  6000 Blackwell), as DeepGEMM's JIT does at first use: each one's size in bytes, or the compiler's words;
- `torch_extension`: a C++ function built with torch's own JIT (torch.utils.cpp_extension.load_inline: g++, ninja
  and torch's headers, the path a first-use compile inside vLLM's dependencies takes), loaded and called.

Nothing runs on a GPU: building needs none, and loading a CUDA library does not initialise CUDA.
"""

import ctypes
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

out: dict[str, object] = {"cuda_home": os.environ.get("CUDA_HOME")}


def _first_line(argv: list[str], pick: str) -> str:
    try:
        text = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return next((ln.strip() for ln in text.splitlines() if pick in ln), text.strip()[-200:])


EXTENSIONS = ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch")


def _load(name: str) -> str:
    try:
        importlib.import_module(name)
    except Exception as e:  # the loader's own words are what is recorded
        return f"{type(e).__name__}: {e}"
    return "loaded"


vllm_c: dict[str, object] = {"without_driver": {n: _load(n) for n in EXTENSIONS}}
with tempfile.TemporaryDirectory() as stub_dir:
    stub = Path(stub_dir) / "libcuda.so.1"
    built = subprocess.run(["g++", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-x", "c++", "/dev/null", "-o",
                            str(stub)], capture_output=True, text=True, timeout=120)  # fmt: skip
    if built.returncode == 0:
        # Loaded first under the driver's soname, it answers the extensions' DT_NEEDED; their calls into it are
        # bound lazily, at a first call that never comes here.
        ctypes.CDLL(str(stub), mode=os.RTLD_GLOBAL)
        sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
        vllm_c["with_stub_driver"] = {n: _load(n) for n in EXTENSIONS}
    else:
        vllm_c["with_stub_driver"] = f"the stub did not build: {' '.join(built.stderr.split())[-300:]}"
try:
    import torch

    vllm_c["ops"] = {"_C.rms_norm": hasattr(torch.ops._C, "rms_norm"),
                     "_moe_C.moe_sum": hasattr(torch.ops._moe_C, "moe_sum")}  # fmt: skip
except Exception as e:
    vllm_c["ops"] = f"{type(e).__name__}: {e}"
out["vllm_C"] = vllm_c

nvcc = str(Path(os.environ.get("CUDA_HOME") or "/nonexistent") / "bin" / "nvcc")
out["nvcc"] = _first_line([nvcc, "--version"], "release")
out["gxx"] = _first_line(["g++", "--version"], "g++")

KERNEL = r"""
#include <cuda_fp16.h>
extern "C" __global__ void axpy_half(const __half* x, __half* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half(a * __half2float(x[i]) + __half2float(y[i]));
}
"""
cubins: dict[str, object] = {}
with tempfile.TemporaryDirectory() as tmp:
    src = Path(tmp) / "axpy.cu"
    src.write_text(KERNEL)
    for arch in ("sm_86", "sm_120"):
        cubin = Path(tmp) / f"axpy.{arch}.cubin"
        start = time.monotonic()
        try:
            r = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-ccbin", "g++", "-O2", str(src), "-o", str(cubin)],
                               capture_output=True, text=True, timeout=300)  # fmt: skip
        except OSError as e:
            cubins[arch] = f"{type(e).__name__}: {e}"
            continue
        if r.returncode == 0 and cubin.is_file():
            cubins[arch] = {"bytes": cubin.stat().st_size, "seconds": round(time.monotonic() - start, 2)}
        else:
            cubins[arch] = " ".join((r.stderr or r.stdout).split())[-400:] or f"nvcc exited {r.returncode}"
out["cubins"] = cubins

try:
    from torch.utils.cpp_extension import load_inline

    start = time.monotonic()
    with tempfile.TemporaryDirectory() as build:
        ext = load_inline(
            name="refdeploy_jit_check",
            cpp_sources="int64_t twice(int64_t x) { return 2 * x; }",
            functions=["twice"],
            build_directory=build,
            verbose=False,
        )
        out["torch_extension"] = {"twice(21)": ext.twice(21), "seconds": round(time.monotonic() - start, 2)}
except Exception as e:
    out["torch_extension"] = f"{type(e).__name__}: {' '.join(str(e).split())[-400:]}"

print(json.dumps(out, sort_keys=True))
