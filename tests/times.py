"""Where `make test`'s minutes went, kept: each run's phase, lane and module times as one JSON file, and the
comparison with the run kept before it, so that a change that adds minutes shows it (issue 48).

tests/schedule.py writes `times.json` in the run's log directory (.test-logs/<ts>/) and prints `compare()`'s lines
against the previous complete run it finds in the kept directory: REFDEPLOY_TEST_TIMES where set (.ci/run sets a
directory outside the checkout, since CI runs on a fresh clone each time, and the run's file is copied there), else
this checkout's .test-logs/. Only a run that ran every phase is compared against: a run stopped early says nothing
about how long the rest takes.

    python -m tests.times .test-logs/<ts>/times.json [kept-dir]    # print the comparison again
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
FILE = "times.json"
ENV = "REFDEPLOY_TEST_TIMES"
# A phase, lane or module that grew by more than this many seconds and this share is marked in the comparison.
GREW_S, GREW_SHARE = 30.0, 0.10
TOP_MODULES = 15


@dataclass
class Times:
    """One run of `make test` (or `make test-integration`): what the closing lines print, as data."""

    kind: str
    started: str  # UTC, ISO 8601: the run's log directory's name says the same
    git: str
    cpus: int
    complete: bool  # every phase ran, unnarrowed (a stopped, failed-early or PYTEST_ARGS run: never compared against)
    phases: list[dict[str, Any]] = field(default_factory=list)  # {name, seconds, ok}
    lanes: list[dict[str, Any]] = field(default_factory=list)  # {name, phase, seconds, ok}
    modules: dict[str, float] = field(default_factory=dict)  # module: seconds of its tests within its lane
    counts: dict[str, int] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def total_s(self) -> float:
        return float(sum(p["seconds"] for p in self.phases))


def git_rev(repo: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def write(times: Times, path: Path) -> None:
    path.write_text(json.dumps({**asdict(times), "total_s": round(times.total_s, 1)}, indent=1) + "\n")


def load(path: Path) -> Times | None:
    """The kept run at path; None where it is not one (unreadable, another schema)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return None
    data.pop("total_s", None)
    try:
        return Times(**data)
    except TypeError:
        return None


def kept_dir(repo: Path) -> Path:
    env = os.environ.get(ENV, "")
    return Path(env) if env else repo / ".test-logs"


def _candidates(kept: Path) -> list[Path]:
    # Kept copies (REFDEPLOY_TEST_TIMES: <started>.json) and this checkout's runs (.test-logs/<ts>/times.json).
    return [*kept.glob("*.json"), *kept.glob(f"*/{FILE}")] if kept.is_dir() else []


def previous(kept: Path, this: Times) -> tuple[Path, Times] | None:
    """The complete run of the same kind that started last before this one, by its own recorded start."""
    found: list[tuple[str, Path, Times]] = []
    for path in _candidates(kept):
        t = load(path)
        if t is not None and t.complete and t.kind == this.kind and t.started < this.started:
            found.append((t.started, path, t))
    if not found:
        return None
    _started, path, t = max(found, key=lambda f: f[0])
    return path, t


def keep(times: Times, source: Path, kept: Path) -> Path | None:
    """A copy of the run's file in the kept directory (named for its start), unless it lies there already."""
    if source.parent.parent.resolve() == kept.resolve():
        return None  # .test-logs/<ts>/times.json is in the kept directory already
    kept.mkdir(parents=True, exist_ok=True)
    dest = kept / f"{times.started.replace(':', '')}.json"
    shutil.copyfile(source, dest)
    return dest


def _row(label: str, now: float | None, was: float | None) -> str:
    now_s = f"{now:7.0f} s" if now is not None else "      - "
    if was is None:
        return f"  {label:<58} {now_s}   (new)"
    if now is None:
        return f"  {label:<58} {now_s}   (was {was:.0f} s; gone)"
    delta = now - was
    grew = delta > GREW_S and delta > GREW_SHARE * was
    return f"  {label:<58} {now_s}   was {was:5.0f} s  {delta:+6.0f}{'  GREW' if grew else ''}"


def compare(this: Times, before: Times | None, where: str = "") -> list[str]:
    """The lines printed at the end of a run: each phase, lane and top module now and in the run kept before."""
    if before is None:
        return [f"==== times: no complete earlier run of make {this.kind} kept{f' in {where}' if where else ''}"]
    kept = f" in {where}" if where else ""
    lines = [f"==== times beside the run of {before.started} (git {before.git}, {before.cpus} CPUs){kept}"]
    was_phase = {p["name"]: p["seconds"] for p in before.phases}
    for p in this.phases:
        lines.append(_row(f"phase {p['name']}", p["seconds"], was_phase.get(p["name"])))
    lines.append(_row("total", this.total_s, before.total_s))
    was_lane = {lane["name"]: lane["seconds"] for lane in before.lanes}
    for lane in this.lanes:
        lines.append(_row(f"lane {lane['name']}", lane["seconds"], was_lane.get(lane["name"])))
    top = sorted(this.modules.items(), key=lambda kv: -kv[1])[:TOP_MODULES]
    shown = {m for m, _s in top}
    # A module that left the top (or the run) but was in the previous top is shown too: it is where minutes went.
    gone = [m for m, _s in sorted(before.modules.items(), key=lambda kv: -kv[1])[:TOP_MODULES] if m not in shown]
    for module, seconds in top:
        lines.append(_row(module, seconds, before.modules.get(module)))
    for module in gone:
        lines.append(_row(module, this.modules.get(module), before.modules[module]))
    return lines


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m tests.times .test-logs/<ts>/times.json [kept-dir]", file=sys.stderr)
        return 2
    path = Path(argv[0])
    this = load(path)
    if this is None:
        print(f"tests.times: {path} is not a times file of schema {SCHEMA_VERSION}", file=sys.stderr)
        return 2
    kept = Path(argv[1]) if len(argv) == 2 else kept_dir(Path(__file__).resolve().parent.parent)
    found = previous(kept, this)
    print("\n".join(compare(this, found[1] if found else None, str(kept))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
