"""The CUDA runtime image (vllm==0.32.0 on the same base and patch series) builds and imports vLLM.

Building it downloads about 4 GB and takes about 15 minutes on 2 cores, so it is never part of `make test`:
this test runs only with `make test-cuda-image` (REFDEPLOY_CUDA_IMAGE=1). It builds the image with
`make images PROFILE=rtx3090-pp3`, imports vLLM in it, and rewrites images/vllm/verified-cuda.json (the
content-hash tag built and checked, and what `import vllm` printed), which is then committed. `make test`
checks that record against the current inputs in a second (tests/unit/images/test_cuda_record.py): a change under
images/ that moves the tag fails there with one line naming this target.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime

import pytest
import yaml

from serving.plan.images import read_build_files
from tests.integration.conftest import REPO, docker, local_build_files, make, plan_here

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(3900),
    pytest.mark.skipif(
        os.environ.get("REFDEPLOY_CUDA_IMAGE") != "1",
        reason="builds the ~4 GB CUDA image: run it with make test-cuda-image",
    ),
]
ENGINE_STARTS = 0

RECORD = REPO / "images" / "vllm" / "verified-cuda.json"
PROFILE = "rtx3090-pp3"
# Words five and six: the memory-by-phase module of patch 0003 is in the CUDA build, and the worker wrapper
# that every executor builds its workers with calls it (the same code the CPU build runs in the tests). The last
# two: the GPU worker's execute_model opens a rank-trace step (patch 0004) and has the deferred receive (0005).
IMPORT_CHECK = (
    "import inspect, vllm, torch, triton; from vllm.v1.worker import refdeploy_memory as m, worker_base as wb; "
    "from vllm.v1.worker import gpu_worker as gw, refdeploy_steps; "
    "src = inspect.getsource(gw.Worker.execute_model); "
    "print(vllm.__version__, torch.__version__, torch.version.cuda, triton.__version__, m.MARK, "
    "'instrumented' if 'refdeploy_memory' in inspect.getsource(wb.WorkerWrapperBase.init_worker) else 'bare', "
    "'rank-trace' if 'refdeploy_steps.recorder' in src else 'no-rank-trace', "
    "'deferred-recv' if 'DeferredIntermediateTensors(' in src else 'no-deferred-recv')"
)


def _plan_tag() -> str:
    return str(plan_here(PROFILE)["images"]["runtime_tag"])


def _check_in_image(tag: str) -> str:
    # The image's own Python; VLLM_TARGET_DEVICE names a platform because the build machine has no GPU.
    return docker("run", "--rm", "--network", "none", "--env", "VLLM_TARGET_DEVICE=cpu", "--entrypoint",
                  "python3", tag, "-c", IMPORT_CHECK).strip()  # fmt: skip


def _assert_import_output(line: str) -> None:
    vllm_version, torch_version, cuda, _triton, mark, wrapped, steps, deferred = line.split()
    assert vllm_version == "0.32.0"
    assert (mark, wrapped) == ("refdeploy-memory-phase", "instrumented"), line
    assert (steps, deferred) == ("rank-trace", "deferred-recv"), line
    assert torch_version.startswith("2.13.0") and "+cpu" not in torch_version, torch_version
    assert cuda != "None", "torch in the CUDA image was built without CUDA"


def _smoke_without_gpu(tag: str) -> dict[str, object]:
    """The GPU smoke test the deploy runs (images/vllm/gpu_smoke.py) on this machine, which has no GPU: it must be
    in the image, import the image's torch, and fail with CUDA's own words."""
    r = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "/opt/refdeploy/gpu_smoke.py"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    result: dict[str, object] = json.loads(r.stdout)
    assert result["cuda_runtime"] == "13.0" and str(result["torch"]).startswith("2.13.0"), result
    assert str(result["error"]).startswith("CUDA did not initialise: "), result
    return result


def _alloc_conf_accepted(tag: str) -> str:
    """The class profile's PYTORCH_CUDA_ALLOC_CONF through the image's torch allocator-config parser (no GPU
    needed): torch 2.11 refused pinned_max_round_threshold_mb at CUDA's first call on a real H200
    (tests/fixtures/recorded-h200), so the image's torch must be shown to take it."""
    conf = str(yaml.safe_load((REPO / "serving" / "profiles" / f"{PROFILE}.yaml").read_text())["env"][
        "PYTORCH_CUDA_ALLOC_CONF"
    ])  # fmt: skip
    check = f"import torch; torch._C._accelerator_setAllocatorSettings({conf!r}); print('accepted', {conf!r})"
    out = docker("run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c", check).strip()
    assert out == f"accepted {conf}", out
    return out


def _gguf_plugin(tag: str) -> dict[str, object]:
    """vllm-gguf-plugin in the image: installed at its pin, registered as a vLLM general plugin, its CUDA extension
    loading beside the image's torch, and its own weight-name mapping's answer for the tiny model's architecture
    and for seed 004's GLM-5 (tests/integration/cuda_gguf_check.py)."""
    check = (REPO / "tests" / "integration" / "cuda_gguf_check.py").read_text()
    out = docker("run", "--rm", "--network", "none", "--env", "VLLM_TARGET_DEVICE=cpu", "--entrypoint", "python3",
                 tag, "-c", check)  # fmt: skip
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    assert (result["plugin"], result["gguf"]) == ("0.0.5", "0.19.0"), result
    assert result["entry_points"] == ["gguf=vllm_gguf_plugin:register"], result
    assert result["c_extension"] is True, result
    mapping = result["model_types"]
    assert isinstance(mapping, dict) and str(mapping["llama"]).startswith("mapped "), result
    return result


