"""Render how a probe runs on a host: the `docker run` argv of the probe image.

The probe container sees the data directories read-only at their host paths
(so the probe's own checks, "inside a data directory" and "not a block device",
apply to the real paths) and one writable output directory, and nothing else:
no network, no other mounts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from serving.errors import InputError


class ProbePlanError(InputError):
    pass


@dataclass(frozen=True)
class IoThresholds:
    min_iops: float | None = None
    max_p999_ms: float | None = None
    max_ms: float | None = None


def _depth_flags(flag: str, values: dict[int, float | None]) -> list[str]:
    return [f"{flag}={depth}:{value:g}" for depth, value in sorted(values.items()) if value is not None]


def render_probe_io_argv(
    probes_image: str,
    target: str,
    data_dirs: list[str],
    host_out_dir: str,
    runtime_s: int,
    depths: list[int],
    thresholds: dict[int, IoThresholds],
    container_name: str = "refdeploy-probe-io",
) -> list[str]:
    if not data_dirs:
        raise ProbePlanError("probes_io_data_dirs is empty: name the directories the serving stack reads")
    for path in (target, *data_dirs, host_out_dir):
        if not PurePosixPath(path).is_absolute():
            raise ProbePlanError(f"{path}: probe paths must be absolute host paths")
    if not any(PurePosixPath(target).is_relative_to(d) for d in data_dirs):
        raise ProbePlanError(
            f"target {target} is outside the data directories ({', '.join(data_dirs)}): the probe reads only "
            "what the serving stack reads; set probes_io_data_dirs or choose another probes_io_target"
        )
    if not depths or any(d < 1 for d in depths):
        raise ProbePlanError(f"probes_io_depths must be positive queue depths, got {depths}")
    unknown = sorted(set(thresholds) - set(depths))
    if unknown:
        raise ProbePlanError(f"probes_io_thresholds names depths {unknown} that are not probed ({depths})")
    argv = ["docker", "run", "--rm", "--name", container_name, "--network", "none", "--read-only",
            "--tmpfs", "/tmp", "--volume", f"{host_out_dir}:/out"]  # fmt: skip
    for d in data_dirs:
        argv += ["--volume", f"{d}:{d}:ro"]
    argv += [probes_image, "python3", "-m", "probes.io", "--target", target, "--out", "/out/probe-io",
             "--runtime", str(runtime_s)]  # fmt: skip
    for d in data_dirs:
        argv += ["--data-dir", d]
    for depth in depths:
        argv += ["--depth", str(depth)]
    argv += _depth_flags("--min-iops", {k: v.min_iops for k, v in thresholds.items()})
    argv += _depth_flags("--max-p999-ms", {k: v.max_p999_ms for k, v in thresholds.items()})
    argv += _depth_flags("--max-ms", {k: v.max_ms for k, v in thresholds.items()})
    return argv


def parse_thresholds(data: object) -> dict[int, IoThresholds]:
    """Inventory form {depth: {min_iops, max_p999_ms, max_ms}} -> typed thresholds; bad keys are errors."""
    if data in (None, ""):
        return {}
    if not isinstance(data, dict):
        raise ProbePlanError(f"probes_io_thresholds: expected a mapping of depth to limits, got {data!r}")
    out: dict[int, IoThresholds] = {}
    allowed = set(IoThresholds.__dataclass_fields__)
    for depth, limits in data.items():
        try:
            d = int(depth)
        except (TypeError, ValueError):
            raise ProbePlanError(f"probes_io_thresholds: {depth!r} is not a queue depth") from None
        if not isinstance(limits, dict) or set(limits) - allowed:
            raise ProbePlanError(f"probes_io_thresholds.{depth}: expected keys among {sorted(allowed)}, got {limits!r}")
        out[d] = IoThresholds(**{k: float(v) for k, v in limits.items()})
    return out
