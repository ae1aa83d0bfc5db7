"""Multi-turn conversations (`dataset: conversations`): the schema's one-line refusals, the client plan's
conversations spec, the run read back with its turn numbers, the report's workload line, intended hits and turn
table, and the Benchmark Report export. The client's loop itself is tests/unit/images/test_conversation_client.py;
its simulated chat server (tests/helpers/simulated_chat.py, behind the client's one seam, ConversationSeam) makes the
runs read back here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from llmd_benchmark_report.schema_v0_2 import BenchmarkReportV021

from serving.bench import br_export
from serving.bench import protocol as bench
from serving.bench import report as bench_report
from serving.bench import runs as bench_runs
from serving.bench import text as bench_text
from serving.bench.summary_schema import PointSummary, read_summary
from serving.config import workload
from serving.errors import InputError
from tests.helpers.bench_dirs import RUN, fixture
from tests.helpers.simulated_chat import SimulatedChat, client
from tests.helpers.simulated_chat import spec as client_spec
from tests.helpers.workload_files import serving_plan, write_workload

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
            "base_url": "http://localhost", "endpoint": "/v1/chat/completions", "model": "tiny-llama",
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


# --- the run read back, the report and the Benchmark Report export ----------------------------------------------


def counters(chat: SimulatedChat) -> str:
    """The server's /metrics as far as the run's checks read it: the tokens it generated, and the prompt tokens
    it looked up in the prefix cache and found there (a turn's history, all but its new user message)."""
    lines: list[str] = []
    for name, v in (("vllm:generation_tokens_total", chat.generated), ("vllm:prefix_cache_queries_total",
                    chat.queried), ("vllm:prefix_cache_hits_total", chat.hits)):  # fmt: skip
        lines += [f"# TYPE {name} counter", f'{name}{{engine="0",model_name="tiny-llama"}} {float(v)}']
    return "\n".join(lines) + "\n"


class CountingChat(SimulatedChat):
    """SimulatedChat that also counts what a server's counters would: generated tokens, prefix-cache lookups and
    hits (each later turn's history was cached by the turn before it)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.generated = self.queried = self.hits = 0

    async def request(self, inp: Any, session: str) -> Any:
        out = await super().request(inp, session)
        self.queried += out.prompt_len
        self.hits += out.prompt_len - 10
        self.generated += out.output_tokens
        return out


def conversations_bench(tmp_path: Path, monkeypatch: Any, chat: CountingChat) -> Path:
    """A bench directory as make bench leaves it, of the shipped multi-turn workload, its runs made by the client's
    Runner with the simulated chat server behind the seam."""
    p = bench.plan_bench(workload.load_workload("multi-turn"), serving_plan(), "/o", "0-1", "0-1", cache_salt="s")
    d = tmp_path / "localhost" / "20261201T000000Z" / "bench"
    (d / "runs").mkdir(parents=True)

    def http(method: str, url: str, timeout: float = 10.0) -> tuple[int, str]:
        return 200, counters(chat) if url.endswith("/metrics") else ""

    monkeypatch.setattr(client, "vllm_seam", chat.seam)
    monkeypatch.setattr(client, "http", http)
    monkeypatch.setattr(client, "engine_io", lambda pid=1: {"pids": {}, "unreadable": {}})
    record: dict[str, Any] = {"runs": [], "status": "ok", "reason": "", "started_mono_s": time.monotonic()}
    runner = client.Runner(p["client_plan"], d, "http://x", None, record)
    for run in p["client_plan"]["runs"]:
        runner.run(run)
    record["status"] = "failed" if runner.failed else "ok"
    for name, doc in (("manifest.json", p["manifest"]), ("client.json", record), ("plan.json", p["client_plan"])):
        (d / name).write_text(json.dumps(doc))
    return d


def test_a_run_is_read_back_with_each_requests_conversation_and_turn(tmp_path: Path) -> None:
    s = client_spec(turns=4, num_conversations=3)
    client.run_conversations(s, tmp_path, 60.0, seam=SimulatedChat(fail=frozenset({(2, 3)})).seam(s))
    result = json.loads((tmp_path / "result.json").read_text())
    obs = bench_runs.parse_requests(result)
    assert [(o.conversation, o.turn) for o in obs] == [(c, t) for c in range(3) for t in range(1, 5)][:-1]
    assert [o.success for o in obs] == [True] * 10 + [False]
    # TTFT, TPOT and the rest keep their definitions: the request function's ttft, (e2e - TTFT)/(N - 1).
    o = obs[5]
    assert o.ttft_s == result["ttfts"][5] and o.tpot_s == pytest.approx((o.e2el_s - o.ttft_s) / 3)
    w = {**workload.load_workload("multi-turn").model_dump(mode="json"), "turns": 4, "num_conversations": 3,
         "output_len": 4}  # fmt: skip
    flags = bench_runs._request_flags(obs, result, w)
    assert flags == [
        "1 of 11 requests failed (Internal Server Error)",
        "1 turns not sent (a failed turn ends its conversation; stdout.log says which)",
    ]
    # A turn neither recorded nor said not sent is a missing request.
    del result["not_sent"]
    assert "11 requests recorded, 12 requested" in bench_runs._request_flags(obs, result, w)


def test_conversations_prefix_hits_are_intended_not_flagged() -> None:
    result, status, before, after = fixture("c1-m1")
    line = next(ln for ln in after.splitlines() if ln.startswith("vllm:prefix_cache_hits_total{"))
    hit_after = after.replace(line, line.rsplit(" ", 1)[0] + " 1.0e+06")
    conversations = workload.load_workload("multi-turn").model_dump(mode="json")
    s = bench_runs.summarize_run(RUN, status, result, before, hit_after, conversations)
    assert not any("prefix-cache hits" in f for f in s["flags"])
    chat = workload.load_workload("chat").model_dump(mode="json")
    s = bench_runs.summarize_run(RUN, status, result, before, hit_after, chat)
    assert any(f.startswith("prefix-cache hits where none may be") for f in s["flags"])


def test_the_report_states_the_workload_and_gives_ttft_by_turn(tmp_path: Path, monkeypatch: Any) -> None:
    chat = CountingChat(ttft_s=lambda turn: 0.008 * turn, decode_s=0.0002)
    d = conversations_bench(tmp_path, monkeypatch, chat)
    s = bench_report.write_report(d)
    assert s["status"] == "ok", s["reason"]
    assert [r["valid"] for r in s["runs"]] == [True] * 6, [r["flags"] for r in s["runs"]]
    text = (d / "report.txt").read_text()
    assert (
        "workload multi-turn: /v1/chat/completions (the model's chat template), 4 conversations x 4 turns, random "
        "64 in / 32 out tokens per turn, history resent each turn, think time 0ms, concurrency = conversations in "
        "flight, seed 7, 1 warm-up + 2 measured runs per point"
    ) in text
    assert "prefix cache: HITS INTENDED: each turn resends its conversation's history, so the cache serving " in text
    assert s["prefix_cache"]["hits_intended"] and s["prefix_cache"]["hits_in_measured_runs"] > 0
    assert "raw: runs/<id>/result.json (the conversations client, in the format of vllm bench serve" in text
    lines = text.splitlines()
    head = lines.index(
        "TTFT ms by turn, pooled over the valid measured runs (median [min-max] n; turn 1 has no history, "
        "later turns resend it):"
    )
    assert lines[head + 1].split() == ["point", "turn", "1", "turn", "2", "turn", "3", "turn", "4"]
    assert [lines[head + k].split()[:2] for k in (2, 3)] == [["concurrency", "1"], ["concurrency", "4"]]
    for p in s["points"]:
        by_turn = p["ttft_ms_by_turn"]
        assert sorted(by_turn) == ["1", "2", "3", "4"] and {v["n"] for v in by_turn.values()} == {8}
        medians = [by_turn[str(t)]["median"] for t in (1, 2, 3, 4)]
        assert medians == sorted(medians) and medians[0] >= 8.0
        assert f"{medians[3]:.3g} [" in lines[head + 2 + s["points"].index(p)]


def test_a_random_workloads_report_has_no_turn_table() -> None:
    points = [{"point": "c1", "max_concurrency": 1, "ttft_ms_by_turn": {}}]
    assert bench_text._turn_lines([PointSummary.model_construct(**p) for p in points]) == []
    line = bench_text.workload_line(workload.load_workload("chat").model_dump(mode="json"), None)
    assert "turns" not in line and "16 prompts per run" in line


def test_a_conversations_point_exports_with_its_spec_and_the_requests_own_input_lengths(
    tmp_path: Path, monkeypatch: Any
) -> None:
    d = conversations_bench(tmp_path, monkeypatch, CountingChat(decode_s=0.0002))
    bench_report.write_report(d)
    docs = {p.stem: yaml.safe_load(p.read_text()) for p in br_export.export_bench(d, read_summary(d / "summary.json"))}
    assert sorted(docs) == ["c1", "c4"]
    for point, doc in docs.items():
        BenchmarkReportV021.model_validate(doc)
        load = doc["scenario"]["load"]
        # Labelled vLLM's benchmark (the schema's nearest tool), and the description names the client that sent it.
        assert load["standardized"]["tool"] == "vllm-benchmark"
        assert (
            "sent by refdeploy's conversations client (images/vllm/bench_client.py run_conversations)"
            in (load["metadata"]["description"])
        )
        # A turn's prompt is its history: the input length is the requests' own (the server's count), not input_len.
        assert load["standardized"]["input_seq_len"]["distribution"] == "other"
        assert load["standardized"]["output_seq_len"] == {"distribution": "fixed", "value": 32}
        args = load["native"]["args"]
        assert (args["turns"], args["num_conversations"], args["endpoint"]) == (4, 4, "/v1/chat/completions")
        assert "seed" not in args and "cache_salt" not in args  # each run's own
        pooled = load["native"]["config"]["runs_pooled"]
        assert [r["args"]["seed"] for r in pooled] == ([8, 9] if point == "c1" else [11, 12])
