"""The patched runtime's per-step rank trace (images/vllm/patches/0004-*), cut to a capture's window.

Each worker rank of an engine deployed with the profile's `probes.rank_trace` appends one JSON line per engine step
to <dir>/rank<R>.steps.jsonl (rotated once to .1): its step number, the requests in the batch, and on
CLOCK_MONOTONIC the step's start `t0`, end `t1` and spans. The directory outlives containers (a new engine appends
under another pid), so the capture keeps the lines of the steps that overlap its window, byte for byte, into
BUNDLE/ranks/; serving/evidence/rank_trace.py reads them. Standard library only: this runs in the probe image.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RANKS_DIR = "ranks"
FILE_RE = re.compile(r"^rank(\d+)\.steps\.jsonl(\.1)?$")


def _overlaps(line: str, start: float, end: float) -> bool:
    try:
        row = json.loads(line)
        t0, t1 = float(row["t0"]), float(row["t1"])
    except (ValueError, KeyError, TypeError):
        return False
    return t1 >= start and t0 <= end


def copy_window(src: Path, out: Path, start: float, end: float) -> dict[str, Any]:
    """The lines of `src`'s rank files whose steps overlap [start, end] into out/ranks/rank<R>.steps.jsonl (the
    rotated file's first); what was kept: {"dir", "ranks": {R: steps}, "unreadable": [...]}. A rank with no step in
    the window is left out: the directory outlives engines, and an earlier engine with more ranks (PP=3 before
    PP=2) leaves a file no rank of this one writes."""
    kept: dict[str, int] = {}
    unreadable: list[str] = []
    by_rank: dict[str, list[str]] = {}
    names = sorted(
        (p for p in src.iterdir() if FILE_RE.match(p.name)), key=lambda p: (p.name.endswith(".jsonl"), p.name)
    )
    for path in names:
        rank = FILE_RE.match(path.name).group(1)  # type: ignore[union-attr]
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError as e:
            unreadable.append(f"{path.name}: {e.strerror or e}")
            continue
        by_rank.setdefault(rank, []).extend(ln for ln in lines if _overlaps(ln, start, end))
    by_rank = {rank: lines for rank, lines in by_rank.items() if lines}
    if by_rank:
        (out / RANKS_DIR).mkdir(parents=True, exist_ok=True)
    for rank, lines in sorted(by_rank.items(), key=lambda kv: int(kv[0])):
        (out / RANKS_DIR / f"rank{rank}.steps.jsonl").write_text("".join(f"{ln}\n" for ln in lines))
        kept[rank] = len(lines)
    return {"dir": str(src), "ranks": kept, "unreadable": unreadable}
