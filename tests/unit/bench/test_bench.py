"""serving.bench.protocol: workloads, the client's placement and plan, per-request figures, flags and statistics.

The per-request parser is checked against real `vllm bench serve` results (tests/fixtures/vllm-bench-serve-0.32.0):
with one token per chunk, the source's definitions must give exactly the medians vLLM itself printed.
"""

from __future__ import annotations

import copy
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from serving.bench import conditions as bench_conditions
from serving.bench import placement as bench_placement
from serving.bench import protocol as bench
from serving.bench import reference as bench_reference
from serving.bench import runs as bench_runs
from serving.bench import stats
from serving.config import workload
from serving.config.profile import FrontDoor, load_profile
from serving.errors import InputError
from serving.plan.plan import plan_from_profile
from serving.plan.render import API_SOCKET
from tests.helpers.bench_dirs import RUN, SMOKE, fixture, serving_plan

# --- workloads ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", workload.known_workloads())
def test_every_shipped_workload_loads(name: str) -> None:
    w = workload.load_workload(name)
    assert w.name == name
    assert bench.points(w)


def test_default_workload_is_the_source_protocol() -> None:
    w = workload.load_workload("default")
    assert (w.warmups, w.runs, w.concurrency) == (1, 3, [1, 2, 4])


def test_unknown_workload_names_the_known_ones() -> None:
    with pytest.raises(workload.WorkloadError, match=r"unknown workload 'nope': known workloads are .*default.*smoke"):
        workload.load_workload("nope")


def test_workload_with_a_misspelled_key_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "w.yaml"
    p.write_text("schema_version: 1\nname: w\ninput_len: 8\noutput_len: 8\nnum_prompts: 2\nconcurency: [1]\n")
    with pytest.raises(workload.WorkloadError, match="concurency: unknown key: remove it, or correct its spelling"):
        workload.load_workload(str(p))


def test_workload_with_a_yaml_syntax_error_is_one_line_with_line_and_column(tmp_path: Path) -> None:
    p = tmp_path / "w.yaml"
    p.write_text("schema_version: 1\nname: w\nconcurrency: [1, 4\nnum_prompts: 2\n")
    with pytest.raises(workload.WorkloadError) as err:
        workload.load_workload(str(p))
    assert str(err.value) == (
        f"{p}:4:12: YAML syntax error: expected ',' or ']', but got ':' (while parsing a flow sequence at line 3)"
    )


def test_workload_needs_a_point_and_two_output_tokens() -> None:
    base = {"schema_version": 1, "name": "w", "input_len": 8, "output_len": 8, "num_prompts": 2}
    with pytest.raises(workload.WorkloadError, match="at least one concurrency level or one arrival rate"):
        workload.parse_workload({**base, "concurrency": [], "arrival_rates": []})
    with pytest.raises(workload.WorkloadError, match="output_len"):
        workload.parse_workload({**base, "output_len": 1})
    with pytest.raises(workload.WorkloadError, match="arrival rates must be finite"):
        workload.parse_workload({**base, "arrival_rates": [0.0]})


# --- placement ---------------------------------------------------------------------------------------------


def test_client_goes_outside_the_servers_cpus() -> None:
    p = bench_placement.place_client("0-7", "0-5")
    assert (p.client_cpus, p.shares_server_cpus) == ("6-7", False)


def test_client_shares_when_the_host_has_no_other_cpu_and_says_so() -> None:
    p = bench_placement.place_client("0-1", "0-1")
    assert p.client_cpus == "0-1"
    assert p.shares_server_cpus
    assert "shares the server's CPUs" in p.note


def test_client_cpus_override_must_be_online() -> None:
    assert bench_placement.place_client("0-7", "0-5", "7").client_cpus == "7"
    with pytest.raises(InputError, match="CPUs 9 are not online"):
        bench_placement.place_client("0-7", "0-5", "7,9")


# --- the plan ----------------------------------------------------------------------------------------------


def test_plan_runs_each_point_with_warmups_first_and_its_own_seed() -> None:
    plan = bench.plan_bench(SMOKE, serving_plan(), "/tmp/out", "0-1", "0-1", seed_offset=5000)
    runs = plan["client_plan"]["runs"]
    assert [r["id"] for r in runs] == ["c1-w1", "c1-m1", "c1-m2", "c4-w1", "c4-m1", "c4-m2"]
    seeds = [r["seed"] for r in runs]
    assert seeds == list(range(5007, 5013))
    argv = runs[4]["argv"]
    for flag, value in (
        ("--max-concurrency", "4"),
        ("--request-rate", "inf"),
        ("--seed", "5011"),
        ("--random-output-len", "32"),
        ("--model", "tiny-llama"),
        ("--tokenizer", "/models/tiny-llama"),
    ):
        assert argv[argv.index(flag) + 1] == value
    assert "--ignore-eos" in argv and "--save-detailed" in argv
    docker = plan["docker_argv"]
    assert docker[docker.index("--cpuset-cpus") + 1] == "0-1"
    assert "/var/lib/refdeploy/models/tiny-llama:/models/tiny-llama:ro" in docker
    assert plan["manifest"]["client"]["shares_server_cpus"] is True
    assert plan["manifest"]["seed_offset"] == 5000


