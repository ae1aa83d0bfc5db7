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
    if ev.kind != "bench":
        raise CannotRun("a capture does not record whether the engine was profiled or a stand-in (its bench does)")
    c = ev.conditions
    said = []
    if c["profiler"].value:
        said.append(f"the engine ran under the profiler ({c['profiler'].value})")
    if c["stand_in"].value:
        what = c["stand_in"].value.get("what") if isinstance(c["stand_in"].value, dict) else c["stand_in"].value
        said.append(f"a stand-in engine served: {what}")
    flagged = list(c["flagged_runs"].value)
    if flagged:
        said.append(f"{len(flagged)} flagged measured runs: " + "; ".join(flagged[:3]))
    figures = [fig("profiler", c["profiler"]), fig("stand-in", c["stand_in"], value=bool(c["stand_in"].value)),
               fig("flagged measured runs", c["flagged_runs"], value=len(flagged))]  # fmt: skip
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
        title="nothing voids the figures: no profiler, no stand-in, no flagged run",
        symptom="the bench ran as the deployment serves", figures=figures,
        not_established="-"
    )]  # fmt: skip


RULE = Rule("voiding", SEED, run)
