"""Pipeline-parallel receive ordering (seed 000 §8: "non-first PP ranks called irecv_tensor_dict() at the start of
Worker.execute_model. Its recv_object waited for metadata from the preceding stage. Input preparation and attention
metadata construction began only afterward"; "overlapping it with the preceding stage's GPU work could reduce
waiting").

Read from the capture's rank trace (ranks/, the patched runtime's patch 0004, where the profile turns it on): on
each non-first stage, in how many steps the metadata receive ended before preprocess began, how long it waited,
and how long the preparation itself took (preprocess less any receive inside it). Consistent with preparation
serialized behind the receive where the receive came first in at least FIRST_SHARE of the rank's steps and the
preparation is at least PREP_SHARE of its step: that much of each step could overlap the previous stage. Where
the receive already sits inside the preparation (patch 0005 on), the ordering is ruled out. Every finding names the
model runner the rank ran (the trace's own record): vLLM 0.32 runs V2 on CUDA hosts and V1 on the CPU build unless
VLLM_USE_V2_MODEL_RUNNER=1, and a finding on one runner is not a finding on the other.
"""

from __future__ import annotations

from typing import Any

from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out

SEED = "000 §8"
FIRST_SHARE = 0.5
PREP_SHARE = 0.05


def _med(f: dict[str, Any], name: str) -> float | None:
    v = (f["spans_ms"].get(name) or {}).get("median")
    return float(v) if v is not None else None


def run(ev: Evidence) -> list[Finding]:
    if ev.ranks is None:
        raise CannotRun("no rank trace (ranks/: the profile's probes.rank_trace, patch 0004 of the patched runtime)")
    src = ev.ranks
    later = [f for f in src.value if f["pp"] > 0]
    if not later:
        raise CannotRun("one pipeline stage in the rank trace: no rank receives from another")
    out: list[Finding] = []
    for f in later:
        steps, first, inside = f["steps"], f["receive_before_preparation"], f["receive_inside_preparation"]
        prep, step = f["preparation_ms"]["median"], f["step_ms"]["median"]
        wait = _med(f, "recv_metadata")
        name = f"rank {f['rank']} (PP {f['pp']}, model runner {f['runner']})"
        figures = [
            fig(f"{name}: model runner", src, value=f["runner"]),
            fig(f"{name}: steps with a forward pass", src, value=steps),
            fig(f"{name}: steps whose metadata receive ended before preprocess", src, value=first),
            fig(f"{name}: steps whose metadata receive ran inside preprocess", src, value=inside),
            fig(f"{name}: metadata receive, median", src, "ms", value=wait),
            fig(f"{name}: preparation (preprocess less receive), median", src, "ms", value=prep),
            fig(f"{name}: step, median", src, "ms", value=step),
            fig(f"{name}: from the previous stage's send to this forward, median", src, "ms",
                value=(f["handoff_ms"] or {}).get("median")),
        ]  # fmt: skip
        if steps and first / steps >= FIRST_SHARE and prep and step and prep / step >= PREP_SHARE:
            out.append(Finding(
                rule="pp_order", seed=SEED, verdict="consistent with",
                title=f"{name} prepares its inputs only after receiving the previous stage's metadata: "
                f"{prep:.2f} ms of preparation a step ({prep / step:.0%} of it) waits behind a "
                f"{wait or 0:.2f} ms receive",
                symptom=f"the receive came first in {first} of {steps} steps",
                explains=round(min(1.0, prep / step), 3), figures=figures,
                not_established="that overlapping it shortens the steps: the previous stage may be the longer one, "
                "and the saving is at most the preparation. That is the comparison's: the same build with the "
                "receive deferred (REFDEPLOY_PP_DEFER_RECV=1, patch 0005), each side from its own deploy",
                next_steps=[
                    "make hypothesis HYPOTHESIS='preparing before the receive overlaps it with the previous stage' "
                    f"PREDICT='tpot_ms down >= {max(1, int(50 * prep / step))}% at c1'",
                    "docs/experiments/pp-receive.sh run PREDICT=... (validate, A/B/B/A from restarts, the 2x2)",
                ],
            ))  # fmt: skip
        elif steps and inside / steps >= FIRST_SHARE:
            out.append(ruled_out(
                rule="pp_order", seed=SEED,
                title=f"{name} already prepares before it receives: the receive runs inside the preparation "
                "(patch 0005)", symptom=f"inside the preparation in {inside} of {steps} steps", figures=figures,
                not_established="-",
            ))  # fmt: skip
        else:
            out.append(ruled_out(
                rule="pp_order", seed=SEED,
                title=f"{name}: preparation behind the receive is too short to matter "
                f"({prep} ms against a {step} ms step)", symptom=f"the receive came first in {first} of {steps} steps",
                figures=figures, not_established="-",
            ))  # fmt: skip
    return out


RULE = Rule("pp_order", SEED, run)
