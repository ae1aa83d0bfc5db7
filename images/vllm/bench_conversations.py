"""The bench client's conversations: multi-turn chats, which vLLM 0.32's `vllm bench serve` has no dataset for.
images/vllm/bench_client.py run_conversations runs one (`converse`) between the same snapshots as a `vllm bench
serve` run, and writes its result.json (`conversation_result`) in vLLM's format.

A conversation sends turn 1, waits for its whole streamed answer, appends the answer to the history, waits the
think time, then sends turn 2 with the whole history (user and assistant turns alternating), and so on. Every
request goes through vLLM's own chat request function, so TTFT, the chunk intervals and the latency are measured
by the code `vllm bench serve` measures with; the user turns are drawn from the run's seed by vLLM's random
dataset, so the same seed sends the same user turns.

Standard library only (and vLLM, imported lazily): copied to the host beside bench_client.py
(ansible/roles/bench/tasks/main.yml) with serving/standalone/knee.py, whose percentile it uses, and run with the image's
Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import knee  # type: ignore[import-not-found]  # serving/standalone/knee.py, copied beside this file


class ConversationSeam:
    """THE TEST SEAM of run_conversations: everything that talks to vLLM. `vllm_seam` builds the real one; the
    unit tests pass their own (tests/unit/images/test_conversation_client.py), so the loop runs there without vLLM.

    request(input, session): vLLM's async_request_openai_chat_completions (-> its RequestFuncOutput);
    make_input(**fields): vLLM's RequestFuncInput; session(): an async context manager giving the HTTP session;
    user_turns[c][t]: conversation c's user turn t+1, (text, its tokens); count_tokens(text): the tokenizer's count
    of an answer, which vLLM uses where the server's usage gave none."""

    def __init__(
        self,
        request: Callable[[Any, Any], Awaitable[Any]],
        make_input: Callable[..., Any],
        session: Callable[[], Any],
        user_turns: list[list[tuple[str, int]]],
        count_tokens: Callable[[str], int],
    ) -> None:
        self.request, self.make_input, self.session = request, make_input, session
        self.user_turns, self.count_tokens = user_turns, count_tokens


def vllm_seam(spec: dict[str, Any]) -> ConversationSeam:
    """The real seam: vLLM's chat request function and input, an aiohttp session opened as `vllm bench serve` opens
    it (a connection per conversation in flight, its 6-hour total timeout), and the user turns drawn by vLLM's
    random dataset from the run's seed with the served model's tokenizer (`--random-range-ratio 0`: every turn
    input_len tokens as vLLM counts them, the tokenizer's special tokens left to the server's template)."""
    import aiohttp  # type: ignore[import-not-found]
    from vllm.benchmarks.datasets.datasets import RandomDataset  # type: ignore[import-not-found]
    from vllm.benchmarks.lib.endpoint_request_func import (  # type: ignore[import-not-found]
        RequestFuncInput,
        async_request_openai_chat_completions,
    )
    from vllm.tokenizers import get_tokenizer  # type: ignore[import-not-found]

    tokenizer = get_tokenizer(spec["tokenizer"], tokenizer_mode="auto", trust_remote_code=False)
    n, turns = int(spec["num_conversations"]), int(spec["turns"])
    drawn = RandomDataset(random_seed=int(spec["seed"]), dataset_path=None).sample(
        tokenizer=tokenizer, num_requests=n * turns, prefix_len=0, input_len=int(spec["input_len"]),
        output_len=int(spec["output_len"]), range_ratio=0.0, request_id_prefix="",
    )  # fmt: skip
    pairs = [(str(r.prompt), int(r.prompt_len)) for r in drawn]
    cap = int(spec.get("max_concurrency") or 0)

    def session() -> Any:
        connector = aiohttp.TCPConnector(
            limit=cap, limit_per_host=cap, ttl_dns_cache=300, use_dns_cache=True, keepalive_timeout=60,
            enable_cleanup_closed=True, force_close=False,
        )  # fmt: skip
        return aiohttp.ClientSession(
            connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
        )

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    return ConversationSeam(
        async_request_openai_chat_completions,
        RequestFuncInput,
        session,
        [pairs[c * turns : (c + 1) * turns] for c in range(n)],
        count_tokens,
    )


