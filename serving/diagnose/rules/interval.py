"""Which interval is slow (seed 000 §1 and §14.1): of a request's time, how much is before its first token (queueing
and prefill) and how much is decode.

With the seed's definitions, e2e = TTFT + (N - 1) x TPOT for N generated tokens. TTFT splits further with the
server's own intervals: queue time (vllm:request_queue_time_seconds) against the server's TTFT. The slow interval is
the largest share; the other rules' findings are ranked by how much of it they can explain (shares()).

Without an SLO the rule judges shares, not speed: the diagnosis says which interval dominates, not that it is too
slow. (The workload's slo, where it has one, is the bench report's goodput; a reference figure is the class's.)
"""

from __future__ import annotations

from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Figure, Finding
from serving.diagnose.rules import CannotRun, Rule, fig

SEED = "000 §1, §14.1"


def shares(ev: Evidence) -> dict[str, float]:
    """{queueing, prefill, decode}: each one's share of a request's time, from the client's medians and the
    server's queue/TTFT means. CannotRun where the client's TTFT, TPOT or the output length is missing."""
    ttft, tpot = ev.client.get("ttft_p50_ms"), ev.client.get("tpot_p50_ms")
    n = ev.client.get("output_len")
    if ttft is None or tpot is None or ttft.value is None or tpot.value is None or n is None or not n.value:
        raise CannotRun(
            "no client TTFT and TPOT: a capture without WORKLOAD sends no requests, and a bench whose measured runs "
            "were all left out (flagged) pools none"
        )
    decode = (int(n.value) - 1) * float(tpot.value)
    total = float(ttft.value) + decode
    if total <= 0:
        raise CannotRun("the requests took no time")
    queue = ev.server.get("queue_ms")
    server_ttft = ev.server.get("ttft_ms")
    queue_share_of_ttft = 0.0
    if queue is not None and server_ttft is not None and server_ttft.value:
        queue_share_of_ttft = min(1.0, float(queue.value) / float(server_ttft.value))
    before = float(ttft.value) / total
    return {
        "queueing": before * queue_share_of_ttft,
        "prefill": before * (1.0 - queue_share_of_ttft),
        "decode": decode / total,
    }


def slow_interval(ev: Evidence) -> tuple[str, float]:
    s = shares(ev)
    name = max(s, key=lambda k: s[k])
    return name, s[name]


def run(ev: Evidence) -> list[Finding]:
    s = shares(ev)
    name, share = slow_interval(ev)
    n = int(ev.client["output_len"].value)
    where = f" at point {ev.client['point'].value}" if "point" in ev.client else ""
    figures = [
        fig("client TTFT p50", ev.client.get("ttft_p50_ms"), "ms"),
        fig("client TPOT p50", ev.client.get("tpot_p50_ms"), "ms"),
        Figure(name="generated tokens per request", value=n, artifact=ev.client["output_len"].artifact),
        fig("server queue time mean", ev.server.get("queue_ms"), "ms"),
        fig("server TTFT mean", ev.server.get("ttft_ms"), "ms"),
        fig("server TPOT mean", ev.server.get("tpot_ms"), "ms"),
    ]
    said = ", ".join(f"{k} {v:.0%}" for k, v in s.items())
    steps = {
        "decode": "make capture WORKLOAD=<the workload> (per-thread CPU, wchan and stacks during decode)",
        "prefill": "make capture WORKLOAD=<the workload> (what the engine does before the first token)",
        "queueing": "make bench SEARCH=concurrency (where the load stops being served: the knee)",
    }
    return [
        Finding(
            rule="interval", seed=SEED, verdict="consistent with",
            title=f"{name} is where the requests spend most of their time{where}: {share:.0%} of each request",
            symptom=f"of a request's time (TTFT + (N-1) x TPOT, N={n}): {said}",
            explains=round(share, 3),
            figures=figures,
            not_established="whether that is too slow: no SLO or class reference judged here; nor why (the rules "
            "below read the host in the same seconds)",
            next_steps=[steps[name]],
        )
    ]  # fmt: skip


RULE = Rule("interval", SEED, run)