def _capabilities(tag: str) -> dict[str, object]:
    """What the image's vLLM offers as the plan's servability check reads it (tests/integration/cuda_capabilities.py):
    its model registry, its quantization methods' minimum capability, and what its CUDA attention selector tries,
    and each backend answers, for MLA and sparse MLA on each class's compute capability."""
    check = (REPO / "tests" / "integration" / "cuda_capabilities.py").read_text()
    out = docker("run", "--rm", "--network", "none", "--env", "VLLM_TARGET_DEVICE=cpu", "--entrypoint", "python3",
                 tag, "-c", check)  # fmt: skip
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    assert result["vllm"] == "0.32.0" and "LlamaForCausalLM" in result["architectures"], result  # type: ignore[operator]
    profile = yaml.safe_load((REPO / "serving" / "profiles" / f"{PROFILE}.yaml").read_text())
    return {"distribution": profile["image"]["distribution"], "version": profile["image"]["version"], **result}


def _jit(tag: str) -> dict[str, object]:
    """vLLM's compiled CUDA extensions loaded (vllm._C_stable_libtorch and _moe_C: 0.32's names for vllm._C), and the
    JIT toolchain FlashInfer and DeepGEMM use on first use: the image's nvcc with g++
    building a kernel for each class's compute capability, and torch's own C++ JIT (tests/integration/
    cuda_jit_check.py). Printed, so make test-cuda-image's log shows each."""
    check = (REPO / "tests" / "integration" / "cuda_jit_check.py").read_text()
    out = docker("run", "--rm", "--network", "none", "--env", "VLLM_TARGET_DEVICE=cpu", "--entrypoint", "python3",
                 tag, "-c", check)  # fmt: skip
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    print(f"\nvLLM's CUDA extensions: {result['vllm_C']}\nnvcc: {result['nvcc']}\ng++: {result['gxx']}")
    print(f"JIT cubins: {result['cubins']}\ntorch C++ JIT: {result['torch_extension']}")
    loaded = result["vllm_C"]
    assert isinstance(loaded, dict), result
    assert loaded["with_stub_driver"] == {
        n: "loaded" for n in ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch")
    }
    assert loaded["ops"] == {"_C.rms_norm": True, "_moe_C.moe_sum": True}, result
    assert str(result["nvcc"]).startswith("Cuda compilation tools, release 13."), result
    cubins = result["cubins"]
    assert isinstance(cubins, dict) and all(isinstance(cubins.get(a), dict) for a in ("sm_86", "sm_120")), result
    extension = result["torch_extension"]
    assert isinstance(extension, dict) and extension["twice(21)"] == 42, result
    return result


def test_cuda_runtime_image_builds_and_imports_vllm() -> None:
    tag = _plan_tag()
    r = make("images", f"PROFILE={PROFILE}", timeout=3600)
    assert r.rc == 0, r.output[-5000:]
    line = _check_in_image(tag)
    _assert_import_output(line)
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", tag))
    assert labels["org.refdeploy.vllm.distribution"] == "vllm"
    assert labels["org.refdeploy.vllm.wheelhouse"] == "off"
    assert any(k.startswith("org.refdeploy.vllm.patch.0001-") for k in labels)
    assert labels["org.refdeploy.cuda-runtime"] == "13.0"  # the host's driver floor (serving/host/cuda_driver.py)
    smoke = _smoke_without_gpu(tag)
    alloc_conf = _alloc_conf_accepted(tag)
    gguf = _gguf_plugin(tag)
    capabilities = _capabilities(tag)
    jit = _jit(tag)
    RECORD.write_text(
        json.dumps(
            {
                "tag": tag,
                # What the tag hashed of the files the build copies from the host (the CUDA build reads no
                # wheelhouse): tests/unit/images/test_cuda_record.py plans the tag again from it.
                "extra_ca_sha256": read_build_files("", local_build_files()["extra_ca_file"]).extra_ca_sha256,
                "image_id": docker("image", "inspect", "--format", "{{.Id}}", tag).strip(),
                "import_output": line,
                "gpu_smoke_without_gpu": smoke,
                "alloc_conf_check": alloc_conf,
                "gguf_plugin": gguf,
                "jit_check": jit,
                # What the plan's servability check reads (serving/plan/servability.py).
                "capabilities": capabilities,
                "verified_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "how": "tests/integration/test_cuda_image.py: make images PROFILE=rtx3090-pp3, then "
                + IMPORT_CHECK
                + "; gguf_plugin: tests/integration/cuda_gguf_check.py in the image; capabilities: "
                "tests/integration/cuda_capabilities.py in the image; jit_check: tests/integration/"
                "cuda_jit_check.py in the image",
            },
            indent=2,
        )
        + "\n"
    )
