"""nvml.log read back (probes/readers/nvml.py writes it): its samples as sampler_logs.GpuSample, its XID events and
first errors; a cumulative counter (the energy) between two times; and what a window's log flags (XID events, PCIe
replay-counter rises). Also which GPU sampler log a samplers directory holds, NVML's or nvidia-smi's."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.readers.nvml import LOG_FIELDS, LOG_NAME, SOURCE_NVML, SOURCE_REPLAYED
from probes.readers.sampler_logs import GpuSample, Line, parse_nvidia_smi, read_log

# A counter reading is interpolated between two samples at most this far apart; wider, it is not read.
MAX_COUNTER_GAP_S = 1.0


@dataclass(frozen=True)
class XidEvent:
    mono_s: float
    gpu: int | None
    xid: int


@dataclass
class NvmlLog:
    samples: list[GpuSample] = field(default_factory=list)
    xids: list[XidEvent] = field(default_factory=list)
    errors: list[tuple[float, str, str, str]] = field(default_factory=list)  # (mono_s, gpu, call, error)
    replayed: bool = False  # a line came from the replay seam


def _int(s: str) -> int | None:
    try:
        return int(s, 0)
    except ValueError:
        return None


# nvml.log's columns, as the nvidia-smi fields sampler_logs.GpuSample carries (and its units), or NVML's own.
_AS_NVIDIA_SMI: dict[str, tuple[str, int]] = {
    "memory.used_bytes": ("memory.used", 2**20),  # MiB, as nvidia-smi's memory.used
    "power_mw": ("power.draw", 1000),  # W, as nvidia-smi's power.draw
}


def parse_nvml(lines: Sequence[Line]) -> NvmlLog:
    """nvml.log's samples (in sampler_logs.GpuSample's fields and nvidia-smi's units, plus pcie.tx_kb_s, pcie.rx_kb_s,
    pcie.replay_counter and energy_mj in NVML's), XID events and first errors."""
    out = NvmlLog()
    for ln in lines:
        parts = ln.text.split(",")
        if len(parts) < 3 or parts[0] not in (SOURCE_NVML, SOURCE_REPLAYED):
            continue
        out.replayed |= parts[0] == SOURCE_REPLAYED
        gpu = _int(parts[1])
        if parts[2] == "xid" and len(parts) == 4 and (xid := _int(parts[3])) is not None:
            out.xids.append(XidEvent(ln.mono_s, gpu, xid))
        elif parts[2] == "error" and len(parts) == 5:
            out.errors.append((ln.mono_s, parts[1], parts[3], parts[4]))
        elif len(parts) == len(LOG_FIELDS) and gpu is not None:
            values: dict[str, float] = {}
            for name, text in zip(LOG_FIELDS[2:], parts[2:], strict=True):
                v = _int(text)
                if v is not None:
                    key, per_unit = _AS_NVIDIA_SMI.get(name, (name, 1))
                    values[key] = v / per_unit
            out.samples.append(GpuSample(ln.mono_s, gpu, values))
    return out


def gpu_log(sdir: Path) -> Path | None:
    """The GPU sampler's log in a samplers directory: nvml.log, else nvidia-smi.log (the fallback), else None."""
    for name in (LOG_NAME, "nvidia-smi.log"):
        if (sdir / name).exists() or (sdir / f"{name}.1").exists():
            return sdir / name
    return None


def read_gpu_samples(log: Path, include_rotated: bool = True) -> list[GpuSample]:
    """The samples of a GPU sampler log, whichever sampler wrote it."""
    lines = read_log(log, include_rotated)
    return parse_nvml(lines).samples if log.name == LOG_NAME else parse_nvidia_smi(lines)


def counter_at(points: Sequence[tuple[float, float]], t: float) -> float | None:
    """A cumulative counter's value at `t`, interpolated linearly between the samples either side of it (sorted
    (mono_s, value)); None where no sample lies within MAX_COUNTER_GAP_S on both sides, or it went backwards
    there (the energy counter restarts when the driver is reloaded)."""
    for (ta, va), (tb, vb) in itertools.pairwise(points):
        if ta <= t <= tb:
            if tb - ta > MAX_COUNTER_GAP_S or vb < va:
                return None
            return va if tb == ta else va + (vb - va) * (t - ta) / (tb - ta)
    return points[0][1] if len(points) == 1 and points[0][0] == t else None