def test_arrival_rate_points_have_no_concurrency_cap() -> None:
    w = workload.load_workload("arrival")
    runs = bench.client_runs(w, "http://127.0.0.1:8000", "m", "/t")
    r2 = next(r for r in runs if r["point"] == "r2")
    assert "--max-concurrency" not in r2["argv"]
    assert r2["argv"][r2["argv"].index("--request-rate") + 1] == "2.0"
    assert r2["argv"][r2["argv"].index("--burstiness") + 1] == "inf"


def test_each_run_gets_its_own_cache_salt_unless_caching_is_off() -> None:
    assert bench.cache_salt_for(SMOKE.model_copy(update={"prefix_cache": "off"}), 1e9) is None
    salt = bench.cache_salt_for(SMOKE, 1_795_000_000)
    assert salt == "refdeploy-bench-1795000000"
    runs = bench.client_runs(SMOKE, "http://127.0.0.1:8000", "m", "/t", cache_salt=salt)
    bodies = [json.loads(r["argv"][r["argv"].index("--extra-body") + 1]) for r in runs]
    assert bodies[0] == {"cache_salt": "refdeploy-bench-1795000000-c1-w1"}
    assert len({b["cache_salt"] for b in bodies}) == len(runs)
    assert "--extra-body" not in bench.client_runs(SMOKE, "u", "m", "/t")[0]["argv"]


def test_conditions_see_a_profile_setting_and_ignore_names() -> None:
    a = bench.plan_bench(SMOKE, serving_plan(), "/o", "0-1", "0-1")["manifest"]
    b = bench.plan_bench(SMOKE, serving_plan(max_num_seqs=1), "/o", "0-1", "0-1")["manifest"]
    b["profile"]["name"] = "renamed"
    b["workload"]["runs"] = a["workload"]["runs"] + 2  # a bigger sample of the same workload
    ca, cb = bench_conditions.conditions(a), bench_conditions.conditions(b)
    assert [k for k in ca if ca[k] != cb.get(k)] == ["profile.vllm.max_num_seqs"]


# --- per-request figures, on real results --------------------------------------------------------------------


@pytest.mark.parametrize("run", ["c1-m1", "c4-m1"])
def test_definitions_reproduce_vllms_own_medians(run: str) -> None:
    result, _, _, _ = fixture(run)
    obs = bench_runs.parse_requests(result)
    assert len(obs) == 8 and all(o.success for o in obs)
    assert all(o.output_tokens == 32 and o.chunks == 32 for o in obs)
    tpot = statistics.median(o.tpot_s for o in obs if o.tpot_s is not None) * 1000
    ttft = statistics.median(o.ttft_s for o in obs if o.ttft_s is not None) * 1000
    assert tpot == pytest.approx(result["median_tpot_ms"], rel=1e-9)
    assert ttft == pytest.approx(result["median_ttft_ms"], rel=1e-9)
    o = obs[0]
    assert o.decode_tok_s == pytest.approx(31 / (o.e2el_s - o.ttft_s))  # type: ignore[operator]


def test_a_clean_run_has_no_flags_and_the_server_agrees_on_tokens() -> None:
    result, status, before, after = fixture("c1-m1")
    s = bench_runs.summarize_run(RUN, status, result, before, after, SMOKE.model_dump())
    assert s["flags"] == [] and s["valid"]
    assert s["server"]["generation_tokens"] == 256 == s["output_tokens"]
    assert s["server"]["prefix_cache_hits"] == 0
    assert s["grouped_streaming"] is False
    assert s["outstanding"]["max"] == 1.0
    assert s["tpot_ms"]["n"] == 8


def test_output_length_mismatch_is_flagged() -> None:
    result, status, before, after = fixture("c1-m1")
    short = copy.deepcopy(result)
    short["output_lens"][3] = 17
    s = bench_runs.summarize_run(RUN, status, short, before, after, SMOKE.model_dump())
    assert any("output length mismatch: 1 of 8 requests returned [17] tokens, 32 requested" in f for f in s["flags"])
    assert not s["valid"]


