"""The rules `make diagnose` applies, one module each, in seed 000 §14's order: which interval is slow (§14.1), whether
client and server agree (§14.2), then what the host was doing in the same seconds (§14.3: load, cgroup limits, CPU
execution against waiting, contention, KV, memory placement, the page cache, the GPU side), and last the conditions
that void the figures. Each module states its thresholds beside them and where they come from.

A rule is a function of the evidence (serving/diagnose/evidence.py) to findings (serving/diagnose/model.py). It
raises CannotRun with what is missing where the evidence cannot decide, and the diagnosis lists it so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from serving.diagnose.evidence import Evidence, Src
from serving.diagnose.model import Figure, Finding


class CannotRun(Exception):
    """The evidence lacks what the rule reads: the message says what, in the run's terms."""


@dataclass(frozen=True)
class Rule:
    name: str
    seed: str
    run: Callable[[Evidence], list[Finding]]


def fig(name: str, src: Src | None, unit: str = "", value: object = None) -> Figure:
    """A figure from an evidence value (or `value` read from it), rounded for reading, citing its artifact."""
    v = (src.value if src is not None else None) if value is None else value
    if isinstance(v, float):
        v = round(v, 3)
    return Figure(name=name, value=v if isinstance(v, bool | int | float | str) or v is None else str(v), unit=unit,
                  artifact=src.artifact if src is not None else "-")  # fmt: skip


def ruled_out(rule: str, seed: str, title: str, symptom: str, figures: list[Figure], not_established: str) -> Finding:
    """What the evidence rules out: it accounts for none of a request's time and has no next step."""
    return Finding(rule=rule, seed=seed, verdict="rules out", title=title, symptom=symptom, explains=0.0,
                   figures=figures, not_established=not_established, next_steps=[])  # fmt: skip


def ordered() -> list[Rule]:
    """Every rule, in the seed's order."""
    from serving.diagnose.rules import (
        cgroup,
        contention,
        disagreement,
        gpu,
        interval,
        kv,
        numa,
        overload,
        page_cache,
        pp_order,
        scaling,
        threads,
        voiding,
    )

    return [m.RULE for m in (interval, disagreement, overload, scaling, cgroup, threads, pp_order, contention, kv,
                             numa, page_cache, gpu, voiding)]  # fmt: skip


def thresholds_table() -> str:
    """Every rule, its seed section, and the thresholds its module states (its upper-case numbers), as the
    Markdown table docs/diagnose.md carries (python -m serving.diagnose.rules.table)."""
    import sys

    lines = ["| rule | seed | thresholds |", "|---|---|---|"]
    for rule in ordered():
        module = sys.modules[rule.run.__module__]
        consts = [f"`{k}` {v:g}" for k, v in vars(module).items()
                  if k.isupper() and isinstance(v, int | float) and not isinstance(v, bool)]  # fmt: skip
        lines.append(f"| `{rule.name}` | {rule.seed} | {', '.join(consts) or '-'} |")
    return "\n".join(lines) + "\n"
