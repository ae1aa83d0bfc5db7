"""images/vllm/verified-cuda.json is the record of the last CUDA image built and imported (make test-cuda-image):
its tag must be the one the current inputs make, since that tag is their content hash. A change under images/
that moves it fails here in a second, where building the image to find out would take 15 minutes."""

from __future__ import annotations

import json
from pathlib import Path

from serving.config.profile import load_profile
from serving.plan.images import BuildFiles, plan_images

REPO = Path(__file__).resolve().parents[3]
RECORD = REPO / "images" / "vllm" / "verified-cuda.json"


def _planned_tag(record: dict[str, str]) -> str:
    """The tag the current inputs under images/ make, with the CA file the record's build hashed (a record older
    than the CA's hash in the tags hashed it as none, as that plan did; the build copied this machine's)."""
    profile = load_profile("rtx3090-pp3")
    files = BuildFiles(extra_ca_sha256=record.get("extra_ca_sha256") or BuildFiles().extra_ca_sha256)
    return plan_images(profile.image.distribution, profile.image.version, build_files=files).runtime_tag


def test_the_cuda_image_record_is_for_the_current_inputs() -> None:
    record = json.loads(RECORD.read_text())
    tag = _planned_tag(record)
    assert record["tag"] == tag, (
        f"images/vllm/verified-cuda.json records {record['tag']}, the inputs under images/ now make {tag}: "
        "run `make test-cuda-image` (builds and imports it, ~15 min) and commit the record it rewrites"
    )
    vllm_version, torch_version, cuda, _triton, mark, wrapped, steps, deferred = record["import_output"].split()
    assert (vllm_version, mark, wrapped) == ("0.32.0", "refdeploy-memory-phase", "instrumented")
    assert (steps, deferred) == ("rank-trace", "deferred-recv")
    assert torch_version.startswith("2.13.0") and "+cpu" not in torch_version and cuda != "None"
    assert record["image_id"].startswith("sha256:")
    # The JIT toolchain FlashInfer and DeepGEMM compile with at first use, as the record's build found it
    # (tests/integration/cuda_jit_check.py): vLLM's CUDA extensions loaded, a kernel built for each class, torch's
    # C++ JIT.
    jit = record["jit_check"]
    assert set(jit["vllm_C"]["with_stub_driver"].values()) == {"loaded"}, jit
    assert jit["vllm_C"]["ops"] == {"_C.rms_norm": True, "_moe_C.moe_sum": True}, jit
    assert all(isinstance(jit["cubins"].get(arch), dict) for arch in ("sm_86", "sm_120")), jit
    assert jit["torch_extension"]["twice(21)"] == 42, jit