def _buffered(result: dict[str, Any]) -> dict[str, Any]:
    """The run as the client saw it when a stream arrived in one burst: every token at the request's end."""
    burst = copy.deepcopy(result)
    for i, itls in enumerate(burst["itls"]):
        burst["ttfts"][i] = burst["latencies"][i] - 1e-6 * len(itls)
        burst["itls"][i] = [1e-6] * len(itls)
    return burst


def test_a_stream_that_reached_the_client_in_a_burst_is_flagged_against_the_servers_tpot() -> None:
    result, status, before, after = fixture("c1-m1")
    s = bench_runs.summarize_run(RUN, status, _buffered(result), before, after, SMOKE.model_dump())
    assert not s["valid"]
    tpot, ttft = s["flags"]
    assert tpot.startswith("buffered stream: the client's TPOT median 0.001 ms is under 50% of the server's 9.1 ms")
    assert "(vllm:request_time_per_output_token_seconds)" in tpot
    # Its first token reached the client with the last: late against the server's TTFT too.
    assert re.match(r"buffered stream: the client's TTFT median [\d.]+ ms is [\d.]+ ms after the server's mean", ttft)
    assert "(vllm:time_to_first_token_seconds; tolerance 50 ms and 2x)" in ttft
    # The clean run's client TPOT is the server's to within a few percent: nothing flagged.
    clean = bench_runs.summarize_run(RUN, status, result, before, after, SMOKE.model_dump())
    assert clean["flags"] == []
    assert 0.9 < clean["tpot_ms"]["median"] / clean["server"]["tpot"]["mean_ms"] < 1.1


def test_a_first_token_that_reached_the_client_late_is_flagged_against_the_servers_ttft() -> None:
    """A stream held before its first chunk (an API server behind its engine, a buffering proxy): every chunk after
    it keeps its pace, so the TPOT check cannot see it; TTFT against the server's histogram does."""
    result, status, before, after = fixture("c1-m1")
    late = copy.deepcopy(result)
    late["ttfts"] = [t + 0.120 for t in late["ttfts"]]
    late["latencies"] = [x + 0.120 for x in late["latencies"]]
    s = bench_runs.summarize_run(RUN, status, late, before, after, SMOKE.model_dump())
    (flag,) = s["flags"]
    assert flag.startswith("buffered stream: the client's TTFT median ") and not s["valid"]
    # Within the tolerance (50 ms later): a client's own HTTP and queueing, not flagged.
    near = copy.deepcopy(result)
    near["ttfts"] = [t + 0.030 for t in near["ttfts"]]
    near["latencies"] = [x + 0.030 for x in near["latencies"]]
    assert bench_runs.summarize_run(RUN, status, near, before, after, SMOKE.model_dump())["flags"] == []


def test_grouped_chunks_are_not_called_itl() -> None:
    result, status, before, after = fixture("c1-m1")
    grouped = copy.deepcopy(result)
    grouped["itls"][0] = grouped["itls"][0][:15]  # 16 chunks (15 intervals) for 32 tokens
    s = bench_runs.summarize_run(RUN, status, grouped, before, after, SMOKE.model_dump())
    assert s["grouped_streaming"] is True and s["grouped_requests"] == 1
    assert s["tokens_per_chunk"]["max"] == pytest.approx(32 / 16)


def test_prefix_cache_hits_and_a_failed_run_are_flagged() -> None:
    result, status, before, after = fixture("c1-m1")
    hit_after = after.replace(
        next(ln for ln in after.splitlines() if ln.startswith("vllm:prefix_cache_hits_total{")),
        next(ln for ln in after.splitlines() if ln.startswith("vllm:prefix_cache_hits_total{")).rsplit(" ", 1)[0]
        + " 1.0e+06",
    )
    s = bench_runs.summarize_run(RUN, status, result, before, hit_after, SMOKE.model_dump())
    assert any(f.startswith("prefix-cache hits where none may be") for f in s["flags"])
    failed = bench_runs.summarize_run(
        RUN, {"status": "failed", "reason": "server gone"}, None, before, None, SMOKE.model_dump()
    )
    assert failed["status"] == "failed" and not failed["valid"]
    assert "run failed: server gone" in failed["flags"]


