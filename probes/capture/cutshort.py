"""What a capture cut short leaves: an index and a summary of the files it had written, and why it stopped.

A capture's container shares vLLM's PID namespace, so when vLLM dies or is replaced mid-window the kernel kills
the capture with it (exit 137) before it writes bundle.json, summary.txt or the timeline. A capture that ran past
its bound (timeout(1): 124), or broke (4), stops the same way. What it had already written (the samplers' lines,
the /metrics scrapes, the stack dumps, the host state before) is evidence, and is kept: this writes, into the
fetched bundle,

  bundle.json    complete: false, why it stopped, the serving container before and after, each part with the
                 files it left (status "failed": cut short)
  summary.txt    the same, to read

The capture writes capture-started.json when its window opens (the parts asked for, the processes found, the
window's start on both clocks); without it (killed before the window), the parts are named from the directories.

`write` is called on the controller, by the action plugin refdeploy_cutshort once the probe container has exited,
so this module has no command line of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.capture.parts import PART_DIRS

SCHEMA_VERSION = 1
STARTED = "capture-started.json"
EXIT_MEANINGS = {
    137: "the probe container was killed (SIGKILL): vLLM's PID namespace ended, or the container ran out of memory",
    143: "the probe container was stopped (SIGTERM)",
    124: "the capture ran past its bound and was stopped (timeout)",
    4: "the capture broke (an exception in the probe, not a finding)",
}


def why_stopped(exit_code: int) -> str:
    """What the probe container's exit status says about how the capture ended."""
    return EXIT_MEANINGS.get(exit_code, f"the probe container exited {exit_code} before writing its bundle")


def _files(bundle: Path, rel: str, part: str) -> list[str]:
    path = bundle / rel
    if path.is_file():
        return [rel]
    if not path.is_dir():
        return []
    found = sorted(str(p.relative_to(bundle)) for p in path.rglob("*") if p.is_file())
    if part == "perf":
        found = [f for f in found if Path(f).name.startswith("perf-")]
    if part == "stacks":
        found = [f for f in found if not Path(f).name.startswith("record-")]
    if part == "record":
        found = [f for f in found if Path(f).name.startswith("record-")]
    return found


def index(bundle: Path, exit_code: int, why: str, serving: Mapping[str, Any] | None) -> dict[str, Any]:
    """bundle.json of a capture cut short: every requested part failed with the files it left."""
    started: dict[str, Any] = {}
    if (bundle / STARTED).is_file():
        started = json.loads((bundle / STARTED).read_text())
    requested = list(started.get("requested_parts") or [p for p, rels in PART_DIRS.items() if _any(bundle, rels)])
    parts: dict[str, Any] = {}
    for part, rels in PART_DIRS.items():
        if part not in requested:
            parts[part] = {"status": "skipped", "reason": "not part of this capture", "files": []}
            continue
        files = [f for rel in rels for f in _files(bundle, rel, part)]
        parts[part] = {
            "status": "failed",
            "reason": f"cut short: {why}; kept {len(files)} file(s) it had written",
            "files": files,
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": False,
        "cut_short": {"exit_code": exit_code, "why": why, "meaning": why_stopped(exit_code)},
        "serving_change": dict(serving) if serving else None,
        "host": started.get("host"),
        "container": started.get("container"),
        "window": started.get("window"),
        "processes": started.get("processes", []),
        "requested_parts": requested,
        "parts": parts,
    }


def _any(bundle: Path, rels: Sequence[str]) -> bool:
    return any((bundle / r).exists() for r in rels)


def summary(bundle_index: Mapping[str, Any]) -> str:
    cs = bundle_index["cut_short"]
    lines = [f"CAPTURE CUT SHORT (probe container exit {cs['exit_code']}): {cs['why']}", f"  {cs['meaning']}"]
    change = bundle_index.get("serving_change")
    if change and change.get("line") != cs["why"]:
        lines.append(f"  {change['line']}")
    window = bundle_index.get("window") or {}
    if window.get("start_wall"):
        lines.append(f"window opened {window['start_wall']} (monotonic {window['start_mono_s']:.3f} s)")
    lines.append("what the capture had written before it stopped (kept; no deltas, aggregates or timeline):")
    for name in bundle_index["requested_parts"]:
        files = bundle_index["parts"][name]["files"]
        lines.append(f"  {name:<10} {len(files):>4} file(s)" + (f", e.g. {files[0]}" if files else ""))
    return "\n".join(lines) + "\n"


def write(bundle: Path, exit_code: int, why: str, serving: Mapping[str, Any] | None) -> dict[str, Any]:
    """Write bundle.json and summary.txt of a capture cut short; bundle.json a capture did write is kept aside."""
    bundle.mkdir(parents=True, exist_ok=True)
    if (bundle / "bundle.json").is_file():  # the capture finished its index before it was stopped
        (bundle / "bundle.json").rename(bundle / "bundle.capture.json")
    idx = index(bundle, exit_code, why, serving)
    (bundle / "bundle.json").write_text(json.dumps(idx, indent=2) + "\n")
    (bundle / "summary.txt").write_text(summary(idx))
    return idx
