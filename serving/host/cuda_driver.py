"""The NVIDIA driver a runtime image needs, from the CUDA runtime it carries (issue 28).

The runtime image's CUDA runtime comes from its pinned dependency set (`nvidia-cuda-runtime==13.0.96` in
images/vllm/constraints/vllm-0.32.0.txt): torch's cu130 wheels load that cudart, not one on the host. A CUDA
runtime runs on a driver of at least its major release's minimum ("minor version compatibility"); an older
driver fails at CUDA's first call inside the engine, after the running container was replaced. So the plan
refuses such a host before any change, naming both versions.

The minimum per CUDA major release is NVIDIA's, kept here and nowhere else:
  NVIDIA CUDA Compatibility guide, "Minor Version Compatibility", Table 1 "CUDA Toolkit 11.x, 12.x, and 13.x
  Driver Version Ranges" (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html):
  CUDA 13.x >= 580, CUDA 12.x >= 525, CUDA 11.x >= 450 (450.80.02 per the note below that table).
A hardware class's `min_driver` can only raise the floor (a class tested on a later driver, say); it never
lowers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from serving.errors import InputError

SOURCE = "NVIDIA CUDA Compatibility guide, Minor Version Compatibility, Table 1"
MIN_DRIVER_BY_CUDA_MAJOR: dict[int, str] = {11: "450.80.02", 12: "525", 13: "580"}

# The CUDA runtime wheel, in the names NVIDIA has published it under: nvidia-cuda-runtime (13.x),
# nvidia-cuda-runtime-cu12 / -cu11 (12.x, 11.x).
_RUNTIME_PIN = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+)\.(\d+)(?:\.[\w.]+)?\s*(?:#.*)?$", re.IGNORECASE)


class CudaDriverError(InputError):
    pass


def cuda_runtime_of(constraints: str) -> str | None:
    """The CUDA runtime a pinned dependency set installs ("13.0"), or None where it has none (the CPU build)."""
    found = {
        f"{m.group(1)}.{m.group(2)}" for line in constraints.splitlines() if (m := _RUNTIME_PIN.match(line.strip()))
    }
    if len(found) > 1:
        raise CudaDriverError(f"the pinned dependency set installs several CUDA runtimes ({', '.join(sorted(found))})")
    return found.pop() if found else None


def version_key(version: str) -> tuple[int, ...]:
    """A dotted driver version as numbers, padded for comparison: 580 -> (580, 0, 0), 570.195.03 -> (570, 195, 3)."""
    parts = version.strip().split(".")
    if not all(p.isdigit() for p in parts):
        raise CudaDriverError(f"driver version {version!r} is not dotted numbers like 580.95.05")
    numbers = tuple(int(p) for p in parts)
    return numbers + (0,) * (3 - len(numbers))


@dataclass(frozen=True)
class DriverFloor:
    version: str  # the oldest driver the host may have
    why: str | None  # what sets it where the image does; None where the class's own minimum does

    def refusal(self, driver: str, host: str) -> str | None:
        """The line refusing a host with `driver`; None where the driver is at or above the floor."""
        if not older(driver, self.version):
            return None
        if self.why is None:
            return f"driver {driver} on {host} is older than the class minimum {self.version}"
        return (
            f"driver {driver} on {host} is older than {self.version}, {self.why}: "
            f"upgrade the host's driver to R{self.version.split('.')[0]} or newer"
        )


def driver_floor(cuda_runtime: str | None, class_min: str) -> DriverFloor:
    """The oldest driver allowed: the image's need, raised by the class's floor where that is later."""
    class_floor = DriverFloor(class_min, None)
    if cuda_runtime is None:
        return class_floor
    major = int(cuda_runtime.split(".")[0])
    if major not in MIN_DRIVER_BY_CUDA_MAJOR:
        raise CudaDriverError(
            f"the image's CUDA runtime {cuda_runtime} is newer than the driver table in serving/host/cuda_driver.py "
            f"({SOURCE}): add its release's minimum driver there"
        )
    need = MIN_DRIVER_BY_CUDA_MAJOR[major]
    image_floor = DriverFloor(need, f"the oldest driver the image's CUDA {cuda_runtime} runtime runs on ({SOURCE})")
    return class_floor if version_key(class_min) > version_key(need) else image_floor


def older(version: str, floor: str) -> bool:
    return version_key(version) < version_key(floor)
