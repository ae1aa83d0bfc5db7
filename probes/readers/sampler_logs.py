"""The samplers' logs read back (probes/readers/samplers.py writes them): each line's two stamps and its text, and
the tools' own formats parsed (vmstat, iostat -x, pidstat -u -t, nvidia-smi's CSV), with the judgements made on
them that need the tool's facts (the clock-event reason bits, a PCIe link under load).

Kept apart from the samplers themselves: the timeline, the evidence readers and the tests read logs; only the
sidecar and a capture's window write them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# REFERENCE §7: the fields sampled every 200 ms on GPU hosts (the seeds' set), then the PCIe link as it is
# negotiated now and at most (links drop at idle: seed 000 §12 reads them under load), and the clock-event
# (throttle) reasons, a bit mask (CLOCK_EVENT_REASONS).
NVIDIA_SMI_FIELDS = (
    "timestamp",
    "index",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "power.draw",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "pcie.link.gen.gpucurrent",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.active",
)
# The bits of clocks_event_reasons.active (NVML's nvmlClocksEventReason*).
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# A GPU counts as busy, for judging its PCIe link, at this utilization.gpu or more: out of its idle state, where
# links train down (Gen 1 at idle). Not 50: a PP=3 stage in decode runs kernels for about a third of each 200 ms
# sample and its link is up, so a threshold of half would leave every stage of the 3090 class unjudged.
BUSY_UTILIZATION_PCT = 20.0


@dataclass(frozen=True)
class Line:
    mono_s: float
    wall: str
    text: str


def read_log(path: Path, include_rotated: bool = True) -> list[Line]:
    """The stamped lines of a sampler log (and, unless told not to, its rotated predecessor, first)."""
    out: list[Line] = []
    for p in (path.with_name(path.name + ".1"), path) if include_rotated else (path,):
        if not p.exists():
            continue
        for raw in p.read_text(encoding="utf-8", errors="replace").splitlines():
            mono, wall, text = [*raw.split("\t", 2), "", ""][:3]
            try:
                out.append(Line(float(mono), wall, text))
            except ValueError:
                continue
    return out


Series = dict[str, list[tuple[float, float]]]  # label -> [(mono_s, value)]


@dataclass
class Parsed:
    series: Series = field(default_factory=dict)

    def add(self, label: str, t: float, value: float) -> None:
        self.series.setdefault(label, []).append((t, value))


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def parse_vmstat(lines: Sequence[Line]) -> Series:
    """vmstat -n: the header row names columns; the first data row is the average since boot, dropped."""
    out, cols, first = Parsed(), list[str](), True
    for ln in lines:
        words = ln.text.split()
        if not words or words[0].startswith("procs"):
            continue
        if words[0] == "r":
            cols = words
            continue
        if not cols or len(words) != len(cols):
            continue
        if first:
            first = False
            continue
        for c, w in zip(cols, words, strict=True):
            v = _num(w)
            if v is not None:
                out.add(c, ln.mono_s, v)
    return out.series


def parse_iostat(lines: Sequence[Line]) -> dict[str, Series]:
    """iostat -x -d -y: {device: {column: series}}."""
    out: dict[str, Parsed] = {}
    cols: list[str] = []
    for ln in lines:
        words = ln.text.split()
        if not words:
            continue
        if words[0] in ("Device", "Device:"):
            cols = words
            continue
        if not cols or len(words) != len(cols):
            continue
        dev = words[0]
        for c, w in zip(cols[1:], words[1:], strict=True):
            v = _num(w)
            if v is not None:
                out.setdefault(dev, Parsed()).add(c, ln.mono_s, v)
    return {d: p.series for d, p in out.items()}


@dataclass(frozen=True)
class PidstatRow:
    mono_s: float
    tgid: int
    tid: int | None  # None on the process row
    command: str
    values: dict[str, float]


def parse_pidstat(lines: Sequence[Line]) -> list[PidstatRow]:
    """pidstat -h -u -t: one row per process (TID '-') and per thread (TGID '-', command '|__name')."""
    rows: list[PidstatRow] = []
    cols: list[str] = []
    tgid = 0
    for ln in lines:
        text = ln.text
        if text.startswith("#"):
            cols = text.lstrip("#").split()
            continue
        words = text.split()
        if not cols or len(words) != len(cols) or "TGID" not in cols:
            continue
        rec = dict(zip(cols, words, strict=True))
        tid: int | None
        if rec["TGID"] != "-":
            tgid, tid = int(rec["TGID"]), None
        else:
            tid = int(rec["TID"])
        values = {c: v for c, w in rec.items() if c.startswith("%") and (v := _num(w)) is not None}
        rows.append(PidstatRow(ln.mono_s, tgid, tid, rec.get("Command", "").removeprefix("|__"), values))
    return rows


@dataclass(frozen=True)
class GpuSample:
    mono_s: float
    index: int
    values: dict[str, float]


def _hex(s: str) -> float | None:
    try:
        return float(int(s, 16))
    except ValueError:
        return None


def parse_nvidia_smi(lines: Sequence[Line], fields: Sequence[str] = NVIDIA_SMI_FIELDS) -> list[GpuSample]:
    """nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits; '[N/A]' fields are left out. A log of the
    seeds' nine fields (before the PCIe and clock-event fields were sampled) reads with its own field list."""
    out = []
    for ln in lines:
        parts = [p.strip() for p in ln.text.split(",")]
        names = fields if len(parts) == len(fields) else NVIDIA_SMI_FIELDS[:9] if len(parts) == 9 else None
        if names is None:
            continue
        rec = dict(zip(names, parts, strict=True))
        idx = _num(rec["index"])
        if idx is None:
            continue
        vals: dict[str, float] = {}
        for k, w in rec.items():
            if k in ("timestamp", "index"):
                continue
            v = _hex(w) if k == "clocks_event_reasons.active" else _num(w)
            if v is not None:
                vals[k] = v
        out.append(GpuSample(ln.mono_s, int(idx), vals))
    return out