def test_arrival_rate_achieved_and_outstanding() -> None:
    obs = [
        bench_runs.RequestObs(i, True, i * 0.5, 8, 8, 8, 0.01, 0.9, 0.1, 10.0, (), "")  # 2 req/s, each 0.9 s long
        for i in range(11)
    ]
    assert bench_runs.achieved_rate(obs) == pytest.approx(2.0)
    out = bench_runs.outstanding(obs)
    assert out["max"] == 2.0
    assert out["mean"] is not None and 1.5 < out["mean"] < 2.0
    run = {**RUN, "request_rate": 4.0}
    result = {
        "ttfts": [0.01] * 11,
        "latencies": [0.9] * 11,
        "errors": [""] * 11,
        "output_lens": [32] * 11,
        "itls": [[0.01] * 31] * 11,
        "start_times": [100 + i * 0.5 for i in range(11)],
        "duration": 6.0,
    }
    evenly = {**SMOKE.model_dump(), "num_prompts": 11, "burstiness": None}  # .inf, as a manifest's JSON holds it
    s = bench_runs.summarize_run(run, {"status": "ok"}, result, None, None, evenly)
    assert s["achieved_over_requested"] == pytest.approx(0.5)
    assert any("the client did not sustain it" in f for f in s["flags"])


# --- statistics ----------------------------------------------------------------------------------------------


def test_describe() -> None:
    assert stats.describe([3.0, None, 1.0, 2.0, math.nan]) == {"n": 3, "median": 2.0, "min": 1.0, "max": 3.0}
    assert stats.describe([])["n"] == 0


def test_bootstrap_same_data_spans_zero_and_a_shift_does_not() -> None:
    a = [[10.0 + 0.1 * i for i in range(20)] for _ in range(3)]
    est, lo, hi = stats.bootstrap_diff(a, a)
    assert est == 0 and lo <= 0 <= hi
    b = [[x + 5 for x in r] for r in a]
    est, lo, hi = stats.bootstrap_diff(a, b)
    assert est == pytest.approx(5) and 0 < lo <= hi


def test_bootstrap_carries_run_to_run_spread() -> None:
    # Each run is tight but the runs disagree: resampling requests alone would call this a difference.
    a = [[10.0] * 30, [12.0] * 30, [11.0] * 30]
    b = [[11.5] * 30, [10.5] * 30, [12.5] * 30]
    _, lo, hi = stats.bootstrap_diff(a, b)
    assert lo <= 0 <= hi


def test_weight_read_bound_of_the_rtx3090_class() -> None:
    bound = bench_reference.weight_read_bound(
        {"reference": {"weight_bytes_per_token_gb": 5.83, "memory_bandwidth_gb_s": 936}}
    )
    assert bound is not None
    assert bound["ms_per_token"] == pytest.approx(6.23, abs=0.01)
    assert bench_reference.weight_read_bound(None) is None


def test_several_benches_per_side_resample_benches() -> None:
    """The c1 TPOT run medians (ms) of four back-to-back benches of one deploy here, A/B/A/B (2026-11-29):
    runs agree inside each bench, benches drift apart. The bench level widens the interval by that drift."""

    def runs(*medians: float) -> list[list[float]]:
        return [[m - 0.2, m - 0.1, m, m, m + 0.1, m + 0.2] for m in medians]

    a = [runs(9.75, 9.18, 8.14), runs(7.36, 7.81, 6.84)]
    b = [runs(9.6, 9.61, 9.03), runs(9.94, 11.37, 10.43)]
    _, run_lo, run_hi = stats.bootstrap_diff([r for x in a for r in x], [r for x in b for r in x])
    _, lo, hi = stats.bootstrap_diff_benches(a, b)
    assert lo < run_lo and hi > run_hi
    # Benches that overlap: no measurable difference; a real shift on top of the drift: still seen.
    _, lo, hi = stats.bootstrap_diff_benches(a, [b[0], a[1]])
    assert lo <= 0 <= hi
    far = [[[x + 20 for x in r] for r in bench_runs] for bench_runs in b]
    _, lo, _ = stats.bootstrap_diff_benches(a, far)
    assert lo > 0


def test_t_quantiles_match_the_published_table() -> None:
    for p, df, t in ((0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 10, 2.228), (0.9975, 2, 14.089),
                     (0.995, 10, 3.169), (0.975, 1000, 1.962)):  # fmt: skip
        assert stats.t_quantile(p, df) == pytest.approx(t, abs=1e-3), (p, df)
    with pytest.raises(ValueError):
        stats.t_quantile(0.975, 0.5)


def test_welch_interval_over_bench_medians() -> None:
    assert stats.welch_interval([9.2], [9.6, 10.4]) is None  # one bench: no spread between benches to judge by
    est, lo, hi = stats.welch_interval([9.18, 7.36], [9.61, 10.43])  # type: ignore[misc]
    assert est == pytest.approx(1.75) and lo < 0 < hi  # two a side: wide, as it should be
    est, lo, hi = stats.welch_interval([1.0, 1.1, 0.9], [5.0, 5.1, 4.9])  # type: ignore[misc]
    assert est == pytest.approx(4.0) and 3.5 < lo < hi < 4.5