class Turn:
    """One request of a conversation as it went: vLLM's RequestFuncOutput, and the time it waited in the client
    (turn 1 for a conversation slot; later turns not at all: each is sent when its think time ends)."""

    def __init__(self, conversation: int, turn: int, output: Any, queue_s: float) -> None:
        self.conversation, self.turn, self.output, self.queue_s = conversation, turn, output, queue_s


async def _conversation(
    c: int, spec: dict[str, Any], seam: ConversationSeam, session: Any, slots: Any, turns: list[Turn], prefix: str
) -> None:
    """Conversation c, turn after turn, inside one of the run's conversation slots; a failed turn ends it. Its
    requests' ids are prefix<c>-<turn> (vllm bench serve's are bench-<8 hex>-<i>)."""
    api_url = str(spec["base_url"]).rstrip("/") + str(spec["endpoint"])
    extra_body: dict[str, Any] = {"temperature": spec.get("temperature", 0.0)}
    if spec.get("cache_salt"):
        extra_body["cache_salt"] = spec["cache_salt"]
    think = float(spec.get("think_time_s") or 0.0)
    ready = time.perf_counter()
    async with slots:
        history: list[dict[str, str]] = []
        history_tokens = 0
        for t, (text, tokens) in enumerate(seam.user_turns[c], 1):
            if t > 1 and think > 0:
                await asyncio.sleep(think)
                ready = time.perf_counter()
            history.append({"role": "user", "content": text})
            request = seam.make_input(
                prompt=text, api_url=api_url, prompt_len=history_tokens + tokens, output_len=int(spec["output_len"]),
                model=spec["model"], extra_body=dict(extra_body), ignore_eos=bool(spec.get("ignore_eos", True)),
                request_id=f"{prefix}{c}-{t}", chat_messages=list(history),
            )  # fmt: skip
            output = await seam.request(request, session)
            turns.append(Turn(c, t, output, output.start_time - ready))
            if not output.success:
                return
            history.append({"role": "assistant", "content": output.generated_text})
            history_tokens += tokens + int(output.output_tokens or 0)
            ready = time.perf_counter()


async def converse(spec: dict[str, Any], seam: ConversationSeam, turns: list[Turn], clock: dict[str, float]) -> None:
    """Every conversation of the run, at most max_concurrency in flight (none: all of them at once)."""
    cap = spec.get("max_concurrency")
    slots = asyncio.Semaphore(int(cap)) if cap else contextlib.nullcontext()
    prefix = f"conv-{uuid.uuid4().hex[:8]}-"
    async with seam.session() as session:
        clock["start"] = time.perf_counter()
        await asyncio.gather(
            *(_conversation(c, spec, seam, session, slots, turns, prefix) for c in range(len(seam.user_turns)))
        )


def _metric(result: dict[str, Any], name: str, values: list[float]) -> None:
    """mean, median, std, p50, p90, p99 of values (s) in ms, under vLLM's keys (0 for none, as numpy gives it)."""
    xs = values or [0.0]
    result[f"mean_{name}_ms"] = statistics.fmean(xs) * 1000
    result[f"median_{name}_ms"] = statistics.median(xs) * 1000
    result[f"std_{name}_ms"] = statistics.pstdev(xs) * 1000
    for p in (50, 90, 99):
        result[f"p{p}_{name}_ms"] = knee.percentile(xs, p) * 1000


def _peaks(turns: list[Turn]) -> tuple[float, int]:
    """vLLM's peak figures: the most output tokens in one second of the run, and the requests active in the
    busiest second (per-second buckets from the first successful request's send)."""
    ok = [t.output for t in turns if t.output.success]
    if not ok:
        return 0.0, 0
    t0 = min(o.start_time for o in ok)
    seconds = math.ceil(max(o.start_time + o.latency for o in ok) - t0) + 1
    tokens, active = [0] * seconds, [0] * seconds
    for o in ok:
        at = o.start_time + o.ttft
        for dt in [0.0, *o.itl]:
            at += dt
            if 0 <= int(at - t0) < seconds:
                tokens[int(at - t0)] += 1
        for s in range(int(o.start_time - t0), int(o.start_time + o.latency - t0) + 1):
            active[s] += 1
    return float(max(tokens)), max(active)


