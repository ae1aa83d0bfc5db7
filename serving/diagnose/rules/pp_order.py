"""Pipeline-parallel receive ordering (seed 000 §8: "non-first PP ranks called irecv_tensor_dict() at the start of
Worker.execute_model. Its recv_object waited for metadata from the preceding stage. Input preparation and attention
metadata construction began only afterward"; "overlapping it with the preceding stage's GPU work could reduce
waiting").

Read from the capture's rank trace (ranks/, the patched runtime's patch 0004, where the profile turns it on): on
each non-first stage, in how many steps the metadata receive ended before preprocess began, how long it waited,
and how long the preparation itself took (preprocess less any receive inside it). Consistent with preparation
serialized behind a receive that waited where, on a stage, the receive came first in at least FIRST_SHARE of its
steps, the receive's median is at least WAIT_SHARE of its step (it waited for the previous stage: a receive that
finds its metadata already there leaves nothing for the preparation to overlap) and the preparation is at least
PREP_SHARE of its step. What deferring the receive can win on a stage is the overlap, the smaller of the
preparation and the wait; the finding explains those overlaps summed over the stages, over the per-token time (the
last stage's step, which holds the wait for every stage before it). Where the receive already sits inside the
preparation (patch 0005 on), or did not wait, the ordering is ruled out for that stage. Every finding names the
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
# A metadata receive at 5% of the step or more waited for the previous stage (the recorded PP=2 decode on this
# machine: 7.7 ms of a 12.8 ms step); below it the metadata was there already, and a deferred receive wins nothing.
WAIT_SHARE = 0.05


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
    per_token = max(later, key=lambda f: f["pp"])["step_ms"]["median"]
    overlaps: list[tuple[str, float, float, float]] = []  # (stage, preparation, wait, step) where both hold
    all_figures = []
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
        waited = bool(wait and step and wait / step >= WAIT_SHARE)
        if steps and inside / steps >= FIRST_SHARE:
            out.append(ruled_out(
                rule="pp_order", seed=SEED,
                title=f"{name} already prepares before it receives: the receive runs inside the preparation "
                "(patch 0005)", symptom=f"inside the preparation in {inside} of {steps} steps", figures=figures,
                not_established="-",
            ))  # fmt: skip
        elif not (steps and first / steps >= FIRST_SHARE):
            out.append(ruled_out(
                rule="pp_order", seed=SEED, title=f"{name} does not receive before it prepares",
                symptom=f"the receive came first in {first} of {steps} steps", figures=figures, not_established="-",
            ))  # fmt: skip
        elif not waited:
            out.append(ruled_out(
                rule="pp_order", seed=SEED,
                title=f"{name} receives before it prepares, but the receive did not wait: {wait or 0:.2f} ms of a "
                f"{step} ms step (under {WAIT_SHARE:.0%}): the metadata was there, and deferring it wins nothing",
                symptom=f"the receive came first in {first} of {steps} steps", figures=figures,
                not_established="that it never waits: at another load the previous stage may be the longer one",
            ))  # fmt: skip
        elif not (prep and prep / step >= PREP_SHARE):
            out.append(ruled_out(
                rule="pp_order", seed=SEED,
                title=f"{name}: preparation behind the receive is too short to matter "
                f"({prep} ms against a {step} ms step)", symptom=f"the receive came first in {first} of {steps} steps",
                figures=figures, not_established="-",
            ))  # fmt: skip
        else:
            overlaps.append((name, prep, wait or 0.0, step))
            all_figures += figures
    if overlaps:
        won = sum(min(prep, wait) for _, prep, wait, _ in overlaps)
        explains = min(1.0, won / per_token) if per_token else 0.0
        all_figures.append(fig("per-token time (the last stage's step, median)", src, "ms", value=per_token))
        all_figures.append(fig("overlap deferring the receive can win, summed over the stages", src, "ms",
                               value=round(won, 3)))  # fmt: skip
        stages = "; ".join(f"{n}: {p:.2f} ms of preparation behind a {w:.2f} ms receive in a {s:.2f} ms step"
                           for n, p, w, s in overlaps)  # fmt: skip
        out.insert(0, Finding(
            rule="pp_order", seed=SEED, verdict="consistent with",
            title=f"{overlaps[0][0] if len(overlaps) == 1 else f'{len(overlaps)} stages'} prepare"
            f"{'s' if len(overlaps) == 1 else ''} inputs only after a receive that waited for the previous stage: "
            f"up to {won:.2f} ms of a {per_token:.2f} ms token could overlap",
            symptom=stages, explains=round(explains, 3), figures=all_figures,
            not_established="that overlapping it shortens the steps: the previous stage may be the longer one, "
            "and the saving is at most the overlap. That is the comparison's: the same build with the "
            "receive deferred (REFDEPLOY_PP_DEFER_RECV=1, patch 0005), each side from its own deploy",
            next_steps=[
                "make hypothesis HYPOTHESIS='preparing before the receive overlaps it with the previous stage' "
                f"PREDICT='tpot_ms down >= {max(1, int(50 * explains))}% at c1'",
                "docs/experiments/pp-receive.sh run PREDICT=... (validate, A/B/B/A from restarts, the 2x2)",
            ],
        ))  # fmt: skip
    return out


RULE = Rule("pp_order", SEED, run)
