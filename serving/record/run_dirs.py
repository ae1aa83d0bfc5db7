"""Which run directory an operator means: a path (runs/<host>/<ts>, or its capture/ or bench/), or a bare run id
(<ts>) under runs/. `make compare` resolves its sides with it, `make diagnose` its RUN."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from serving.errors import InputError


def resolve_run_dir(
    ref: str, runs_dir: Path, subdirs: Sequence[str], is_run: Callable[[Path], bool], noun: str, expected: str
) -> Path:
    """The directory `ref` names, for which `is_run` holds: `ref` itself or one of its `subdirs`, else a run id
    under runs_dir/<host>/. A run id under two hosts is refused, naming both, and so is one that resolves outside
    runs_dir (a symlink out, `..`): a run id names a run under runs/, nothing else. `noun` names the kind of run
    ("bench"), `expected` the layout the refusal points to."""
    found = [c for c in (Path(ref), *(Path(ref) / s for s in subdirs)) if is_run(c)]
    if not found and "/" not in ref and ref not in (".", ".."):
        found = [c for s in subdirs for c in sorted(runs_dir.glob(f"*/{ref}/{s}")) if is_run(c)]
        if outside := [c for c in found if not c.resolve().is_relative_to(runs_dir.resolve())]:
            raise InputError(f"{ref}: {outside[0]} resolves outside {runs_dir}: give the {noun} directory's own path")
        if len(found) > 1:
            hosts = ", ".join(str(c.parent) for c in found)
            raise InputError(f"{ref}: a {noun} run of several hosts ({hosts}): give the one meant as its path")
    if not found:
        raise InputError(f"{ref}: not a {noun} run (expected {expected})")
    return found[0]
