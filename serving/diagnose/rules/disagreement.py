"""Client and server disagree (seed 000 §1 and §4: cross-check the client's events against the server's token
metrics): a stream buffered on its way (the client's TPOT under half the server's: tokens arrived in bursts), a
first token held back (the client's TTFT over twice the server's and 50 ms more), or token counts that differ. Then
the client's intervals are not the server's, and no rule about the server explains them: the finding explains all
of the slow interval as the client measured it, and ranks first (§14.2: align client and server before reading the
host).

The thresholds are the bench's own flags' (serving/bench/runs.py, docs/benchmarks.md), so a bench's flagged runs
and a capture's figures are judged alike.
"""

from __future__ import annotations

from serving.bench.runs import (
    BUFFERED_STREAM,
    MAX_CLIENT_OVER_SERVER_TTFT,
    MAX_CLIENT_TTFT_LATE_MS,
    MIN_CLIENT_OVER_SERVER_TPOT,
)
from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out

SEED = "000 §1, §4"
# The bench's own flags (serving/bench/runs.py), by how each begins after its run's id.
BENCH_FLAGS = (BUFFERED_STREAM, "the server generated")
TOKENS_DIFFER = 0.02  # server tokens against the client's completed x output_len
# A capture's requests whose tokens all came in one chunk: a few happen when the API server falls behind on a
# busy host (one of 60 under neighbours here); a proxy that buffers makes it every request's.
BURST_SHARE = 0.1


def _capture_signs(ev: Evidence) -> list[str]:
    c, s = ev.client, ev.server
    signs = []
    tpots = (c.get("tpot_p50_ms"), s.get("tpot_ms"))
    if (
        tpots[0]
        and tpots[1]
        and tpots[1].value
        and float(tpots[0].value) < MIN_CLIENT_OVER_SERVER_TPOT * float(tpots[1].value)
    ):
        signs.append(
            f"{BUFFERED_STREAM}: the client's TPOT p50 {float(c['tpot_p50_ms'].value):.2f} ms is under half the "
            f"server's {float(s['tpot_ms'].value):.2f} ms"
        )
    if c.get("ttft_p50_ms") and s.get("ttft_ms") and s["ttft_ms"].value is not None:
        ct, st = float(c["ttft_p50_ms"].value), float(s["ttft_ms"].value)
        if ct > MAX_CLIENT_OVER_SERVER_TTFT * st and ct - st > MAX_CLIENT_TTFT_LATE_MS:
            signs.append(f"late first token: the client's TTFT p50 {ct:.1f} ms against the server's {st:.1f} ms")
    bursts, done = c.get("one_burst"), c.get("completed")
    if bursts and done and done.value and int(bursts.value or 0) >= BURST_SHARE * int(done.value):
        signs.append(f"{int(bursts.value)} of {int(done.value)} requests' tokens arrived in one burst")
    n, gen = c.get("output_len"), s.get("generation_tokens")
    if done and n and gen and done.value and n.value:
        want = float(done.value) * float(n.value)
        if want and abs(float(gen.value) - want) / want > TOKENS_DIFFER:
            signs.append(
                f"token counts differ: the server generated {float(gen.value):.0f}, the client expected {want:.0f}"
            )
    return signs


def run(ev: Evidence) -> list[Finding]:
    if ev.kind == "bench":
        flagged = ev.conditions.get("flagged_runs")
        signs = [f for f in (flagged.value if flagged else []) if f.split(": ", 1)[-1].startswith(BENCH_FLAGS)]
        cited = flagged.artifact if flagged else "summary.json"
    else:
        if not ev.client:
            raise CannotRun("no client figures: the capture sent no workload")
        signs = _capture_signs(ev)
        cited = "requests/requests.json, metrics/delta.json"
    figures = [
        fig("client TTFT p50", ev.client.get("ttft_p50_ms"), "ms"),
        fig("server TTFT mean", ev.server.get("ttft_ms"), "ms"),
        fig("client TPOT p50", ev.client.get("tpot_p50_ms"), "ms"),
        fig("server TPOT mean", ev.server.get("tpot_ms"), "ms"),
    ]
    if not signs:
        return [ruled_out(
            rule="disagreement", seed=SEED,
            title="the stream was not changed between server and client: their TTFT and TPOT agree",
            symptom="no buffered stream, late first token or differing token count", figures=figures,
            not_established="nothing about the server's own speed"
        )]  # fmt: skip
    return [Finding(
        rule="disagreement", seed=SEED, verdict="consistent with",
        title="something between server and client changes the stream: the client's intervals are not the server's",
        symptom="; ".join(signs[:4]) + (f" (and {len(signs) - 4} more)" if len(signs) > 4 else ""),
        explains=1.0, figures=figures,
        not_established=f"what does it (a proxy's buffering, the client's own CPU): the signs are read from {cited}",
        next_steps=["make bench (straight to the server) and make bench VIA=<the proxy>, then "
                    "make compare VARIABLE=via A=<direct> B=<through it>"],
    )]  # fmt: skip


RULE = Rule("disagreement", SEED, run)
