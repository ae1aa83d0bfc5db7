"""Conditions that void the figures (seed 000 §6 and §14: "do not report profiled tok/s"; "run the final comparison
without a profiler"): the engine ran under the profiler, a stand-in engine served (a test seam, not vLLM's CUDA
engine), or the bench flagged runs (its report says why each). Such figures can locate a cost; they are not the
deployment's speed. It explains nothing: it says what the other findings may not be read as.
"""

from __future__ import annotations

from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out

SEED = "000 §6, §14"


def run(ev: Evidence) -> list[Finding]:
    c = ev.conditions
    if "profiler" not in c:
        raise CannotRun(
            "this capture's bundle.json does not say whether the engine was profiled or a stand-in "
            "(its engine labels: a capture made before they were recorded)"
        )
    said = []
    if c["profiler"].value:
        said.append(f"the engine ran under the profiler ({c['profiler'].value})")
    if c["stand_in"].value:
        what = c["stand_in"].value.get("what") if isinstance(c["stand_in"].value, dict) else c["stand_in"].value
        said.append(f"a stand-in engine served: {what}")
    flagged = list(c["flagged_runs"].value) if "flagged_runs" in c else []  # a capture has no runs to flag
    if flagged:
        said.append(f"{len(flagged)} flagged measured runs: " + "; ".join(flagged[:3]))
    figures = [fig("profiler", c["profiler"]), fig("stand-in", c["stand_in"], value=bool(c["stand_in"].value))]
    if "flagged_runs" in c:
        figures.append(fig("flagged measured runs", c["flagged_runs"], value=len(flagged)))
    if said:
        return [Finding(
            rule="voiding", seed=SEED, verdict="consistent with",
            title="these figures are not the deployment's speed: " + said[0],
            symptom="; ".join(said), explains=0.0, figures=figures,
            not_established="the speed without them: bench again without the profiler, on the real engine",
            next_steps=["make deploy (without PROFILER), then make bench"],
        )]  # fmt: skip
    return [ruled_out(
        rule="voiding", seed=SEED,
        title="nothing voids the figures: no profiler, no stand-in"
        + (", no flagged run" if "flagged_runs" in c else ""),
        symptom=f"the {ev.kind}'s engine ran as the deployment serves", figures=figures,
        not_established="-"
    )]  # fmt: skip


RULE = Rule("voiding", SEED, run)
