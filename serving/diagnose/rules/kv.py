"""KV-cache pressure (seed 000 §10: "insufficient KV can increase waiting and preemption. Alongside instantaneous
utilization, inspect measurement-period preemption deltas, newly computed prompt tokens").

Consistent with KV pressure where the window counted preemptions (vllm:num_preemptions_total rose), or the cache
was at least KV_FULL used; the preempted share of the requests is what it explains (a preempted request computes
its prompt again).
"""

from __future__ import annotations

from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out

SEED = "000 §10"
KV_FULL = 0.9  # vllm:kv_cache_usage_perc is a fraction


def run(ev: Evidence) -> list[Finding]:
    pre, usage = ev.server.get("preemptions"), ev.gauges.get("kv_usage")
    if pre is None and usage is None:
        raise CannotRun("no preemption counter and no KV usage samples in the window")
    n = float(pre.value) if pre else 0.0
    top = max(usage.value) if usage and usage.value else None
    finished = ev.server.get("requests_finished")
    done = float(finished.value) if finished and finished.value else None
    prompts = ev.server.get("prompt_tokens")
    figures = [fig("preemptions in the window", pre), fig("KV cache used, most", usage, "fraction", value=top),
               fig("requests finished", finished), fig("prompt tokens computed", prompts)]  # fmt: skip
    if n > 0 or (top is not None and top >= KV_FULL):
        said = f"{n:.0f} preemptions" + (f" for {done:.0f} requests finished" if done else "")
        said += f"; the KV cache at most {top:.0%} used" if top is not None else ""
        return [Finding(
            rule="kv", seed=SEED, verdict="consistent with",
            title="KV-cache pressure: requests were preempted and their prompts computed again",
            symptom=said, explains=round(min(1.0, n / done) if done else (1.0 if n else 0.5), 3), figures=figures,
            not_established="whether more KV or fewer concurrent sequences is the better trade: both change "
            "throughput and TTFT",
            next_steps=["make hypothesis HYPOTHESIS='KV pressure preempts requests' PREDICT='e2el_ms down >= 10%'",
                        "make bench with a larger KV cache (or lower max_num_seqs), then "
                        "make compare VARIABLE=<that field>"],
        )]  # fmt: skip
    return [ruled_out(
        rule="kv", seed=SEED,
        title="no KV-cache pressure: nothing preempted, the cache far from full",
        symptom=f"0 preemptions; the KV cache at most {top:.1%} used" if top is not None else "0 preemptions",
        figures=figures, not_established="KV at a higher load or longer context"
    )]  # fmt: skip


RULE = Rule("kv", SEED, run)
