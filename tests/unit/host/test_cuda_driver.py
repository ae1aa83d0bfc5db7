"""The driver floor a runtime image sets (serving/host/cuda_driver.py), and the host check that applies it."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.host import cuda_driver, gpu_facts
from serving.plan.images import CUDA_RUNTIME_LABEL, plan_images

REPO = Path(__file__).resolve().parents[3]
RTX3090 = REPO / "tests" / "fixtures" / "gpu-hosts" / "rtx3090-3gpu"
SPEC = gpu_facts.GpuClassSpec(
    name="rtx3090-pp3", gpu_count=3, model_substring="RTX 3090", min_driver="570.86", min_memory_mib=24000
)


def _gpus(driver: str) -> list[gpu_facts.GpuInfo]:
    text = (RTX3090 / "nvidia-smi-query-gpu.csv").read_text().replace("580.95.05", driver)
    return gpu_facts.parse_query_gpu(text)


def test_the_runtime_image_records_the_cuda_runtime_its_pinned_set_installs() -> None:
    cuda = plan_images("vllm", "0.32.0")
    # images/vllm/constraints/vllm-0.32.0.txt pins nvidia-cuda-runtime==13.0.96 (torch 2.13.0+cu130).
    assert "nvidia-cuda-runtime==13.0.96" in Path(cuda.constraints_file).read_text().splitlines()
    assert (cuda.cuda_runtime, cuda.labels[CUDA_RUNTIME_LABEL]) == ("13.0", "13.0")
    assert f"--label={CUDA_RUNTIME_LABEL}=13.0" in cuda.docker_build_flags
    cpu = plan_images("vllm-cpu", "0.32.0")
    assert cpu.cuda_runtime is None and CUDA_RUNTIME_LABEL not in cpu.labels


@pytest.mark.parametrize(
    ("constraints", "runtime"),
    [
        ("torch==2.13.0\nnvidia-cuda-runtime==13.0.96\n", "13.0"),
        ("nvidia-cuda-runtime-cu12==12.8.90  # via torch\n", "12.8"),
        ("torch==2.13.0+cpu\n", None),
        ("nvidia-cuda-runtime-cu12-stubs==1.0\n", None),
    ],
)
def test_the_cuda_runtime_is_read_from_its_wheel_pin(constraints: str, runtime: str | None) -> None:
    assert cuda_driver.cuda_runtime_of(constraints) == runtime


def test_two_cuda_runtimes_in_one_set_are_refused() -> None:
    with pytest.raises(cuda_driver.CudaDriverError, match=r"several CUDA runtimes \(12.8, 13.0\)"):
        cuda_driver.cuda_runtime_of("nvidia-cuda-runtime==13.0.96\nnvidia-cuda-runtime-cu12==12.8.90\n")


def test_a_host_below_the_images_driver_floor_is_refused_naming_both_versions() -> None:
    # An R570 driver is above the class's own floor (570.86) and below CUDA 13's (580).
    problems = gpu_facts.check_class(SPEC, _gpus("570.195.03"), "gpu3090-a", None, "13.0")
    assert problems == [
        "driver 570.195.03 on gpu3090-a is older than 580, the oldest driver the image's CUDA 13.0 runtime runs on "
        "(NVIDIA CUDA Compatibility guide, Minor Version Compatibility, Table 1): upgrade the host's driver to R580 "
        "or newer"
    ]
    assert gpu_facts.check_class(SPEC, _gpus("580.95.05"), "gpu3090-a", None, "13.0") == []
    # Without the image's runtime (a caller that has none), only the class's floor applies.
    assert gpu_facts.check_class(SPEC, _gpus("570.195.03"), "gpu3090-a", None, None) == []


def test_a_class_floor_above_the_images_wins_and_one_below_it_does_not() -> None:
    strict = gpu_facts.GpuClassSpec(**{**SPEC.__dict__, "min_driver": "590.44.01"})
    assert gpu_facts.check_class(strict, _gpus("580.95.05"), "h", None, "13.0") == [
        "driver 580.95.05 on h is older than the class minimum 590.44.01"
    ]
    assert cuda_driver.driver_floor("13.0", "570.86").version == "580"
    assert cuda_driver.driver_floor("12.8", "570.86").version == "570.86"
    assert cuda_driver.driver_floor(None, "570.86").version == "570.86"


def test_a_cuda_release_the_table_does_not_know_is_an_error_naming_the_table() -> None:
    with pytest.raises(cuda_driver.CudaDriverError, match=r"CUDA runtime 14.0 is newer than the driver table"):
        cuda_driver.driver_floor("14.0", "570.86")


def test_versions_compare_as_numbers_padded_to_three_parts() -> None:
    assert cuda_driver.older("575.57.08", "580")
    assert not cuda_driver.older("580", "580.0.0")
    assert cuda_driver.older("580.9", "580.65.06")  # 9 < 65: numbers, not strings
    assert cuda_driver.version_key("570.195.03") == (570, 195, 3)
    with pytest.raises(cuda_driver.CudaDriverError, match="not dotted numbers"):
        cuda_driver.older("R580", "580")
