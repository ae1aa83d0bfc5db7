"""timeline.json as the evidence report reads it: the checks, and the window and series both renderings draw.

`validate_timeline` turns a timeline this report cannot draw into one line naming what is wrong
(ReportInputError), before anything is written. The readers below it (`read_window`, `panel_series`, `as_text`)
are lenient on purpose: the renderings also take a timeline nobody checked, and draw what they can of it
rather than raise. The page (serving/evidence/capture_report.py) and the summary text (probes/capture/summary.py)
both read the timeline through them, so the two never disagree on what a series or the window is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
# timeline.json always has these panels, drawn in this order; then those of OPTIONAL_PANEL_KEYS it has (a
# capture made before the KV-cache panel existed has none of them, and still draws).
PANEL_KEYS = ("gpu", "cpu", "io", "latency", "queue")
OPTIONAL_PANEL_KEYS = ("cache", "requests")
STATUSES = ("successful", "skipped", "failed")


class ReportInputError(ValueError):
    """timeline.json is missing, unreadable, or not the schema this module draws."""


# --- input ---------------------------------------------------------------------------------------------------


def is_number(x: object) -> bool:
    """x is a JSON number (a bool is not one, though Python counts it as an int)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def finite(x: object) -> float | None:
    """x as a float if it is a finite JSON number, else None."""
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def _check_series(key: str, series: object) -> None:
    if not isinstance(series, dict):
        raise ReportInputError(f"panels.{key}.series must be an object of name -> [[t_s, value], ...]")
    for name, points in series.items():
        if not isinstance(points, list):
            raise ReportInputError(f"panels.{key}.series[{name!r}] must be a list of [t_s, value] pairs")
        for i, p in enumerate(points):
            ok = isinstance(p, list) and len(p) == 2 and finite(p[0]) is not None and (p[1] is None or is_number(p[1]))
            if not ok:
                raise ReportInputError(f"panels.{key}.series[{name!r}][{i}] is {p!r}, not a [t_s, value] pair")


def _check_spans(spans: object) -> None:
    """The requests panel's spans: objects with a lane, a start and an end (seconds since the window start; a
    request that never ended has a null end), a first token or null, and whether it succeeded."""
    if not isinstance(spans, list):
        raise ReportInputError("panels.requests.spans must be a list of request spans")
    for i, s in enumerate(spans):
        ok = (
            isinstance(s, dict)
            and isinstance(s.get("lane"), int)
            and finite(s.get("start_s")) is not None
            and all(s.get(k) is None or finite(s.get(k)) is not None for k in ("first_token_s", "end_s"))
            and isinstance(s.get("ok"), bool)
        )
        if not ok:
            raise ReportInputError(
                f"panels.requests.spans[{i}] is {s!r}: expected lane, start_s, first_token_s, end_s and ok"
            )


def validate_timeline(timeline: object) -> dict[str, Any]:
    """`timeline` if it is a schema 1 timeline this module can draw; ReportInputError naming what is wrong."""
    if not isinstance(timeline, dict):
        raise ReportInputError(f"timeline must be a JSON object, not {type(timeline).__name__}")
    version = timeline.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportInputError(f"schema_version is {version!r}; this report reads schema_version {SCHEMA_VERSION}")
    window = timeline.get("window")
    if not isinstance(window, dict):
        raise ReportInputError("missing key 'window' (an object with start_wall, end_wall, seconds)")
    seconds = finite(window.get("seconds"))
    if seconds is None or seconds <= 0:
        raise ReportInputError(f"window.seconds is {window.get('seconds')!r}; expected a positive number")
    panels = timeline.get("panels")
    if not isinstance(panels, dict):
        raise ReportInputError(f"missing key 'panels' (an object with {', '.join(PANEL_KEYS)})")
    for key in PANEL_KEYS:
        if key not in panels:
            raise ReportInputError(f"missing panel 'panels.{key}' (timeline.json must have {', '.join(PANEL_KEYS)})")
        panel = panels[key]
        if not isinstance(panel, dict):
            raise ReportInputError(f"panels.{key} must be an object")
        if panel.get("status") not in STATUSES:
            raise ReportInputError(f"panels.{key}.status is {panel.get('status')!r}; expected one of {STATUSES}")
        _check_series(key, panel.get("series", {}))
    for key in OPTIONAL_PANEL_KEYS:
        if key in panels:
            if not isinstance(panels[key], dict) or panels[key].get("status") not in STATUSES:
                raise ReportInputError(f"panels.{key} must be an object with a status of {STATUSES}")
            _check_series(key, panels[key].get("series", {}))
    if "requests" in panels:
        _check_spans(panels["requests"].get("spans", []))
    known = PANEL_KEYS + OPTIONAL_PANEL_KEYS
    unknown = [k for k in panels if k not in known]
    if unknown:
        raise ReportInputError(f"unknown panel {unknown[0]!r} (schema 1 has {', '.join(known)})")
    for name in ("events", "notes"):
        if not isinstance(timeline.get(name, []), list):
            raise ReportInputError(f"{name} must be a list")
    for name in ("summary", "artifacts"):
        if not isinstance(timeline.get(name, {}), dict):
            raise ReportInputError(f"{name} must be an object")
    return timeline