def conversation_result(
    spec: dict[str, Any], seam: ConversationSeam, turns: list[Turn], duration: float, not_sent: int
) -> dict[str, Any]:
    """The run's result.json in the format `vllm bench serve --save-detailed` writes (its run-level and
    per-request fields, failed requests recorded as vLLM records them: output length 0, the error text), in
    conversation order, with each request's `conversation` (from 0) and `turn` (from 1), and the turns not sent."""
    turns = sorted(turns, key=lambda t: (t.conversation, t.turn))
    outs = [t.output for t in turns]
    lens = [int(o.output_tokens or seam.count_tokens(o.generated_text)) if o.success else 0 for o in outs]
    ok = [(o, n) for o, n in zip(outs, lens, strict=True) if o.success]
    total_in = sum(o.prompt_len for o, _ in ok)
    per_s = 1.0 / duration if duration > 0 else 0.0
    peak_tokens, peak_active = _peaks(turns)
    result: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": "openai-chat", "backend": "openai-chat",
        "label": None, "model_id": spec["model"], "tokenizer_id": spec["tokenizer"], "dataset": "conversations",
        "num_conversations": spec["num_conversations"], "turns": spec["turns"], "think_time_s": spec["think_time_s"],
        "num_prompts": int(spec["num_conversations"]) * int(spec["turns"]), "request_rate": "inf",
        "burstiness": 1.0, "max_concurrency": spec.get("max_concurrency"), "duration": duration,
        "completed": len(ok), "failed": len(outs) - len(ok), "not_sent": not_sent,
        "total_input_tokens": total_in, "total_output_tokens": sum(lens),
        "request_throughput": len(ok) * per_s, "request_goodput": None,
        "output_throughput": sum(lens) * per_s, "total_token_throughput": (total_in + sum(lens)) * per_s,
        "input_lens": [o.prompt_len for o in outs], "output_lens": lens, "ttfts": [o.ttft for o in outs],
        "itls": [list(o.itl) for o in outs], "latencies": [o.latency for o in outs],
        "start_times": [o.start_time for o in outs], "queue_times": [t.queue_s for t in turns],
        "generated_texts": [o.generated_text for o in outs], "errors": [o.error for o in outs],
        "conversation": [t.conversation for t in turns], "turn": [t.turn for t in turns],
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_active, "rtfx": 0.0,
    }  # fmt: skip
    _metric(result, "ttft", [o.ttft for o, _ in ok])
    _metric(result, "tpot", [(o.latency - o.ttft) / (n - 1) for o, n in ok if n > 1])
    _metric(result, "itl", [x for o, _ in ok for x in o.itl])
    _metric(result, "e2el", [o.latency for o, _ in ok])
    _metric(result, "client_queue_time", [t.queue_s for t in turns if t.output.success])
    return result


def endings(spec: dict[str, Any], turns: list[Turn], timed_out: bool) -> tuple[int, list[str]]:
    """The turns not sent, and a line per conversation that did not send all of its turns, saying why."""
    total = int(spec["turns"])
    not_sent, lines = 0, []
    for c in range(int(spec["num_conversations"])):
        mine = sorted((t for t in turns if t.conversation == c), key=lambda t: t.turn)
        missing = total - len(mine)
        if not missing:
            continue
        not_sent += missing
        if mine and not mine[-1].output.success:
            error = (str(mine[-1].output.error).strip().splitlines() or ["no error text"])[-1]
            why = f"its turn {mine[-1].turn} failed ({error[:200]}), which ends a conversation"
        else:
            why = "the run's timeout stopped it" if timed_out else "it was not run"
        lines.append(f"conversation {c}: {missing} of {total} turns not sent: {why}")
    return not_sent, lines
