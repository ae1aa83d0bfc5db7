"""The bench client's conversations loop (images/vllm/bench_client.py run_conversations), run with its one seam,
bench_client.ConversationSeam: vLLM's chat request function, its RequestFuncInput, the HTTP session and the user
turns drawn by vLLM's random dataset are replaced by `SimulatedChat`, a server that answers each turn after a
delay (its first token after `ttft_s(turn)`, then the rest) and records what it was sent and when. The real seam
(`vllm_seam`) runs in the runtime image only: this venv has no vLLM and no aiohttp.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.simulated_chat import SimulatedChat, client, spec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-bench-serve-0.32.0"


def run(tmp_path: Path, chat: SimulatedChat, **extra: Any) -> tuple[dict[str, Any], tuple[int | None, bool]]:
    s = spec(**extra)
    got = client.run_conversations(s, tmp_path, float(s["timeout_s"]), seam=chat.seam(s))
    return json.loads((tmp_path / "result.json").read_text()), got


def test_each_turn_after_the_first_carries_the_answers_before_it_in_order(tmp_path: Path) -> None:
    chat = SimulatedChat()
    result, got = run(tmp_path, chat)
    assert got == (0, False) and result["completed"] == 12 and result["failed"] == 0
    for s in chat.sent:
        messages = s.request.chat_messages or []
        want: list[dict[str, str]] = []
        for t in range(1, s.turn):
            want += [{"role": "user", "content": f"user {s.conversation}.{t}"},
                     {"role": "assistant", "content": f"answer {s.conversation}.{t}"}]  # fmt: skip
        assert messages == [*want, {"role": "user", "content": f"user {s.conversation}.{s.turn}"}]
    assert sorted((s.conversation, s.turn) for s in chat.sent) == [(c, t) for c in range(4) for t in (1, 2, 3)]
    # Every request as vllm bench serve sends one: the chat path, the run's salt and sampling, its lengths.
    for s in chat.sent:
        r = s.request
        assert r.api_url == "http://localhost/v1/chat/completions" and r.model == "tiny-llama"
        assert r.extra_body == {"temperature": 0.0, "cache_salt": "salt-c2-m1"} and r.ignore_eos is True
        assert r.output_len == 4 and r.request_id is not None and r.request_id.endswith(f"-{s.conversation}-{s.turn}")
        # The client's count of the history (8 user tokens a turn, 4 answered): the server's usage replaces it.
        assert r.prompt_len == 8 * s.turn + 4 * (s.turn - 1)
    # One session for the run, as vllm bench serve opens one.
    assert chat.sessions == 1


def test_a_turn_starts_after_the_turn_before_it_ended(tmp_path: Path) -> None:
    chat = SimulatedChat()
    result, _ = run(tmp_path, chat)
    by = {(s.conversation, s.turn): s for s in chat.sent}
    for (c, t), s in by.items():
        if t > 1:
            assert s.start >= by[(c, t - 1)].end
    # The same from result.json's own times (vLLM's start_time and latency, perf_counter seconds).
    rows = sorted(zip(result["conversation"], result["turn"], result["start_times"], result["latencies"], strict=True))
    for (c1, t1, s1, l1), (c2, t2, s2, _) in itertools.pairwise(rows):
        if c1 == c2:
            assert t2 == t1 + 1 and s2 >= s1 + l1


def conversation_spans(result: dict[str, Any]) -> dict[int, tuple[float, float]]:
    spans: dict[int, tuple[float, float]] = {}
    for c, s, lat in zip(result["conversation"], result["start_times"], result["latencies"], strict=True):
        a, b = spans.get(c, (s, s + lat))
        spans[c] = (min(a, s), max(b, s + lat))
    return spans


def most_at_once(spans: dict[int, tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_at_most_max_concurrency_conversations_are_in_flight(tmp_path: Path, cap: int) -> None:
    result, _ = run(tmp_path, SimulatedChat(), max_concurrency=cap)
    # A conversation holds its slot from its first turn's send to its last turn's end: never more than the cap at
    # once, and the cap reached (4 conversations).
    assert most_at_once(conversation_spans(result)) == cap
    assert result["max_concurrency"] == cap


def test_the_think_time_is_waited_between_an_answer_and_the_next_turn(tmp_path: Path) -> None:
    chat = SimulatedChat()
    run(tmp_path, chat, think_time_s=0.05, num_conversations=2)
    by = {(s.conversation, s.turn): s for s in chat.sent}
    gaps = [s.start - by[(c, t - 1)].end for (c, t), s in by.items() if t > 1]
    assert len(gaps) == 4 and min(gaps) >= 0.05 - 1e-6
    quick = SimulatedChat()
    run(tmp_path, quick, think_time_s=0.0, num_conversations=2)
    by = {(s.conversation, s.turn): s for s in quick.sent}
    assert max(s.start - by[(c, t - 1)].end for (c, t), s in by.items() if t > 1) < 0.05


def test_a_failed_turn_ends_its_conversation_and_the_rest_are_said_not_sent(tmp_path: Path) -> None:
    chat = SimulatedChat(fail=frozenset({(1, 2)}))
    result, got = run(tmp_path, chat, turns=4)
    assert got == (0, False)
    assert [(s.conversation, s.turn) for s in chat.sent if s.conversation == 1] == [(1, 1), (1, 2)]
    assert (result["num_prompts"], result["completed"], result["failed"], result["not_sent"]) == (16, 13, 1, 2)
    # Recorded as vLLM records a failed request: its error, no output, its TTFT and latency left at 0.
    i = next(i for i, (c, t) in enumerate(zip(result["conversation"], result["turn"], strict=True)) if (c, t) == (1, 2))
    assert result["errors"][i] == "Internal Server Error" and result["output_lens"][i] == 0
    assert result["ttfts"][i] == 0.0 and result["latencies"][i] == 0.0 and result["itls"][i] == []
    log = (tmp_path / "stdout.log").read_text()
    assert "conversation 1: 2 of 4 turns not sent: its turn 2 failed (Internal Server Error)" in log
    reason = client._run_failure({"conversations": spec(), "timeout_s": 60}, 0, False, tmp_path / "result.json")
    assert reason == "1 of 16 requests failed; 2 turns not sent (a failed turn ends its conversation)"


def test_result_json_has_every_field_vllm_bench_serve_writes(tmp_path: Path) -> None:
    result, _ = run(tmp_path, SimulatedChat())
    vllm = json.loads((FIXTURES / "c4-m1" / "result.json").read_text())
    assert sorted(set(vllm) - set(result)) == []
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                "generated_texts", "errors", "conversation", "turn"):  # fmt: skip
        assert len(result[key]) == 12, key
    assert result["endpoint_type"] == "openai-chat" and result["dataset"] == "conversations"
    assert (result["num_prompts"], result["turns"], result["num_conversations"]) == (12, 3, 4)
    assert result["output_lens"] == [4] * 12 and result["total_output_tokens"] == 48
    # The server's prompt count (usage), as vLLM records it: the history grows by two messages a turn.
    assert [n for n, t in zip(result["input_lens"], result["turn"], strict=True) if t == 3] == [50] * 4
    # vLLM's aggregates, with its definitions: TPOT (latency - TTFT)/(N - 1); throughput over the run's duration.
    tpots = sorted((lat - f) / 3 for lat, f in zip(result["latencies"], result["ttfts"], strict=True))
    assert result["median_tpot_ms"] == pytest.approx((tpots[5] + tpots[6]) / 2 * 1000)
    assert result["output_throughput"] == pytest.approx(48 / result["duration"])
    span = max(s + lat for s, lat in zip(result["start_times"], result["latencies"], strict=True))
    assert result["duration"] >= span - min(result["start_times"])
    assert (tmp_path / "stderr.log").read_text() == ""


def test_a_run_past_its_timeout_is_stopped_and_keeps_what_it_had(tmp_path: Path) -> None:
    chat = SimulatedChat(ttft_s=lambda turn: 0.05)
    result, got = run(tmp_path, chat, timeout_s=0.12, max_concurrency=1)
    assert got == (0, True)
    assert 0 < result["completed"] < 12 and result["completed"] + result["not_sent"] == 12
    assert "the run's timeout stopped it" in (tmp_path / "stdout.log").read_text()
    reason = client._run_failure({"conversations": spec(), "timeout_s": 0.12}, 0, True, tmp_path / "result.json")
    assert reason == "the conversations client ran past the run timeout (0.12 s) and was stopped"


def test_a_seam_that_cannot_start_is_exit_1_with_its_traceback(tmp_path: Path, monkeypatch: Any) -> None:
    def no_vllm(s: dict[str, Any]) -> Any:
        raise ModuleNotFoundError("No module named 'vllm'")

    monkeypatch.setattr(client, "vllm_seam", no_vllm)
    assert client.run_conversations(spec(), tmp_path, 5.0) == (1, False)
    assert "No module named 'vllm'" in (tmp_path / "stderr.log").read_text()
    assert not (tmp_path / "result.json").exists()


def test_the_runner_runs_a_conversations_run_between_its_snapshots(tmp_path: Path, monkeypatch: Any) -> None:
    chat = SimulatedChat(fail=frozenset({(0, 1)}))  # a first turn fails: its 2 later turns are not sent
    calls: list[str] = []

    def http(method: str, url: str, timeout: float = 10.0) -> tuple[int, str]:
        calls.append(f"{method} {url.rsplit('/', 1)[-1]}")
        return 200, "# metrics\n" if url.endswith("/metrics") else ""

    monkeypatch.setattr(client, "vllm_seam", chat.seam)
    monkeypatch.setattr(client, "http", http)
    monkeypatch.setattr(client, "engine_io", lambda pid=1: {"pids": {}, "unreadable": {}})
    monkeypatch.setattr(client, "run_bench", lambda *a: pytest.fail("a conversations run is not vllm bench serve"))
    record: dict[str, Any] = {"runs": []}
    runner = client.Runner({"prefix_cache": "fresh"}, tmp_path, "http://x", None, record)
    run = {"id": "c2-m1", "phase": "measured", "timeout_s": 60.0, "conversations": spec()}
    assert runner.run(run) == "failed"
    d = tmp_path / "runs" / "c2-m1"
    status = json.loads((d / "status.json").read_text())
    assert status["conversations"] == spec() and "argv" not in status
    assert json.loads((d / "conversations.json").read_text()) == spec()
    assert status["reason"] == "1 of 12 requests failed; 2 turns not sent (a failed turn ends its conversation)"
    assert (d / "metrics-before.txt").is_file() and (d / "metrics-after.txt").is_file()
    assert calls[:3] == ["GET health", "GET metrics", "POST reset_prefix_cache"] and calls[3] == "GET metrics"
    assert status["started_mono_s"] <= min(json.loads((d / "result.json").read_text())["start_times"])
    for name in ("result.json", "stdout.log", "stderr.log"):
        assert (d / name).is_file(), name
