"""Parsers of /proc files that both packages read: the probes on a host, serving in the manifest and the plan.

/proc/<pid>/limits is the one parser of its format here (probes/hoststate.py and serving/limits.py use it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcLimit:
    soft: int | None  # None: unlimited
    hard: int | None
    units: str | None  # None where the kernel prints none (nice and realtime priority)


def parse_limits(text: str) -> dict[str, ProcLimit]:
    """/proc/<pid>/limits: fixed-width columns under a header; the row name runs to the 'Soft Limit' column."""
    lines = text.splitlines()
    if not lines or "Soft Limit" not in lines[0]:
        raise ValueError("no 'Limit  Soft Limit  Hard Limit  Units' header")
    soft_col = lines[0].index("Soft Limit")

    def num(v: str) -> int | None:
        return None if v == "unlimited" else int(v)

    out: dict[str, ProcLimit] = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        name, values = line[:soft_col].strip(), line[soft_col:].split()
        if not name or len(values) not in (2, 3):
            raise ValueError(f"unexpected limits row {line!r}")
        out[name] = ProcLimit(num(values[0]), num(values[1]), values[2] if len(values) == 3 else None)
    return out