def clock_event_names(mask: float) -> list[str]:
    """The reasons set in a clocks_event_reasons.active mask."""
    m = int(mask)
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if m & bit] + (
        [f"0x{m & ~sum(CLOCK_EVENT_REASONS):x}"] if m & ~sum(CLOCK_EVENT_REASONS) else []
    )


@dataclass(frozen=True)
class LinkJudgement:
    gpu: int
    busy_samples: int
    below_samples: int
    worst_gen: int | None
    worst_width: int | None
    line: str | None  # the flag, when the link ran below the class's generation or width while busy


def judge_pcie_links(
    samples: Sequence[GpuSample], min_gen: int, min_width: int, busy_pct: float = BUSY_UTILIZATION_PCT
) -> list[LinkJudgement]:
    """Per GPU, its PCIe link while busy (utilization.gpu >= busy_pct) against the class's generation and width.

    Links drop to a low generation at idle to save power, so only busy samples count (seed 000 §12: read the
    link negotiated under load). A GPU never busy in the window is judged on nothing, and says so.
    """
    out: list[LinkJudgement] = []
    for gpu in sorted({s.index for s in samples}):
        busy = [s for s in samples if s.index == gpu and s.values.get("utilization.gpu", 0.0) >= busy_pct]
        below = [
            s
            for s in busy
            if s.values.get("pcie.link.gen.gpucurrent", min_gen) < min_gen
            or s.values.get("pcie.link.width.current", min_width) < min_width
        ]
        gens = [int(s.values["pcie.link.gen.gpucurrent"]) for s in below if "pcie.link.gen.gpucurrent" in s.values]
        widths = [int(s.values["pcie.link.width.current"]) for s in below if "pcie.link.width.current" in s.values]
        worst_gen, worst_width = (min(gens) if gens else None), (min(widths) if widths else None)
        line = None
        if below:
            line = (
                f"GPU {gpu}: PCIe link at Gen {worst_gen if worst_gen is not None else '?'} "
                f"x{worst_width if worst_width is not None else '?'} in {len(below)} of {len(busy)} busy samples "
                f"(utilization >= {busy_pct:g}%), below the class's Gen {min_gen} x{min_width}: check the slot, "
                "riser and BIOS link settings (lspci -vv LnkSta under load)"
            )
        out.append(LinkJudgement(gpu, len(busy), len(below), worst_gen, worst_width, line))
    return out