def counter_series(samples: Sequence[GpuSample], key: str) -> dict[int, list[tuple[float, float]]]:
    """Per GPU, the (mono_s, value) points of one counter field, in time order."""
    out: dict[int, list[tuple[float, float]]] = {}
    for s in samples:
        if key in s.values:
            out.setdefault(s.index, []).append((s.mono_s, s.values[key]))
    return {g: sorted(p) for g, p in out.items()}


def energy_j(by_gpu: Mapping[int, Sequence[tuple[float, float]]], t_a: float, t_b: float) -> tuple[float | None, str]:
    """The energy every GPU used between t_a and t_b (J, summed over GPUs) from the energy_mj counter, or None and
    why. A counter that went backwards inside the span is a restart: the span is not read."""
    if not by_gpu:
        return None, "no energy counter in the log (NVML's nvmlDeviceGetTotalEnergyConsumption: Volta or newer)"
    total = 0.0
    for gpu, points in sorted(by_gpu.items()):
        a, b = counter_at(points, t_a), counter_at(points, t_b)
        inside = [v for t, v in points if t_a <= t <= t_b]
        if a is None or b is None or any(y < x for x, y in itertools.pairwise(inside)) or b < a:
            why = f"no energy reading within {MAX_COUNTER_GAP_S:g} s of both ends, or the counter restarted"
            return None, f"GPU {gpu}: {why}"
        total += (b - a) / 1000.0  # mJ -> J
    return total, ""


# --- what a window's NVML log flags ------------------------------------------------------------------------------

# What an Xid means, from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/): the few an inference host meets
# most; any other is named by number. NVML reports 999 for an Xid it does not know (nvmlEventData_t).
XID_MEANINGS = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    999: "an Xid NVML does not know",
}
REPLAYED_NOTE = " [REPLAYED NVML values, not this host's GPU]"


def judge_health(log: NvmlLog, t0: float, t1: float) -> dict[str, Any]:
    """A window's XID events and PCIe replay-counter rises, each a flag and a timeline event (t_s from t0). Only what
    falls in [t0 - 1, t1 + 1] counts, as the panels draw it."""
    tag = REPLAYED_NOTE if log.replayed else ""
    flags: list[str] = []
    events: list[dict[str, Any]] = []
    xids = [x for x in log.xids if t0 - 1.0 <= x.mono_s <= t1 + 1.0]
    for x in xids:
        gpu = "?" if x.gpu is None else x.gpu
        meaning = XID_MEANINGS.get(x.xid, "see NVIDIA's Xid catalog")
        t = x.mono_s - t0
        events.append({"t_s": round(t, 3), "label": f"Xid {x.xid} on GPU {gpu}{' (replayed)' if tag else ''}"})
        flags.append(
            f"FLAG GPU {gpu}: Xid {x.xid} ({meaning}) at {t:.1f} s{tag}: the driver reported a critical error; read "
            "the host's kernel log (dmesg | grep -i xid) and NVIDIA's Xid catalog for the action it asks"
        )
    replays: dict[str, dict[str, Any]] = {}
    window = [s for s in log.samples if t0 - 1.0 <= s.mono_s <= t1 + 1.0]
    for gpu, points in sorted(counter_series(window, "pcie.replay_counter").items()):
        rises = [(tb, vb - va) for (_ta, va), (tb, vb) in itertools.pairwise(points) if vb > va]
        increase = int(sum(d for _t, d in rises))
        replays[str(gpu)] = {"first": points[0][1], "last": points[-1][1], "increase": increase}
        if increase:
            t = rises[0][0] - t0
            replays[str(gpu)]["first_rise_s"] = round(t, 3)
            events.append({"t_s": round(t, 3), "label": f"PCIe replays +{increase} on GPU {gpu}"})
            flags.append(
                f"FLAG GPU {gpu}: PCIe replay counter +{increase} in the window ({points[0][1]:g} -> "
                f"{points[-1][1]:g}, first rise at {t:.1f} s){tag}: the link resent packets that failed its checks; "
                "a count that keeps rising under load points at the slot, riser or cable (lspci -vv AER status, dmesg)"
            )
    return {
        "judged": True,
        "replayed": log.replayed,
        "xids": [{"t_s": round(x.mono_s - t0, 3), "gpu": x.gpu, "xid": x.xid} for x in xids],
        "pcie_replays": replays,
        "errors": [{"gpu": g, "call": c, "error": e} for _m, g, c, e in log.errors],
        "flags": flags,
        "events": events,
    }
