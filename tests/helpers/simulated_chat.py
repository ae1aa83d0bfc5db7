"""The bench client's conversations loop (images/vllm/bench_client.py) with its one seam replaced: `SimulatedChat`,
a server that answers each turn after a delay and records what it was sent and when."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.image_scripts import image_script

client = image_script("bench_client")


def spec(**extra: Any) -> dict[str, Any]:
    """A conversations spec as serving/bench/protocol.py conversation_spec writes it."""
    return {"base_url": "http://localhost", "endpoint": "/v1/chat/completions", "model": "tiny-llama",
            "tokenizer": "/models/tiny-llama", "seed": 8, "turns": 3, "num_conversations": 4, "input_len": 8,
            "output_len": 4, "think_time_s": 0.0, "max_concurrency": 2, "ignore_eos": True, "temperature": 0.0,
            "cache_salt": "salt-c2-m1", "timeout_s": 60.0, **extra}  # fmt: skip


@dataclass
class Input:
    """What vLLM's RequestFuncInput holds, as far as the loop fills it."""

    prompt: Any
    api_url: str
    prompt_len: int
    output_len: int
    model: str
    extra_body: dict[str, Any] | None = None
    ignore_eos: bool = False
    request_id: str | None = None
    chat_messages: list[dict[str, Any]] | None = None


@dataclass
class Output:
    """vLLM's RequestFuncOutput's fields, with its defaults (a failed request keeps them)."""

    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    output_tokens: int = 0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    start_time: float = 0.0


@dataclass
class Sent:
    conversation: int
    turn: int
    request: Input
    start: float
    end: float


class SimulatedChat:
    """A chat server: turn t's first token after ttft_s(t), then its other tokens decode_s apart; it answers
    "answer <c>.<t>" and counts the history as the prompt. `fail` = {(conversation, turn)} answer 500."""

    def __init__(
        self,
        ttft_s: Callable[[int], float] = lambda turn: 0.005,
        decode_s: float = 0.001,
        fail: frozenset[tuple[int, int]] = frozenset(),
    ) -> None:
        self.ttft_s, self.decode_s, self.fail = ttft_s, decode_s, fail
        self.sent: list[Sent] = []
        self.sessions = 0

    def seam(self, s: dict[str, Any]) -> Any:
        turns = [[(f"user {c}.{t}", 8) for t in range(1, s["turns"] + 1)] for c in range(s["num_conversations"])]
        return client.ConversationSeam(self.request, Input, self.session, turns, lambda text: len(text.split()))

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[str]:
        self.sessions += 1
        yield "session"

    async def request(self, inp: Input, session: str) -> Output:
        assert session == "session" and inp.chat_messages is not None
        users = [m["content"] for m in inp.chat_messages if m["role"] == "user"]
        # "user <c>.1" opens conversation c; the turn is the user messages so far.
        c, t = int(users[0].split()[1].split(".")[0]), len(users)
        start = time.perf_counter()
        out = Output(start_time=start, prompt_len=10 * len(inp.chat_messages))
        if (c, t) in self.fail:
            await asyncio.sleep(0.002)
            out.error = "Internal Server Error"
        else:
            # The server really waits (so turns and conversations interleave as they would), but the times it
            # reports are the simulated ones, exactly: a loaded test machine oversleeps by milliseconds, which
            # once reordered the TTFT-by-turn medians that a report test checks.
            await asyncio.sleep(self.ttft_s(t))
            await asyncio.sleep(self.decode_s * (inp.output_len - 1))
            out.success, out.ttft, out.itl = True, self.ttft_s(t), [self.decode_s] * (inp.output_len - 1)
            out.latency = out.ttft + sum(out.itl)
            out.output_tokens, out.generated_text = inp.output_len, f"answer {c}.{t}"
        self.sent.append(Sent(c, t, inp, start, time.perf_counter()))
        return out
