"""Workloads that look like production (issue 15): chat, shared prefix, prompts files, trace replay, Poisson and
bursty arrivals, SLOs and goodput, per-profile sizes, and the one-line refusals before any request is sent.

The `vllm bench serve` argv each dataset produces is checked against the flags vLLM 0.32's parser knows (its
dataset names and options, REFERENCE §4); the requests and the server's side are the real fixtures of
tests/fixtures/vllm-bench-serve-0.32.0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from serving.bench import conditions as bench_conditions
from serving.bench import protocol as bench
from serving.bench import runs as bench_runs
from serving.bench import text as bench_text
from serving.bench import workload_data as bench_data
from serving.bench.summary_schema import BenchSummary, PointSummary, Stat
from serving.config import workload
from serving.config.profile import load_profile
from serving.errors import InputError
from tests.helpers.bench_dirs import RUN, fixture
from tests.helpers.workload_files import serving_plan, write_workload


def argv_of(plan: dict[str, Any], i: int = 0) -> list[str]:
    return list(plan["client_plan"]["runs"][i]["argv"])


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


# --- the datasets and the API path ------------------------------------------------------------------------


def test_chat_goes_to_the_chat_endpoint_and_the_server_applies_the_template() -> None:
    p = bench.plan_bench(workload.load_workload("chat"), serving_plan(), "/o", "0-1", "0-1")
    argv = argv_of(p)
    assert flag(argv, "--backend") == "openai-chat" and flag(argv, "--endpoint") == "/v1/chat/completions"
    assert flag(argv, "--dataset-name") == "random" and "--ignore-eos" in argv
    # The SLO reaches vLLM too, so its own goodput sits beside ours.
    assert argv[argv.index("--goodput") + 1 : argv.index("--goodput") + 3] == ["ttft:500", "tpot:100"]
    assert p["files"] == []


def test_the_tiny_model_has_a_chat_template() -> None:
    # The chat workload is only real if the served model templates chat: the generator ships one.
    source = (Path(__file__).resolve().parents[3] / "images" / "vllm" / "tinymodel.py").read_text()
    assert "fast.chat_template = CHAT_TEMPLATE" in source and "add_generation_prompt" in source


def test_a_shared_prefix_is_vllms_prefix_repetition_and_its_hits_are_intended() -> None:
    w = workload.load_workload("shared-prefix")
    argv = argv_of(bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1"))
    assert flag(argv, "--dataset-name") == "prefix_repetition"
    assert flag(argv, "--prefix-repetition-prefix-len") == "256"
    assert flag(argv, "--prefix-repetition-suffix-len") == "32"
    assert flag(argv, "--prefix-repetition-num-prefixes") == "2"
    assert flag(argv, "--prefix-repetition-output-len") == "32"
    # The prefix is whole blocks of the CPU profile (32 tokens): shorter, it could never be served from the cache.
    assert w.prefix_len is not None and w.prefix_len >= 2 * (load_profile("cpu-tiny").vllm.block_size or 16)
    assert workload.intends_prefix_hits(w.model_dump(mode="json"))
    assert not workload.intends_prefix_hits(workload.load_workload("chat").model_dump(mode="json"))


def test_prefix_hits_are_flagged_unless_the_workload_intends_them() -> None:
    result, status, before, after = fixture("c1-m1")
    line = next(ln for ln in after.splitlines() if ln.startswith("vllm:prefix_cache_hits_total{"))
    hit_after = after.replace(line, line.rsplit(" ", 1)[0] + " 1.0e+06")
    random_w = workload.load_workload("smoke").model_dump(mode="json")
    shared_w = workload.load_workload("shared-prefix").model_dump(mode="json")
    flagged = bench_runs.summarize_run(RUN, status, result, before, hit_after, random_w)
    assert any(f.startswith("prefix-cache hits where none may be") for f in flagged["flags"])
    # The same hits in a shared-prefix workload are its point: no flag, and the hit rate is kept. (The fixture's
    # requests are 32 in / 32 out, so only the length check speaks; the hit flag must not.)
    intended = bench_runs.summarize_run(RUN, status, result, before, hit_after, shared_w)
    assert not any("prefix-cache hits" in f for f in intended["flags"])
    assert intended["prefix_cache_hit_rate"] is not None and intended["prefix_cache_hit_rate"] > 0


def test_a_prompts_file_is_sent_raw_so_the_server_templates_it_once(tmp_path: Path) -> None:
    w = workload.load_workload("sweep-004")
    assert w.prompts is not None and Path(w.prompts).is_absolute() and Path(w.prompts).is_file()
    p = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1")
    argv = argv_of(p)
    assert flag(argv, "--dataset-name") == "custom" and "--skip-chat-template" in argv
    assert flag(argv, "--dataset-path") == "/bench/data/short-prompts.jsonl"
    assert flag(argv, "--custom-output-len") == "128"
    assert p["files"] == [{"src": w.prompts, "name": "data/short-prompts.jsonl"}]
    assert p["manifest"]["workload_data"]["lines"] == 8 and len(p["manifest"]["workload_data"]["sha256"]) == 64
    assert [pt.id for pt in bench.points(w)] == ["c1", "c2", "c4"]


def test_a_trace_is_replayed_on_its_timestamps_with_every_line_given_blocks() -> None:
    w = workload.load_workload("trace")
    p = bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1")
    argv = argv_of(p)
    assert flag(argv, "--dataset-name") == "timed_trace"
    assert flag(argv, "--dataset-path") == "/bench/data/trace-sample.jsonl"
    assert flag(argv, "--num-prompts") == "24" and flag(argv, "--timed-trace-sec-multiplier") == "1.0"
    assert "--max-concurrency" not in argv and [r["point"] for r in p["client_plan"]["runs"]] == ["trace"] * 4
    data = p["manifest"]["workload_data"]
    assert data["requests"] == 24 and len(data["expected_output_lens"]) == 24 and not data["shared_blocks"]
    assert "content" not in data  # the canonical trace travels as a file, not in the manifest
    (shipped,) = p["files"]
    lines = [json.loads(x) for x in shipped["content"].splitlines()]
    source = workload.read_trace(w.trace or "")
    assert [x["timestamp"] for x in lines] == [x["timestamp"] for x in source]
    # vLLM sends an empty prompt for a line without hash_ids: each gets enough ids of its own.
    for line in lines:
        assert len(line["hash_ids"]) * 16 >= line["input_length"]
    ids = [i for line in lines for i in line["hash_ids"]]
    assert len(ids) == len(set(ids))
    # The client fixes Python's hash seed: vLLM seeds each block's tokens with hash(), so the prompts repeat.
    docker_argv = p["docker_argv"]
    assert docker_argv[docker_argv.index("--env") + 1] == "PYTHONHASHSEED=0"


def test_a_trace_whose_lines_share_blocks_intends_prefix_hits(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 32, "output_length": 4, "hash_ids": [1, 2]}\n'
        '{"timestamp": 0.5, "input_length": 32, "output_length": 4, "hash_ids": [1, 3]}\n'
    )
    w = workload.load_workload(str(write_workload(tmp_path, dataset="trace", trace="t.jsonl", concurrency=[])))
    data = bench_data.workload_data(w)
    assert data["shared_blocks"] and workload.intends_prefix_hits(w.model_dump(mode="json"), data)
    short = tmp_path / "s.jsonl"
    short.write_text('{"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]}\n')
    w2 = w.model_copy(update={"trace": str(short)})
    with pytest.raises(workload.TraceError, match="1 hash_ids of 16 tokens cover 16 tokens, input_length is 64"):
        bench_data.workload_data(w2)


def test_a_trace_lines_output_lengths_are_each_checked(tmp_path: Path) -> None:
    result, status, before, after = fixture("c1-m1")
    w = workload.load_workload("trace").model_dump(mode="json")
    n = len(result["output_lens"])
    data = {"requests": n, "expected_output_lens": [32] * n}
    s = bench_runs.summarize_run(RUN, status, result, before, after, w, data)
    assert not any("output length" in f or "requested" in f for f in s["flags"]), s["flags"]
    data["expected_output_lens"] = [32] * (n - 1) + [64]
    s = bench_runs.summarize_run(RUN, status, result, before, after, w, data)
    assert any("output length mismatch: 1 of" in f and "the trace's lengths" in f for f in s["flags"])


def test_poisson_and_bursty_arrivals_differ_only_in_burstiness() -> None:
    poisson, bursty = workload.load_workload("poisson"), workload.load_workload("bursty")
    a = argv_of(bench.plan_bench(poisson, serving_plan(), "/o", "0-1", "0-1"))
    b = argv_of(bench.plan_bench(bursty, serving_plan(), "/o", "0-1", "0-1"))
    assert flag(a, "--burstiness") == "1.0" and flag(b, "--burstiness") == "0.25"
    assert flag(a, "--request-rate") == "2.0" and "--max-concurrency" not in a
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    assert [a[i - 1] for i in diff] == ["--burstiness"]
    line = bench_text.workload_line(poisson.model_dump(mode="json"), None)
    assert "arrivals Poisson" in line
    assert "gamma, burstiness 0.25" in bench_text.workload_line(bursty.model_dump(mode="json"), None)


# --- the seeds' named workloads, sized per profile ----------------------------------------------------------


def test_the_seeds_baseline_is_shipped_as_the_source_wrote_it() -> None:
    w = workload.load_workload("baseline")
    argv = argv_of(bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1"), 1)
    assert flag(argv, "--random-input-len") == "1024" and flag(argv, "--random-output-len") == "256"
    assert flag(argv, "--num-prompts") == "16" and flag(argv, "--max-concurrency") == "1"
    assert flag(argv, "--request-rate") == "inf" and flag(argv, "--endpoint") == "/v1/completions"
    assert (w.seed, w.warmups, w.runs) == (7, 1, 3)


@pytest.mark.parametrize("profile", ["cpu-tiny", "cpu-tiny-tp2", "rtx3090-pp3", "rtxpro6000-tp8"])
def test_long_prompts_are_sized_per_profile_and_the_report_says_so(profile: str) -> None:
    plan = serving_plan(profile)
    if plan.launch is None:  # a GPU profile planned on a host without its facts: the sizing is still decided
        w, note = workload.sized_for(workload.load_workload("long"), profile)
    else:
        p = bench.plan_bench(workload.load_workload("long"), plan, "/o", "0-1", "0-1")
        w, note = workload.parse_workload(p["manifest"]["workload"], "m"), p["manifest"]["sized"]
    # A profile without max_model_len serves the model's own context (the TP=8 class): nothing to check here.
    context = load_profile(profile).vllm.max_model_len
    assert context is None or (w.input_len or 0) + (w.output_len or 0) <= context
    if profile.startswith("cpu-"):
        assert w.input_len == 1536 and note == "sized for " + profile + (
            ": input_len 37000 -> 1536 (the profile's context is 2048 tokens)"
        )
    else:
        assert w.input_len == 37000 and note is None


# --- bad input: one line, before any request ----------------------------------------------------------------


def test_lengths_beyond_the_profiles_context_are_refused_before_any_request(tmp_path: Path) -> None:
    w = workload.load_workload(str(write_workload(tmp_path, input_len=2000, output_len=100)))
    with pytest.raises(InputError) as err:
        bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1")
    assert str(err.value) == (
        "workload t: input_len 2000 + output_len 100 = 2100 tokens, beyond the profile's context (max_model_len "
        "2048): shorten them, give the workload a `sizes` entry for this profile, or deploy a profile with a longer "
        "context"
    )
    trace = tmp_path / "long.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 2040, "output_length": 16}\n')
    tw = workload.load_workload(str(write_workload(tmp_path, dataset="trace", trace=str(trace), concurrency=[])))
    with pytest.raises(InputError, match=r"its longest request needs 2056 tokens .*\(max_model_len 2048\)"):
        bench.plan_bench(tw, serving_plan(), "/o", "0-1", "0-1")


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (['{"timestamp": 1.0, "input_length": 8, "output_length": 4}',
          '{"timestamp": 0.5, "input_length": 8, "output_length": 4}'],
         "line 2: timestamp 0.5 is before the line above (1.0); sort the trace by time"),
        (['{"timestamp": -2, "input_length": 8, "output_length": 4}'],
         "line 1: timestamp -2 is negative; timestamps are seconds from the trace's start"),
        (['{"timestamp": 0, "input_length": 8}'],
         "line 1: no output_length (each line needs timestamp, input_length, output_length)"),
        (['{"timestamp": "soon", "input_length": 8, "output_length": 4}'],
         "line 1: timestamp 'soon' is not a number of seconds"),
        (['{"timestamp": 0, "input_length": 8.5, "output_length": 4}'],
         "line 1: input_length 8.5 must be a whole number of tokens, at least 1"),
        (["not json"], "line 1: not a JSON object"),
    ],
)  # fmt: skip
def test_a_bad_trace_is_one_line_naming_the_line(tmp_path: Path, lines: list[str], said: str) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    w = workload.load_workload(str(write_workload(tmp_path, dataset="trace", trace="bad.jsonl", concurrency=[])))
    with pytest.raises(workload.TraceError) as err:
        bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1")
    assert str(err.value) == f"trace {trace} {said}"
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("slo", "said"),
    [
        ({"ttft": 500}, "slo.ttft: Value error, 500 has no unit: write it as 500ms or 500s"),
        ({"tpot": "50 tokens"},
         "slo.tpot: Value error, '50 tokens' is not a duration in ms or s: write it as e.g. 500ms or 0.5s"),
        ({"e2e": "2m"}, "slo.e2e: Value error, '2m' is not a duration in ms or s: write it as e.g. 500ms or 0.5s"),
        ({"ttft_s": "1s"}, "slo.ttft_s: unknown key: remove it, or correct its spelling"),
    ],
)  # fmt: skip
def test_an_slo_in_the_wrong_unit_is_one_line(tmp_path: Path, slo: dict[str, Any], said: str) -> None:
    path = write_workload(tmp_path, input_len=8, output_len=4, slo=slo)
    with pytest.raises(workload.WorkloadError) as err:
        workload.load_workload(str(path))
    assert str(err.value) == f"{path}: {said}"


def test_slo_durations_read_in_ms() -> None:
    slo = workload.Slo(ttft="250ms", tpot="0.05s", e2e="2s")
    assert slo.thresholds_ms() == {"ttft_ms": 250.0, "tpot_ms": 50.0, "e2e_ms": 2000.0}


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"dataset": "trace", "concurrency": []}, "dataset trace needs trace"),
        ({"dataset": "shared_prefix", "input_len": 64, "output_len": 8}, "dataset shared_prefix needs prefix_len"),
        ({"dataset": "shared_prefix", "input_len": 64, "output_len": 8, "prefix_len": 64},
         "prefix_len 64 must be shorter than input_len 64 (each prompt adds its own)"),
        ({"dataset": "prompts", "prompts": "p.jsonl", "output_len": 8, "input_len": 8},
         "dataset prompts takes no input_len (its prompts' lengths come from elsewhere)"),
        ({"dataset": "trace", "trace": "t.jsonl"},
         "a trace is replayed on its own timestamps: give no concurrency or arrival_rates (concurrency: [])"),
        ({"dataset": "trace", "trace": "t.jsonl", "concurrency": [], "api": "chat"},
         "a trace replays token-id prompts, which only /v1/completions takes: api: completions"),
    ],
)  # fmt: skip
def test_a_dataset_without_its_fields_is_one_line(tmp_path: Path, fields: dict[str, Any], said: str) -> None:
    path = write_workload(tmp_path, **fields)
    with pytest.raises(workload.WorkloadError) as err:
        workload.load_workload(str(path))
    assert str(err.value) == f"{path}: {said}"


# --- SLOs and goodput ---------------------------------------------------------------------------------------


def test_goodput_counts_the_requests_meeting_every_slo_per_second_of_the_run() -> None:
    result, status, before, after = fixture("c4-m1")
    obs = bench_runs.parse_requests(result)
    ttfts = sorted(o.ttft_s * 1000 for o in obs if o.ttft_s is not None)
    # A TTFT limit between the 3rd and 4th fastest request: exactly 3 meet it.
    limit = (ttfts[2] + ttfts[3]) / 2
    w = {**workload.load_workload("smoke").model_dump(mode="json"), "slo": {"ttft": f"{limit:.6f}ms"}}
    s = bench_runs.summarize_run({**RUN, "id": "c4-m1", "point": "c4", "max_concurrency": 4}, status, result,
                                 before, after, w)  # fmt: skip
    slo = s["slo"]
    assert slo["met_all"] == 3 and slo["share_met"] == pytest.approx(3 / len(obs))
    assert slo["goodput_req_s"] == pytest.approx(3 / result["duration"])
    assert slo["share_met_each"] == {"ttft_ms": pytest.approx(3 / len(obs))}
    # vLLM's own goodput for the same SLO would be the same count over the same duration.
    assert math.isclose(slo["goodput_req_s"] * result["duration"], 3)


def test_a_failed_request_meets_no_slo() -> None:
    ok = bench_runs.RequestObs(0, True, 0.0, 8, 8, 8, 0.01, 0.1, 0.01, 100.0, (), "")
    failed = bench_runs.RequestObs(1, False, 0.1, 8, None, 0, None, None, None, None, (), "boom")
    got = bench_runs.slo_figures([ok, failed], 2.0, {"ttft": "1s", "e2e": "1s"})
    assert got["met_all"] == 1 and got["share_met"] == 0.5 and got["goodput_req_s"] == 0.5


def test_the_report_gives_goodput_and_the_share_that_met_the_slo(tmp_path: Path) -> None:
    # Only the parts the tables read: a summary built field by field, unvalidated.
    none = Stat(n=0, median=None, min=None, max=None)
    lines = bench_text._point_tables(
        BenchSummary.model_construct(
            manifest={"workload": {"slo": {"ttft": "1s", "min_share": 0.9}}},
            grouped_streaming=False,
            points=[
                PointSummary.model_construct(
                    point="r2", request_rate=2.0, max_concurrency=None, runs=3, runs_valid=3,
                    **{k: none for k in ("ttft_ms", "tpot_ms", "decode_tok_s", "e2el_ms", "chunk_interval_ms",
                                         "output_tok_s", "server_ttft_mean_ms", "server_tpot_mean_ms",
                                         "server_queue_mean_ms", "achieved_over_requested", "outstanding_max")},
                    request_s=Stat(n=3, median=2.0, min=1.9, max=2.0),
                    slo_share_met=Stat(n=3, median=0.95, min=0.9, max=1.0),
                    goodput_req_s=Stat(n=3, median=1.9, min=1.8, max=2.0),
                )
            ],
        )
    )  # fmt: skip
    text = "\n".join(lines)
    assert "SLO per request (ttft <= 1s; a load holds it when 90% of requests meet all)" in text
    row = next(ln for ln in lines if ln.strip().startswith("rate 2 req/s") and "0.95" in ln)
    assert "1.9 [1.8-2] n=3" in row and row.rstrip().endswith("yes")


# --- compare still reads old and new benches alike -----------------------------------------------------------


def test_a_manifest_from_before_these_fields_compares_with_a_new_one() -> None:
    new = bench.plan_bench(workload.load_workload("smoke"), serving_plan(), "/o", "0-1", "0-1")["manifest"]
    old = json.loads(json.dumps(new))
    for key in ("api", "prefix_len", "num_prefixes", "prompts", "trace", "trace_time_scale", "trace_block_tokens",
                "slo", "sizes", "page_cache"):  # fmt: skip
        old["workload"].pop(key)
    old.pop("workload_data")
    ca, cb = bench_conditions.conditions(old), bench_conditions.conditions(new)
    assert ca == cb
    other = json.loads(json.dumps(new))
    other["workload"]["api"] = "chat"
    assert [k for k in cb if cb[k] != bench_conditions.conditions(other).get(k)] == ["workload.api"]


def test_poisson_arrivals_report_the_achieved_rate_but_only_even_ones_are_judged_by_it() -> None:
    # 11 arrivals 0.5 s apart (2 req/s achieved) against 4 req/s requested: evenly spaced, the client fell behind;
    # drawn (Poisson), a short run's achieved rate misses the requested one by chance.
    obs = [bench_runs.RequestObs(i, True, i * 0.5, 8, 4, 4, 0.01, 0.1, 0.03, 33.0, (), "") for i in range(11)]
    result = {"ttfts": [0.01] * 11, "latencies": [0.1] * 11, "output_lens": [4] * 11, "errors": [""] * 11,
              "start_times": [o.start_s for o in obs], "input_lens": [8] * 11, "itls": [[0.03] * 3] * 11,
              "duration": 5.2}  # fmt: skip
    run = {**RUN, "id": "r4-m1", "point": "r4", "max_concurrency": None, "request_rate": 4.0}
    base = {**workload.load_workload("smoke").model_dump(mode="json"), "num_prompts": 11, "output_len": 4}
    even = bench_runs.summarize_run(run, {"status": "ok"}, result, None, None, {**base, "burstiness": None})
    drawn = bench_runs.summarize_run(run, {"status": "ok"}, result, None, None, {**base, "burstiness": 1.0})
    assert any("the client did not sustain it" in f for f in even["flags"])
    assert not any("sustain" in f for f in drawn["flags"])
    assert drawn["achieved_over_requested"] == pytest.approx(0.5)


def test_a_rate_search_of_drawn_arrivals_is_refused(tmp_path: Path) -> None:
    w = workload.load_workload(str(write_workload(tmp_path, input_len=8, output_len=4, burstiness=1.0,
                                                  slo={"ttft": "1s"})))  # fmt: skip
    with pytest.raises(InputError, match=r"burstiness 1\), .* search with evenly spaced arrivals"):
        bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="rate")
    # A concurrency search does not send at a rate: drawn arrivals do not matter there.
    assert bench.plan_bench(w, serving_plan(), "/o", "0-1", "0-1", search="concurrency")["client_plan"]["search"]


def test_a_run_whose_wall_clock_stepped_is_flagged() -> None:
    # The trace replay seen here: 8.38 s on CLOCK_MONOTONIC, 11.12 s on the wall clock, requests sent 2.7 s early.
    result, status, before, after = fixture("c1-m1")
    w = workload.load_workload("smoke").model_dump(mode="json")
    stepped = {
        **status, "started_mono_s": 5838.771729894, "ended_mono_s": 5847.150123946,
        "started_wall": "2026-12-03T11:43:47.185101+00:00", "ended_wall": "2026-12-03T11:43:58.301326+00:00",
    }  # fmt: skip
    s = bench_runs.summarize_run(RUN, stepped, result, before, after, w)
    assert s["wall_clock_step_s"] == pytest.approx(2.738, abs=0.001) and not s["valid"]
    assert any(f.startswith("the wall clock stepped +2.74 s during the run") for f in s["flags"])
    steady = {**stepped, "ended_wall": "2026-12-03T11:43:55.563495+00:00"}  # 8.378 s on both clocks
    assert not any("wall clock" in f for f in bench_runs.summarize_run(RUN, steady, result, before, after, w)["flags"])