def test_a_bench_through_a_proxy_sends_there_and_the_proxy_is_a_condition() -> None:
    direct = bench.plan_bench(SMOKE, serving_plan(), "/o", "0-1", "0-1")
    proxied = bench.plan_bench(SMOKE, serving_plan(), "/o", "0-1", "0-1", via="127.0.0.1:18080")
    argv = proxied["client_plan"]["runs"][0]["argv"]
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:18080" == proxied["client_plan"]["base_url"]
    ca, cb = bench_conditions.conditions(direct["manifest"]), bench_conditions.conditions(proxied["manifest"])
    assert [k for k in ca if ca[k] != cb.get(k)] == ["via"]
    with pytest.raises(InputError, match="bench_via='http://x': give host:port"):
        bench.plan_bench(SMOKE, serving_plan(), "/o", "0-1", "0-1", via="http://x")
    # The client's own reads of the server (/health, /metrics, the cache reset) go to the server's socket, not the
    # proxy; the requests too where nothing is in between.
    assert proxied["client_plan"]["server_url"] == direct["client_plan"]["base_url"] == "http://localhost"
    assert proxied["client_plan"]["server_socket"] == direct["client_plan"]["server_socket"] == API_SOCKET
    assert (direct["client_plan"]["requests_socket"], proxied["client_plan"]["requests_socket"]) == (API_SOCKET, None)
    assert proxied["client_plan"]["ca_file"] is None and proxied["front_cert"] == ""


def test_a_keyed_deploy_sends_through_a_proxy_only_over_tls() -> None:
    keyed = plan_from_profile(load_profile("cpu-tiny"), "localhost", {"hostname": "localhost", "served_files": ""},
                              api_key_file="/etc/refdeploy/api-key")  # fmt: skip
    with pytest.raises(InputError) as e:
        bench.plan_bench(SMOKE, keyed, "/o", "0-1", "0-1", via="proxy.example:3128")
    assert str(e.value) == (
        "bench_via=proxy.example:3128: this deploy has an API key, which would go to proxy.example:3128 over plain "
        "HTTP: use VIA=front (the front door, TLS) or VIA=https://proxy.example:3128 (a proxy that terminates TLS)"
    )
    tls = bench.plan_bench(SMOKE, keyed, "/o", "0-1", "0-1", via="https://proxy.example:3128")
    assert tls["client_plan"]["base_url"] == "https://proxy.example:3128" and tls["manifest"]["via"] == (
        "https://proxy.example:3128"
    )
    with pytest.raises(InputError, match="give host:port"):
        bench.plan_bench(SMOKE, keyed, "/o", "0-1", "0-1", via="https://")


def test_a_bench_through_the_front_door_checks_its_tls_and_the_door_is_a_condition() -> None:
    base = serving_plan()
    profile = base.profile.model_copy(update={"front_door": FrontDoor(listen="0.0.0.0")})
    plan = plan_from_profile(profile, "localhost", {"hostname": "localhost", "served_files": ""})
    direct = bench.plan_bench(SMOKE, plan, "/o", "0-1", "0-1")
    front = bench.plan_bench(SMOKE, plan, "/o", "0-1", "0-1", via="front")
    argv = front["client_plan"]["runs"][0]["argv"]
    assert argv[argv.index("--base-url") + 1] == "https://127.0.0.1:8443" == front["client_plan"]["base_url"]
    # The server itself on its socket; the requests through the door, whose certificate (copied by the bench role)
    # is checked.
    assert front["client_plan"]["server_url"] == direct["client_plan"]["base_url"] == "http://localhost"
    assert front["client_plan"]["server_socket"] == API_SOCKET and front["client_plan"]["requests_socket"] is None
    assert front["client_plan"]["ca_file"] == "/bench/front-door-cert.pem"
    assert front["front_cert"] == "/var/lib/refdeploy/secrets/refdeploy-vllm-front/cert.pem"
    ca, cb = bench_conditions.conditions(direct["manifest"]), bench_conditions.conditions(front["manifest"])
    assert [k for k in ca if ca[k] != cb.get(k)] == ["via"]
    assert cb["via"] == "front door https://127.0.0.1:8443"
    with pytest.raises(InputError, match="bench_via=front: profile cpu-tiny has no front door"):
        bench.plan_bench(SMOKE, serving_plan(), "/o", "0-1", "0-1", via="front")
