"""Snapshots of vLLM's /metrics and what happened between two of them (probes/readers/metrics.py)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from probes.capture.timeline import kv_cache_figures, kv_cache_series, preemption_events
from probes.readers.metrics import (
    GENERATION_TOKENS,
    PROMPT_TOKENS,
    REQUEST_SUCCESS,
    GaugeSeries,
    Snapshot,
    counter_by_label,
    counter_sum,
    delta,
    find_gauges,
    find_histograms,
    find_samples,
    histogram_quantile,
    info_labels,
    parse_metrics,
    snapshot_from_text,
    summarize,
    to_json,
)

FIXTURE = "metrics-after-1-request.txt"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
ENGINE_LABELS = {"engine": "0", "model_name": "tiny-llama"}
INF = math.inf


# --- the real fixture: one 16-token completion on a fresh server -------------------------------------------------


def _fixture_text(d: Path) -> str:
    return (d / FIXTURE).read_text()


def _zero_state(after: Snapshot, monotonic_s: float, unix_s: float) -> Snapshot:
    """The fresh server's /metrics before its first request, constructed from the real fixture.

    Same families, series, labels, bucket bounds and `_created` timestamps (same process), with every counter and
    every histogram bucket, count and sum set to 0. Gauges are kept as they are: the fixture was taken with the
    server idle again (nothing running or waiting, KV cache empty), as it was before the request.
    """
    families = []
    for fam in after.families:
        if fam.type in ("counter", "histogram"):
            zeroed = tuple(s if s.name.endswith("_created") else dataclasses.replace(s, value=0.0) for s in fam.samples)
            fam = dataclasses.replace(fam, samples=zeroed)
        families.append(fam)
    return Snapshot(tuple(families), monotonic_s, unix_s)


@pytest.fixture
def one_request(vllm_cpu_fixtures: Path) -> tuple[Snapshot, Snapshot]:
    after = snapshot_from_text(_fixture_text(vllm_cpu_fixtures), 102.5, 1_795_942_270.0)
    return _zero_state(after, 100.0, 1_795_942_267.5), after


def _fixture_value(snapshot: Snapshot, name: str) -> float:
    (sample,) = find_samples(snapshot.samples, name)
    return sample.value


def test_fixture_window_counts_exactly_one_finished_request(one_request: tuple[Snapshot, Snapshot]) -> None:
    before, after = one_request
    d = delta(before, after)
    assert d.window_s == pytest.approx(2.5)
    assert d.reset_detected is False
    assert d.notes == ()
    assert counter_sum(d, REQUEST_SUCCESS) == 1
    assert counter_by_label(d, REQUEST_SUCCESS, "finished_reason") == {
        "stop": 0,
        "length": 1,
        "abort": 0,
        "error": 0,
        "repetition": 0,
    }
    assert counter_sum(d, REQUEST_SUCCESS, {"finished_reason": "length", **ENGINE_LABELS}) == 1
    assert counter_sum(d, PROMPT_TOKENS) == _fixture_value(after, PROMPT_TOKENS) == 3
    assert counter_sum(d, GENERATION_TOKENS) == _fixture_value(after, GENERATION_TOKENS) == 16
    assert all(c.delta == c.after and c.delta >= 0 and not c.reset_detected for c in d.counters)
    # Counters are the `_total` samples only; `_created` timestamps are neither counters nor gauges.
    assert all(c.name.endswith("_total") for c in d.counters)
    assert not [g for g in d.gauges if g.name.endswith("_created")]


def test_fixture_ttft_histogram_holds_the_one_observation(one_request: tuple[Snapshot, Snapshot]) -> None:
    d = delta(*one_request)
    (h,) = find_histograms(d, TTFT)
    assert h.labels == ENGINE_LABELS
    assert h.count == 1
    observed = _fixture_value(one_request[1], TTFT + "_sum")
    assert h.sum_s == pytest.approx(observed) and h.mean_s == pytest.approx(observed)
    assert 0.02 < observed <= 0.04
    by_bound = {b.le_s: b.cumulative_count for b in h.buckets}
    assert by_bound[0.02] == 0 and by_bound[0.04] == 1 and by_bound[INF] == 1
    assert h.buckets[-1].le_s == INF and len(h.buckets) == 23
    for q in (h.p50_s, h.p90_s, h.p99_s):
        assert q is not None and 0.02 < q <= 0.04
    # One observation in (0.02, 0.04]: rank q*1 interpolated across that bucket.
    assert h.p50_s == pytest.approx(0.03)
    assert h.p90_s == pytest.approx(0.038)
    assert h.p99_s == pytest.approx(0.0398)


def test_fixture_inter_token_latency_quantiles_span_two_buckets(one_request: tuple[Snapshot, Snapshot]) -> None:
    (h,) = find_histograms(delta(*one_request), ITL)
    # 15 inter-token gaps: 12 in (0, 0.01], 3 in (0.01, 0.025].
    assert h.count == 15
    assert h.mean_s == pytest.approx(0.135304423999969 / 15)
    assert h.p50_s == pytest.approx(0.01 * 7.5 / 12)
    assert h.p90_s == pytest.approx(0.01 + 0.015 * 1.5 / 3)
    assert h.p99_s == pytest.approx(0.01 + 0.015 * 2.85 / 3)


def test_fixture_only_seconds_histograms_are_windowed(one_request: tuple[Snapshot, Snapshot]) -> None:
    d = delta(*one_request)
    names = {h.name for h in d.histograms}
    assert {TTFT, ITL, "vllm:e2e_request_latency_seconds", "vllm:request_decode_time_seconds"} <= names
    assert all(n.endswith("_seconds") for n in names)
    assert "vllm:request_prompt_tokens" in d.skipped_histograms
    assert "vllm:iteration_tokens_total" in d.skipped_histograms


def test_fixture_gauges_at_both_ends(one_request: tuple[Snapshot, Snapshot]) -> None:
    d = delta(*one_request)
    (kv,) = find_gauges(d, "vllm:kv_cache_usage_perc")
    assert (kv.before, kv.after) == (0.0, 0.0)
    (running,) = find_gauges(d, "vllm:num_requests_running", ENGINE_LABELS)
    assert (running.before, running.after) == (0.0, 0.0)
    (info,) = find_gauges(d, "vllm:cache_config_info")
    assert info.after == 1.0 and info.labels["block_size"] == "32"


def test_fixture_summary_reads_as_the_window(one_request: tuple[Snapshot, Snapshot]) -> None:
    text = summarize(delta(*one_request))
    lines = text.splitlines()
    assert lines[0] == "window: 2.500 s (unix 1795942267.500 -> 1795942270.000)"
    assert "requests finished: 1 (length 1)" in lines
    assert "prompt tokens: 3" in lines
    assert "generation tokens: 16" in lines
    assert "preemptions: 0" in lines
    assert "prefix cache: 3 tokens queried, 0 hit, hit rate 0.0%" in lines
    assert "vllm:kv_cache_usage_perc: 0.0% -> 0.0%" in lines
    (ttft,) = [line for line in lines if line.startswith(TTFT)]
    assert ttft.split()[1:] == ["1", "31.66", "30.00", "38.00", "39.80"]
    (itl,) = [line for line in lines if line.startswith(ITL)]
    assert itl.split()[1:] == ["15", "9.02", "6.25", "17.50", "24.25"]
    assert "WARNING" not in text


def test_fixture_json_is_strict_json(one_request: tuple[Snapshot, Snapshot]) -> None:
    doc = json.loads(json.dumps(to_json(delta(*one_request)), allow_nan=False))
    assert doc["schema_version"] == 1
    assert doc["window_s"] == pytest.approx(2.5)
    (ttft,) = [h for h in doc["histograms"] if h["name"] == TTFT]
    assert ttft["count"] == 1 and ttft["p50_s"] == pytest.approx(0.03)
    assert ttft["buckets"][-1] == {"le_s": "+Inf", "cumulative_count": 1.0}
    (success,) = [
        c for c in doc["counters"] if c["name"] == REQUEST_SUCCESS and c["labels"]["finished_reason"] == "length"
    ]
    assert (success["before"], success["after"], success["delta"]) == (0.0, 1.0, 1.0)


def test_existing_parsers_still_read_the_fixture(vllm_cpu_fixtures: Path) -> None:
    text = _fixture_text(vllm_cpu_fixtures)
    samples = parse_metrics(text)
    (gen,) = find_samples(samples, GENERATION_TOKENS)
    assert gen.value == 16 and gen.labels == ENGINE_LABELS
    info = info_labels(text, "vllm:cache_config_info")
    assert info is not None and info["enable_prefix_caching"] == "True"
    assert len(snapshot_from_text(text, 0.0, 0.0).samples) == len(samples)


# --- histogram_quantile on hand-made buckets ---------------------------------------------------------------------


def test_quantile_interpolates_within_the_bucket() -> None:
    # 10 observations, all in (0.1, 0.2].
    buckets = [(0.1, 0.0), (0.2, 10.0), (0.5, 10.0), (INF, 10.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.15)
    assert histogram_quantile(0.9, buckets) == pytest.approx(0.19)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.199)
    assert histogram_quantile(1.0, buckets) == pytest.approx(0.2)
    # Order of the input does not matter.
    assert histogram_quantile(0.5, list(reversed(buckets))) == pytest.approx(0.15)


def test_quantile_lowest_bucket_starts_at_zero() -> None:
    assert histogram_quantile(0.5, [(1.0, 4.0), (INF, 4.0)]) == pytest.approx(0.5)


def test_quantile_across_buckets() -> None:
    # 5 in (0, 0.1], 5 in (0.1, 0.3]: the median is the top of the first bucket, p90 is 4/5 of the second.
    buckets = [(0.1, 5.0), (0.3, 10.0), (INF, 10.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.9, buckets) == pytest.approx(0.1 + 0.2 * 4 / 5)


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    # 4 observations above every finite bound, 1 below.
    buckets = [(0.1, 1.0), (0.2, 1.0), (INF, 5.0)]
    assert histogram_quantile(0.5, buckets) == 0.2
    assert histogram_quantile(0.99, buckets) == 0.2
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.05)


def test_quantile_of_nothing_is_none() -> None:
    assert histogram_quantile(0.5, [(0.1, 0.0), (0.2, 0.0), (INF, 0.0)]) is None
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(0.5, [(INF, 3.0)]) is None  # a single bucket says nothing about where
    assert histogram_quantile(0.5, [(0.1, 1.0), (0.2, 3.0)]) is None  # no +Inf bucket: Prometheus gives NaN


def test_quantile_outside_zero_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="outside"):
        histogram_quantile(1.5, [(0.1, 1.0), (INF, 1.0)])
    with pytest.raises(ValueError, match="outside"):
        histogram_quantile(0.0, [(0.1, 1.0), (INF, 1.0)])


# --- hand-made /metrics text ---------------------------------------------------------------------------------------


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _counter(name: str, series: list[tuple[dict[str, str], float]], created: list[float] | None = None) -> str:
    base = name.removesuffix("_total")
    # As prometheus_client exposes a counter in the text format: TYPE names the `_total` sample.
    lines = [f"# TYPE {name} counter"] + [f"{name}{_labels(lab)} {v}" for lab, v in series]
    if created is not None:
        lines.append(f"# TYPE {base}_created gauge")
        lines += [f"{base}_created{_labels(lab)} {c}" for (lab, _), c in zip(series, created, strict=True)]
    return "\n".join(lines) + "\n"


def _histogram(name: str, series: list[tuple[dict[str, str], list[tuple[str, float]], float]]) -> str:
    """series: (labels, [(le, cumulative count), ... ending with +Inf], sum)."""
    lines = [f"# TYPE {name} histogram"]
    for lab, buckets, total in series:
        lines += [f"{name}_bucket{_labels({**lab, 'le': le})} {n}" for le, n in buckets]
        lines += [f"{name}_count{_labels(lab)} {buckets[-1][1]}", f"{name}_sum{_labels(lab)} {total}"]
    return "\n".join(lines) + "\n"


def _gauge(name: str, value: float, labels: dict[str, str] | None = None) -> str:
    return f"# TYPE {name} gauge\n{name}{_labels(labels or ENGINE_LABELS)} {value}\n"


def _snap(text: str, t: float) -> Snapshot:
    return snapshot_from_text(text, t, 1_800_000_000.0 + t)


def test_counter_that_went_down_is_a_reset_not_a_negative_delta() -> None:
    before = _snap(
        _counter(PROMPT_TOKENS, [(ENGINE_LABELS, 1000.0)]) + _counter(GENERATION_TOKENS, [(ENGINE_LABELS, 5)]), 0
    )
    after = _snap(
        _counter(PROMPT_TOKENS, [(ENGINE_LABELS, 40.0)]) + _counter(GENERATION_TOKENS, [(ENGINE_LABELS, 9)]), 3
    )
    d = delta(before, after)
    assert d.reset_detected is True
    (prompt,) = [c for c in d.counters if c.name == PROMPT_TOKENS]
    assert (prompt.before, prompt.after, prompt.delta, prompt.reset_detected) == (1000.0, 40.0, 40.0, True)
    assert prompt.note is not None and "went down from 1000 to 40" in prompt.note and "restarted" in prompt.note
    (gen,) = [c for c in d.counters if c.name == GENERATION_TOKENS]
    assert (gen.delta, gen.reset_detected, gen.note) == (4.0, False, None)
    assert all(c.delta >= 0 for c in d.counters)
    assert "WARNING: the server restarted in the window" in summarize(d)


def test_counter_whose_created_timestamp_moved_is_a_reset_even_when_it_rose() -> None:
    before = _snap(_counter(PROMPT_TOKENS, [(ENGINE_LABELS, 10.0)], created=[1_700_000_000.0]), 0)
    after = _snap(_counter(PROMPT_TOKENS, [(ENGINE_LABELS, 25.0)], created=[1_700_000_900.0]), 1000)
    (c,) = delta(before, after).counters
    assert (c.delta, c.reset_detected) == (25.0, True)
    assert c.note is not None and "_created" in c.note


def test_unchanged_created_timestamp_is_no_reset() -> None:
    before = _snap(_counter(PROMPT_TOKENS, [(ENGINE_LABELS, 10.0)], created=[1_700_000_000.0]), 0)
    after = _snap(_counter(PROMPT_TOKENS, [(ENGINE_LABELS, 25.0)], created=[1_700_000_000.0]), 10)
    d = delta(before, after)
    (c,) = d.counters
    assert (c.delta, c.reset_detected, d.reset_detected) == (15.0, False, False)
    assert d.gauges == ()  # the `_created` gauge family is a timestamp, not a gauge


def test_process_restart_resets_every_series() -> None:
    def text(start: float, tokens: float, count: float) -> str:
        return (
            f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {start}\n"
            + _counter(PROMPT_TOKENS, [(ENGINE_LABELS, tokens)])
            + _histogram(TTFT, [(ENGINE_LABELS, [("0.1", count), ("+Inf", count)], 0.05 * count)])
        )

    d = delta(_snap(text(1_700_000_000.0, 10, 2), 0), _snap(text(1_700_000_500.0, 30, 3), 600))
    assert d.reset_detected is True
    (c,) = d.counters
    (h,) = d.histograms
    assert (c.delta, c.reset_detected) == (30.0, True)
    assert (h.count, h.reset_detected) == (3.0, True)
    assert any("restarted" in n for n in d.notes)


def test_series_that_appears_in_the_window_counts_from_zero() -> None:
    ok = {"handler": "/v1/completions", "status": "2xx"}
    bad = {"handler": "/v1/completions", "status": "4xx"}
    before = _snap(_counter("http_requests_total", [(ok, 7.0)]), 0)
    after = _snap(_counter("http_requests_total", [(ok, 9.0), (bad, 2.0)]), 1)
    d = delta(before, after)
    assert d.reset_detected is False
    new = next(c for c in d.counters if c.labels["status"] == "4xx")
    assert (new.before, new.delta, new.reset_detected, new.note) == (
        None,
        2.0,
        False,
        "series first seen in the window",
    )
    assert counter_sum(d, "http_requests_total") == 4.0


def test_series_that_disappears_is_left_out_with_a_note() -> None:
    other = {**ENGINE_LABELS, "model_name": "other"}
    before = _snap(_counter(PROMPT_TOKENS, [(ENGINE_LABELS, 5.0), (other, 3.0)]), 0)
    after = _snap(_counter(PROMPT_TOKENS, [(ENGINE_LABELS, 6.0)]), 1)
    d = delta(before, after)
    assert [c.labels["model_name"] for c in d.counters] == ["tiny-llama"]
    assert len(d.notes) == 1 and "other" in d.notes[0] and "absent after" in d.notes[0]


def test_histogram_delta_never_mixes_label_sets() -> None:
    a = {**ENGINE_LABELS, "model_name": "a"}
    b = {**ENGINE_LABELS, "model_name": "b"}
    before = _snap(
        _histogram(
            TTFT,
            [
                (a, [("0.1", 2.0), ("0.2", 2.0), ("+Inf", 2.0)], 0.1),
                (b, [("0.1", 0.0), ("0.2", 100.0), ("+Inf", 100.0)], 15.0),
            ],
        ),
        0,
    )
    after = _snap(
        _histogram(
            TTFT,
            [
                # a: 10 new observations in (0, 0.1]; b: 4 new ones above 0.2.
                (a, [("0.1", 12.0), ("0.2", 12.0), ("+Inf", 12.0)], 0.6),
                (b, [("0.1", 0.0), ("0.2", 100.0), ("+Inf", 104.0)], 17.0),
            ],
        ),
        5,
    )
    d = delta(before, after)
    (ha,) = find_histograms(d, TTFT, {"model_name": "a"})
    (hb,) = find_histograms(d, TTFT, {"model_name": "b"})
    assert ha.labels == a and hb.labels == b
    assert (ha.count, ha.sum_s, ha.mean_s) == pytest.approx((10.0, 0.5, 0.05))
    assert [x.cumulative_count for x in ha.buckets] == [10.0, 10.0, 10.0]
    assert ha.p50_s == pytest.approx(0.05)
    assert (hb.count, hb.sum_s, hb.mean_s) == pytest.approx((4.0, 2.0, 0.5))
    assert [x.cumulative_count for x in hb.buckets] == [0.0, 0.0, 4.0]
    assert hb.p50_s == 0.2  # all in +Inf: the highest finite bound
    assert not ha.reset_detected and not hb.reset_detected
    # The summary keeps them apart too, each line named by the label that differs.
    lines = summarize(d).splitlines()
    assert any(line.startswith(TTFT + '{model_name="a"}') and line.split()[1] == "10" for line in lines)
    assert any(line.startswith(TTFT + '{model_name="b"}') and line.split()[1] == "4" for line in lines)


def test_histogram_with_no_observations_in_the_window() -> None:
    text = _histogram(TTFT, [(ENGINE_LABELS, [("0.1", 3.0), ("+Inf", 3.0)], 0.2)])
    d = delta(_snap(text, 0), _snap(text, 1))
    (h,) = d.histograms
    assert (h.count, h.sum_s) == (0.0, 0.0)
    assert (h.mean_s, h.p50_s, h.p90_s, h.p99_s) == (None, None, None, None)
    doc = json.loads(json.dumps(to_json(d), allow_nan=False))
    assert doc["histograms"][0]["p99_s"] is None
    ttft = next(line for line in summarize(d).splitlines() if line.startswith(TTFT))
    assert ttft.split()[1:] == ["0", "-", "-", "-", "-"]


def test_histogram_whose_count_went_down_reports_since_the_restart() -> None:
    before = _snap(_histogram(TTFT, [(ENGINE_LABELS, [("0.1", 50.0), ("+Inf", 60.0)], 9.0)]), 0)
    after = _snap(_histogram(TTFT, [(ENGINE_LABELS, [("0.1", 2.0), ("+Inf", 2.0)], 0.1)]), 30)
    d = delta(before, after)
    (h,) = d.histograms
    assert (h.count, h.sum_s, h.reset_detected) == (2.0, 0.1, True)
    assert [x.cumulative_count for x in h.buckets] == [2.0, 2.0]
    assert h.note is not None and "restarted" in h.note
    assert d.reset_detected is True


def test_delta_refuses_snapshots_in_the_wrong_order() -> None:
    text = _counter(PROMPT_TOKENS, [(ENGINE_LABELS, 1.0)])
    with pytest.raises(ValueError, match="before"):
        delta(_snap(text, 10), _snap(text, 5))


def test_summary_prefix_cache_hit_rate_and_missing_counters() -> None:
    def text(queries: float, hits: float) -> str:
        return _counter("vllm:prefix_cache_queries_total", [(ENGINE_LABELS, queries)]) + _counter(
            "vllm:prefix_cache_hits_total", [(ENGINE_LABELS, hits)]
        )

    lines = summarize(delta(_snap(text(100, 50), 0), _snap(text(300, 150), 1))).splitlines()
    assert "prefix cache: 200 tokens queried, 100 hit, hit rate 50.0%" in lines
    assert "requests finished: n/a (not in /metrics)" in lines
    assert "latency: no vLLM latency histograms in /metrics" in lines


# --- gauges over a window ----------------------------------------------------------------------------------------


def _load(running: float, waiting: float, kv: float) -> str:
    return (
        _gauge("vllm:num_requests_running", running)
        + _gauge("vllm:num_requests_waiting", waiting)
        + _gauge("vllm:kv_cache_usage_perc", kv)
        + _gauge("process_open_fds", 42, {})
    )


def test_gauge_series_keeps_every_point_in_order() -> None:
    series = GaugeSeries()
    for t, (running, waiting, kv) in enumerate([(0, 0, 0.0), (8, 3, 0.5), (2, 0, 0.25)]):
        series.add(_snap(_load(running, waiting, kv), float(t)))
    (running_points,) = series.series("vllm:num_requests_running")
    assert running_points == [(0.0, 1_800_000_000.0, 0.0), (1.0, 1_800_000_001.0, 8.0), (2.0, 1_800_000_002.0, 2.0)]
    assert series.series("process_open_fds") == []  # not one of the load gauges asked for
    doc = json.loads(json.dumps(series.to_json(), allow_nan=False))
    assert doc["schema_version"] == 1
    (kv,) = [s for s in doc["series"] if s["name"] == "vllm:kv_cache_usage_perc"]
    assert kv["labels"] == ENGINE_LABELS
    assert [p["value"] for p in kv["points"]] == [0.0, 0.5, 0.25]
    assert kv["points"][1] == {"monotonic_s": 1.0, "unix_s": 1_800_000_001.0, "value": 0.5}
    assert (kv["min"], kv["max"]) == (0.0, 0.5)


def test_gauge_series_of_every_gauge_and_in_order_only() -> None:
    series = GaugeSeries(names=None)
    series.add(_snap(_load(1, 0, 0.1), 5.0))
    assert len(series.series("process_open_fds")) == 1
    with pytest.raises(ValueError, match="older"):
        series.add(_snap(_load(1, 0, 0.1), 4.0))


def test_gauge_series_from_the_fixture_skips_created_timestamps(vllm_cpu_fixtures: Path) -> None:
    series = GaugeSeries(names=None)
    series.add(snapshot_from_text(_fixture_text(vllm_cpu_fixtures), 1.0, 2.0))
    names = {name for name, _ in series.points}
    assert "vllm:kv_cache_usage_perc" in names and "process_resident_memory_bytes" in names
    assert not [n for n in names if n.endswith("_created")]


def test_kv_cache_figures_are_the_scrapes_mean_and_maximum_in_percent() -> None:
    snaps = [_snap(_load(r, 0, kv), float(t)) for t, (r, kv) in enumerate([(0, 0.0), (4, 0.5), (2, 0.25)])]
    assert kv_cache_figures(snaps) == {"kv_cache_usage_mean_pct": 25.0, "kv_cache_usage_max_pct": 50.0}
    assert kv_cache_figures([]) == {"kv_cache_usage_mean_pct": None, "kv_cache_usage_max_pct": None}


def test_the_kv_cache_series_and_the_preemption_marks_come_from_the_scrapes(vllm_cpu_fixtures: Path) -> None:
    # The real /metrics text, its two lines set to what each scrape of a busy engine would read.
    text = _fixture_text(vllm_cpu_fixtures)
    kv_line = 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.0'
    pre_line = 'vllm:num_preemptions_total{engine="0",model_name="tiny-llama"} 0.0'
    assert kv_line in text and pre_line in text

    def scrape(t: float, kv: float, preempted: int) -> Snapshot:
        at = text.replace(kv_line, kv_line.replace(" 0.0", f" {kv}")).replace(
            pre_line, pre_line.replace(" 0.0", f" {preempted}.0")
        )
        return snapshot_from_text(at, t, 1_800_000_000.0 + t)

    snaps = [scrape(100.0, 0.0, 0), scrape(101.0, 0.5, 0), scrape(102.0, 0.75, 3), scrape(103.0, 0.25, 3)]
    assert kv_cache_series(snaps, 100.0) == {"KV cache used": [(0.0, 0.0), (1.0, 50.0), (2.0, 75.0), (3.0, 25.0)]}
    assert preemption_events(snaps, 100.0) == [{"t_s": 2.0, "label": "preemptions +3"}]
    assert kv_cache_series([], 0.0) == {"KV cache used": []} and preemption_events(snaps[:1], 100.0) == []