def panel_keys(timeline: Mapping[str, Any]) -> tuple[str, ...]:
    """The panels a timeline has, in the order they are drawn: every one of PANEL_KEYS, then the optional ones
    present."""
    panels = timeline.get("panels")
    present = panels if isinstance(panels, Mapping) else {}
    return PANEL_KEYS + tuple(k for k in OPTIONAL_PANEL_KEYS if k in present)


def load_timeline(path: Path) -> dict[str, Any]:
    """Read and check a bundle's timeline.json (see `validate_timeline`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportInputError(f"{path}: cannot read: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportInputError(f"{path}: not JSON: {e}") from None
    try:
        return validate_timeline(data)
    except ReportInputError as e:
        raise ReportInputError(f"{path}: {e}") from None


# --- what is drawn -------------------------------------------------------------------------------------------


def as_text(x: object, default: str = "?") -> str:
    """A field as text; `default` where it is absent (null), so a missing field reads as missing, not 'None'."""
    return default if x is None else str(x)


def seconds_text(s: object) -> str:
    """A time in seconds for people, '? s' where it is not a number."""
    return f"{s:g} s" if is_number(s) else "? s"


@dataclass(frozen=True)
class Window:
    """The watched window: its wall-clock ends as written, and its length, which scales every panel's x axis."""

    start_wall: str
    end_wall: str
    seconds: float


def read_window(timeline: Mapping[str, Any]) -> Window:
    """The timeline's window; 1 s long where it has no positive length, so an unchecked timeline still draws."""
    w = timeline.get("window") or {}
    seconds = finite(w.get("seconds"))
    if seconds is None or seconds <= 0:
        seconds = 1.0  # unvalidated input: still draw something, the axis says 0..1
    return Window(as_text(w.get("start_wall")), as_text(w.get("end_wall")), seconds)


@dataclass(frozen=True)
class Series:
    """One series as drawn: runs of points inside the window (a null value breaks the line)."""

    name: str
    segments: tuple[tuple[tuple[float, float], ...], ...]
    outside: int  # samples before 0 or after the window's end, not drawn

    @property
    def values(self) -> list[float]:
        return [v for seg in self.segments for _, v in seg]


def _series(name: str, raw: object, seconds: float) -> Series:
    segments: list[tuple[tuple[float, float], ...]] = []
    run: list[tuple[float, float]] = []
    outside = 0
    for p in raw if isinstance(raw, list) else []:
        t, v = (finite(p[0]), finite(p[1])) if isinstance(p, list | tuple) and len(p) == 2 else (None, None)
        if t is None:
            continue
        if not 0 <= t <= seconds:
            outside += 1
            continue
        if v is not None:
            run.append((t, v))
        elif run:
            segments.append(tuple(run))
            run = []
    if run:
        segments.append(tuple(run))
    return Series(name, tuple(segments), outside)


def panel_series(panel: Mapping[str, Any], seconds: float) -> list[Series]:
    """A panel's series as drawn, in timeline.json's order (the order their colours are given in)."""
    raw = panel.get("series") or {}
    return [_series(str(name), points, seconds) for name, points in raw.items()] if isinstance(raw, dict) else []
