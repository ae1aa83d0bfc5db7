"""Multi-turn conversations (`dataset: conversations`): the schema's one-line refusals, the client plan's
conversations spec, the client's loop (images/vllm/bench_client.py run_conversations), the run read back with its
turn numbers, and the report's turn table.

The client's loop runs here with one seam, bench_client.ConversationSeam: vLLM's chat request function, its input
type, the HTTP session and the user turns drawn by vLLM's random dataset are replaced by a simulated server that
answers each turn after a delay and records what it was sent; the real loop runs in the runtime image.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from serving import bench, workload
from serving.errors import InputError
from tests.unit.test_workloads_production import serving_plan, write_workload

CONVERSATIONS = {"dataset": "conversations", "api": "chat", "num_prompts": None, "input_len": 64, "output_len": 32,
                 "turns": 4, "num_conversations": 2, "concurrency": [1, 2]}  # fmt: skip


def conversations_workload(tmp_path: Path, **extra: Any) -> workload.Workload:
    return workload.load_workload(str(write_workload(tmp_path, **{**CONVERSATIONS, **extra})))


# --- the schema: one line for each bad input, before any request ------------------------------------------------


def test_the_shipped_multi_turn_workload_is_chat_conversations() -> None:
    w = workload.load_workload("multi-turn")
    assert (w.api, w.dataset, w.num_conversations, w.turns, w.input_len, w.output_len) == (
        "chat", "conversations", 4, 4, 64, 32,
    )  # fmt: skip
    assert w.concurrency == [1, 4] and w.warmups == 1 and w.runs == 2 and w.slo is not None
    assert w.think_time_s() == 0.0
    # Each turn resends the history: the prefix cache is meant to serve it.
    assert workload.intends_prefix_hits(w.model_dump(mode="json"))


@pytest.mark.parametrize(("text", "seconds"), [("0ms", 0.0), ("500ms", 0.5), ("1.5s", 1.5)])
def test_think_time_is_a_duration_with_its_unit_and_may_be_zero(tmp_path: Path, text: str, seconds: float) -> None:
    assert conversations_workload(tmp_path, think_time=text).think_time_s() == seconds


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"turns": None}, "dataset conversations needs turns"),
        ({"num_conversations": None}, "dataset conversations needs num_conversations"),
        ({"turns": 1}, "turns: Input should be greater than or equal to 2"),
        ({"num_conversations": 0}, "num_conversations: Input should be greater than or equal to 1"),
        ({"num_prompts": 8},
         "dataset conversations sends turns x num_conversations requests (4 x 2): give no num_prompts"),
        ({"api": "completions"},
         "dataset conversations resends each conversation's history as chat messages: api: chat"),
        ({"arrival_rates": [2.0]},
         "conversations run at a concurrency of conversations; a turn waits for the answer before it, so there is "
         "no arrival rate: give no arrival_rates (concurrency: [1, 4])"),
        ({"burstiness": 0.5},
         "conversations run at a concurrency of conversations; burstiness shapes arrivals at a rate, which "
         "conversations do not have: give no burstiness"),
        ({"concurrency": []},
         "conversations run at a concurrency of conversations: give at least one level (concurrency: [1, 4])"),
        ({"prefix_len": 8},
         "dataset conversations takes no prefix_len (a turn's prompt is its history and input_len user tokens)"),
        ({"think_time": 500}, "think_time: Value error, 500 has no unit: write it as 500ms or 500s"),
        ({"think_time": "-1s"},
         "think_time: Value error, '-1s' is not a duration in ms or s: write it as e.g. 500ms or 0.5s"),
        ({"dataset": "random", "num_prompts": 8},
         "dataset random takes no turns or num_conversations (those are dataset conversations' fields)"),
        ({"dataset": "random", "num_prompts": 8, "turns": None, "num_conversations": None, "think_time": "1s"},
         "dataset random takes no think_time (those are dataset conversations' fields)"),
    ],
)  # fmt: skip
def test_a_bad_conversations_workload_is_one_line(tmp_path: Path, fields: dict[str, Any], said: str) -> None:
    path = write_workload(tmp_path, **{**CONVERSATIONS, **fields})
    with pytest.raises(workload.WorkloadError) as err:
        workload.load_workload(str(path))
    assert str(err.value) == f"{path}: {said}"


def test_a_last_turn_beyond_the_profiles_context_is_one_line_naming_the_numbers(tmp_path: Path) -> None:
    # 8 x (200 + 100 + 32) = 2656 > 2048; each turn alone (300 tokens) would fit.
    w = conversations_workload(tmp_path, turns=8, input_len=200, output_len=100)
    with pytest.raises(InputError) as err:
        bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1")
    assert str(err.value) == (
        "workload t: its last turn's history and answer need turns 8 x (input_len 200 + output_len 100 + 32 allowed "
        "for the chat template) = 2656 tokens, beyond the profile's context (max_model_len 2048): shorten them, give "
        "the workload a `sizes` entry for this profile, or deploy a profile with a longer context"
    )
    # 6 x 332 = 1992 fits.
    assert bench.plan_bench(w.model_copy(update={"turns": 6}), serving_plan(), "/o", "0-1", "0-1")


def test_a_profile_runs_fewer_turns_by_its_sizes_entry_and_the_report_says_so(tmp_path: Path) -> None:
    sizes = {"cpu-tiny": {"turns": 2, "num_conversations": 1, "why": "the profile's context is 2048 tokens"}}
    w = conversations_workload(tmp_path, turns=8, input_len=200, output_len=100, sizes=sizes)
    p = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1")
    spec = p["client_plan"]["runs"][0]["conversations"]
    assert (spec["turns"], spec["num_conversations"]) == (2, 1)
    assert p["manifest"]["sized"] == (
        "sized for cpu-tiny: turns 8 -> 2, num_conversations 2 -> 1 (the profile's context is 2048 tokens)"
    )


@pytest.mark.parametrize("kind", ["concurrency", "rate"])
def test_a_search_of_conversations_is_one_line(tmp_path: Path, kind: str) -> None:
    w = conversations_workload(tmp_path, slo={"ttft": "1s"})
    with pytest.raises(InputError) as err:
        bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search=kind)
    assert str(err.value) == (
        f"SEARCH={kind}: conversations run at a concurrency of conversations, and the search drives vllm bench "
        "serve's own loads: bench them at fixed levels (concurrency: [1, 4])"
    )


# --- the plan: a conversations spec per run, in place of an argv ------------------------------------------------


def test_each_run_carries_a_conversations_spec_with_its_own_seed_and_salt() -> None:
    w = workload.load_workload("multi-turn")
    p = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", cache_salt="salt")
    runs = p["client_plan"]["runs"]
    assert [r["id"] for r in runs] == ["c1-w1", "c1-m1", "c1-m2", "c4-w1", "c4-m1", "c4-m2"]
    for r in runs:
        assert "argv" not in r
        spec = r["conversations"]
        assert spec == {
            "base_url": "http://127.0.0.1:8000", "endpoint": "/v1/chat/completions", "model": "tiny-llama",
            "tokenizer": "/models/tiny-llama", "seed": r["seed"], "turns": 4, "num_conversations": 4,
            "input_len": 64, "output_len": 32, "think_time_s": 0.0, "max_concurrency": r["max_concurrency"],
            "ignore_eos": True, "temperature": 0.0, "cache_salt": f"salt-{r['id']}", "timeout_s": 300.0,
        }  # fmt: skip
    assert [r["seed"] for r in runs] == [7, 8, 9, 10, 11, 12]
    assert [r["max_concurrency"] for r in runs] == [1, 1, 1, 4, 4, 4]
    # The manifest records the workload and the runs as for any other, and names what sent the requests.
    m = p["manifest"]
    assert m["workload"]["dataset"] == "conversations" and m["workload"]["turns"] == 4
    assert [r["id"] for r in m["runs"]] == [r["id"] for r in runs]
    assert m["tool"].startswith("bench_client.py conversations with vllm bench serve's chat request function")
    assert p["files"] == [] and m["workload_data"] is None


def test_the_think_time_reaches_the_spec_in_seconds(tmp_path: Path) -> None:
    w = conversations_workload(tmp_path, think_time="250ms")
    runs = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1")["client_plan"]["runs"]
    assert {r["conversations"]["think_time_s"] for r in runs} == {0.25}
    # Without a salt (prefix caching off) the spec says so.
    assert {r["conversations"]["cache_salt"] for r in runs} == {None}
