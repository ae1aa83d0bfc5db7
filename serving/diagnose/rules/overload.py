"""Offered load above capacity (seed 000 §4: "if TTFT and queue time are both high, investigate queueing first";
"if waiting requests keep accumulating under load, offered load may exceed capacity"; the client may not reach
its requested rate).

Consistent with overload when requests waited in the engine (vllm:num_requests_waiting above 0 in at least
WAITING_SHARE of the window's samples) and queue time is at least QUEUE_SHARE of the server's TTFT; or when a
bench's client reached under MIN_ACHIEVED_RATE_RATIO (the bench's own flag) of its requested arrival rate. It
explains the queueing share of the requests' time.
"""

from __future__ import annotations

from serving.bench.runs import MIN_ACHIEVED_RATE_RATIO
from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out
from serving.diagnose.rules.interval import shares

SEED = "000 §4"
WAITING_SHARE = 0.25
QUEUE_SHARE = 0.5


def run(ev: Evidence) -> list[Finding]:
    waiting = ev.gauges.get("waiting")
    queue, ttft = ev.server.get("queue_ms"), ev.server.get("ttft_ms")
    if waiting is None and queue is None:
        raise CannotRun("no vllm:num_requests_waiting samples and no queue-time histogram in the window")
    samples = list(waiting.value) if waiting else []
    waited = sum(1 for v in samples if v > 0) / len(samples) if samples else 0.0
    queue_share = float(queue.value) / float(ttft.value) if queue and ttft and ttft.value else 0.0
    achieved = ev.load.get("achieved_over_requested")
    short = achieved is not None and achieved.value is not None and float(achieved.value) < MIN_ACHIEVED_RATE_RATIO
    figures = [
        fig("samples with requests waiting", waiting, "", value=round(waited, 3)),
        fig("most requests waiting", waiting, "requests", value=max(samples) if samples else None),
        fig("server queue time mean", queue, "ms"),
        fig("server TTFT mean", ttft, "ms"),
        fig("requested concurrency", ev.load.get("concurrency")),
    ]
    if ev.max_num_seqs is not None:
        figures.append(fig("max_num_seqs", ev.max_num_seqs))
    if achieved is not None:
        figures.append(fig("achieved over requested arrival rate", achieved))
    by_rate = bool(ev.load.get("request_rate") and ev.load["request_rate"].value)  # else closed-loop clients
    if (waited >= WAITING_SHARE and queue_share >= QUEUE_SHARE) or short:
        try:
            explains = shares(ev)["queueing"]
        except CannotRun:
            explains = queue_share
        said = (
            (
                f"requests waited in {waited:.0%} of the samples (at most {max(samples):.0f}); queue time is "
                f"{queue_share:.0%} of the server's TTFT"
            )
            if samples
            else f"queue time is {queue_share:.0%} of TTFT"
        )
        if short:
            said += f"; the client reached {float(achieved.value):.0%} of its requested rate"  # type: ignore[union-attr]
        return [Finding(
            rule="overload", seed=SEED, verdict="consistent with",
            title="offered load above what the engine serves: requests queue before they are scheduled",
            symptom=said, explains=round(min(1.0, max(explains, 0.0)), 3), figures=figures,
            not_established="why the engine serves no more (its CPU, its KV cache, a limit): the rules below",
            next_steps=[f"make bench SEARCH={'rate' if by_rate else 'concurrency'} (the highest load whose SLOs "
                        "hold), or the same workload at a lower load, then make compare VARIABLE=workload."
                        + ("arrival_rates" if by_rate else "concurrency")],
        )]  # fmt: skip
    return [ruled_out(
        rule="overload", seed=SEED,
        title="no queueing: requests were scheduled as they arrived",
        symptom=f"requests waited in {waited:.0%} of the samples; queue time {queue_share:.0%} of the server's TTFT",
        figures=figures, not_established="capacity at a higher load"
    )]  # fmt: skip


RULE = Rule("overload", SEED, run)
