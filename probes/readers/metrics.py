"""vLLM's Prometheus `/metrics`: parse it, snapshot it, and say what happened between two snapshots.

vLLM's counters and histograms are cumulative since the server started, so one scrape says little about
one slow request or one benchmark run. Take a `Snapshot` before and after the interval, and `delta` gives
what happened in the window: counter increases, histogram observations bucket by bucket with quantiles
estimated as Prometheus' `histogram_quantile` does, and the gauges at both ends. `GaugeSeries` keeps
gauges sampled repeatedly during a window. `summarize` prints the figures an SRE asks for first;
`to_json` is the artifact. Parsing is prometheus_client's parser throughout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

SCHEMA_VERSION = 1

# The latency histograms `summarize` reports, in the order a request meets them (REFERENCE §3).
LATENCY_HISTOGRAMS = (
    "vllm:request_queue_time_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
)
# The gauges that say how loaded the engine is; `GaugeSeries` samples these unless told otherwise.
LOAD_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
REQUEST_SUCCESS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"  # tokens looked up in the prefix cache
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"  # of those, tokens found
# The API server's own start time (prometheus_client's process collector): if it moves, the server restarted.
PROCESS_START = "process_start_time_seconds"

# Families whose `<name>_created` gauge is a creation timestamp, not a gauge of its own.
_CUMULATIVE_TYPES = ("counter", "histogram", "summary")
_CREATED = "_created"

LabelKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    return samples


def find_samples(samples: list[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.name == name]


def info_labels(text: str, name: str) -> dict[str, str] | None:
    """Labels of an info-style gauge (value 1), e.g. vllm:cache_config_info; None when absent."""
    found = find_samples(parse_metrics(text), name)
    return dict(found[0].labels) if found else None


# --- snapshots -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricFamily:
    """One `# TYPE` family as prometheus_client's parser reports it (a counter's name lacks `_total`)."""

    name: str
    type: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Snapshot:
    """One scrape of `/metrics` and when it was taken.

    `taken_monotonic_s` is `time.monotonic()` on the machine that scraped, read when the response arrived;
    only differences between snapshots from the same scraping process mean anything. `taken_unix_s` is
    `time.time()` at the same moment, to place the window among logs.
    """

    families: tuple[MetricFamily, ...]
    taken_monotonic_s: float
    taken_unix_s: float
    schema_version: int = SCHEMA_VERSION

    @property
    def samples(self) -> list[Sample]:
        return [s for f in self.families for s in f.samples]


def snapshot_from_text(text: str, monotonic_s: float, unix_s: float) -> Snapshot:
    """Parse `/metrics` text (Prometheus text format) into a `Snapshot` taken at the given times."""
    families = tuple(
        MetricFamily(f.name, f.type, tuple(Sample(s.name, dict(s.labels), float(s.value)) for s in f.samples))
        for f in text_string_to_metric_families(text)
    )
    return Snapshot(families, monotonic_s, unix_s)


def _key(labels: Mapping[str, str], drop: str | None = None) -> LabelKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))


@dataclass
class _Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative count
    count: float | None = None
    sum: float | None = None


@dataclass
class _Index:
    """A snapshot's series by kind, keyed by (name, label set); counters by sample name (`..._total`)."""

    counters: dict[tuple[str, LabelKey], tuple[str, float]] = field(default_factory=dict)  # -> (family, value)
    histograms: dict[tuple[str, LabelKey], _Histogram] = field(default_factory=dict)  # label set without `le`
    gauges: dict[tuple[str, LabelKey], float] = field(default_factory=dict)
    created: dict[tuple[str, LabelKey], float] = field(default_factory=dict)  # (family, labels) -> unix s
    process_start_s: float | None = None


def _index(snapshot: Snapshot) -> _Index:
    idx = _Index()
    types = {f.name: f.type for f in snapshot.families}
    for fam in snapshot.families:
        if fam.type == "counter":
            for s in fam.samples:
                if s.name.endswith(_CREATED):  # OpenMetrics puts `_created` inside the family
                    idx.created[(fam.name, _key(s.labels))] = s.value
                elif s.name.endswith("_total"):
                    idx.counters[(s.name, _key(s.labels))] = (fam.name, s.value)
        elif fam.type == "histogram":
            for s in fam.samples:
                key = (fam.name, _key(s.labels, drop="le"))
                if s.name == fam.name + _CREATED:
                    idx.created[key] = s.value
                    continue
                h = idx.histograms.setdefault(key, _Histogram())
                if s.name == fam.name + "_bucket":
                    h.buckets[float(s.labels["le"])] = s.value
                elif s.name == fam.name + "_count":
                    h.count = s.value
                elif s.name == fam.name + "_sum":
                    h.sum = s.value
        elif fam.type == "gauge":
            base = fam.name.removesuffix(_CREATED)
            is_created = base != fam.name and types.get(base) in _CUMULATIVE_TYPES
            for s in fam.samples:
                if is_created:  # the text format exposes `<family>_created` as a gauge family of its own
                    idx.created[(base, _key(s.labels))] = s.value
                else:
                    idx.gauges[(s.name, _key(s.labels))] = s.value
                    if s.name == PROCESS_START and not s.labels:
                        idx.process_start_s = s.value
    return idx


# --- quantiles -------------------------------------------------------------------------------------------------


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile of (upper bound, cumulative count) buckets, the way Prometheus' histogram_quantile does it.

    Linear interpolation inside the bucket that holds the rank, the lowest bucket starting at 0; a rank in the
    +Inf bucket gives the highest finite bound. None where Prometheus gives NaN: no observations, no +Inf
    bucket, or fewer than two buckets.
    """
    if not 0.0 < q <= 1.0:
        raise ValueError(f"quantile {q} is outside (0, 1]")
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    # Cumulative counts never fall; a scrape taken mid-update can make them, so carry the maximum forward.
    bounds: list[float] = []
    counts: list[float] = []
    for upper, count in ordered:
        bounds.append(upper)
        counts.append(max(count, counts[-1]) if counts else count)
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(counts) - 1) if counts[i] >= rank), len(counts) - 1)
    if b == len(counts) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, in_bucket = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        in_bucket -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / in_bucket)


# --- window deltas ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CounterDelta:
    """How much one counter series rose in the window (never negative)."""

    name: str
    labels: dict[str, str]
    before: float | None  # None: the series did not exist yet when the window began
    after: float
    delta: float
    reset_detected: bool
    note: str | None = None


@dataclass(frozen=True)
class BucketDelta:
    le_s: float  # upper bound, math.inf for +Inf
    cumulative_count: float  # observations <= le_s in the window


@dataclass(frozen=True)
class HistogramDelta:
    """Observations of one latency histogram series (one label set, `le` aside) made in the window."""

    name: str
    labels: dict[str, str]
    buckets: tuple[BucketDelta, ...]
    count: float
    sum_s: float
    mean_s: float | None  # None when count is 0
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    reset_detected: bool
    note: str | None = None


@dataclass(frozen=True)
class GaugeDelta:
    name: str
    labels: dict[str, str]
    before: float | None  # None: the series was absent from that snapshot
    after: float | None


@dataclass(frozen=True)
class WindowDelta:
    """What happened between two snapshots of one server's `/metrics`."""

    window_s: float
    before_monotonic_s: float
    after_monotonic_s: float
    before_unix_s: float
    after_unix_s: float
    reset_detected: bool  # the server restarted in the window: figures are counts since the restart
    counters: tuple[CounterDelta, ...]
    histograms: tuple[HistogramDelta, ...]
    gauges: tuple[GaugeDelta, ...]
    skipped_histograms: tuple[str, ...]  # histogram families not in seconds (token counts, ...), not windowed
    notes: tuple[str, ...]
    schema_version: int = SCHEMA_VERSION


_RESET_NOTE = "the server restarted in the window; this is the count since the restart, a lower bound"


def _created_changed(before: _Index, after: _Index, key: tuple[str, LabelKey]) -> bool:
    b, a = before.created.get(key), after.created.get(key)
    return b is not None and a is not None and a != b


def _counter_delta(key: tuple[str, LabelKey], before: _Index, after: _Index, restarted: str | None) -> CounterDelta:
    name, labels = key
    family, after_v = after.counters[key]
    before_v = before.counters[key][1] if key in before.counters else None
    if before_v is None:
        return CounterDelta(
            name, dict(labels), None, after_v, after_v, restarted is not None, "series first seen in the window"
        )
    reason = restarted
    if reason is None and _created_changed(before, after, (family, labels)):
        reason = "its _created timestamp changed"
    if reason is None and after_v < before_v:
        reason = f"it went down from {before_v:g} to {after_v:g}"
    if reason is not None:
        return CounterDelta(name, dict(labels), before_v, after_v, after_v, True, f"reset: {reason}; {_RESET_NOTE}")
    return CounterDelta(name, dict(labels), before_v, after_v, after_v - before_v, False)


def _histogram_delta(
    key: tuple[str, LabelKey], before: _Index, after: _Index, restarted: str | None
) -> HistogramDelta | str:
    """The window's histogram, or why it cannot be computed."""
    name, labels = key
    a = after.histograms[key]
    if a.count is None or a.sum is None or math.inf not in a.buckets:
        return f"{name}{dict(labels)}: incomplete histogram (needs _bucket with le=+Inf, _count and _sum); left out"
    b = before.histograms.get(key)
    reason = restarted
    note: str | None = None
    if b is None:
        note = "series first seen in the window"
    elif reason is None:
        if _created_changed(before, after, key):
            reason = "its _created timestamp changed"
        elif b.buckets.keys() != a.buckets.keys():
            reason = "its bucket bounds changed"
        elif (b.count or 0.0) > a.count or any(b.buckets[le] > a.buckets[le] for le in a.buckets):
            reason = "a count went down"
    if b is None or reason is not None:
        b = _Histogram()  # count from 0: everything in `after` happened in the window (or since the restart)
    if reason is not None:
        note = f"reset: {reason}; {_RESET_NOTE}"
    buckets = tuple(BucketDelta(le, a.buckets[le] - b.buckets.get(le, 0.0)) for le in sorted(a.buckets))
    count = a.count - (b.count or 0.0)
    sum_s = a.sum - (b.sum or 0.0)
    pairs = [(x.le_s, x.cumulative_count) for x in buckets]
    p50, p90, p99 = (histogram_quantile(q, pairs) for q in (0.5, 0.9, 0.99))
    mean = sum_s / count if count > 0 else None
    return HistogramDelta(name, dict(labels), buckets, count, sum_s, mean, p50, p90, p99, reason is not None, note)


def delta(before: Snapshot, after: Snapshot) -> WindowDelta:
    """What happened on the server between two snapshots of its `/metrics`.

    A counter or histogram that went down, whose `_created` timestamp moved, or any series at all when
    `process_start_time_seconds` moved, means the server restarted in the window: that series reports its
    `after` value (what was counted since the restart) with `reset_detected` set, never a negative delta.
    """
    if after.taken_monotonic_s < before.taken_monotonic_s:
        raise ValueError(
            f"'after' was taken before 'before' ({after.taken_monotonic_s} < {before.taken_monotonic_s} s, monotonic)"
        )
    b, a = _index(before), _index(after)
    notes: list[str] = []
    restarted: str | None = None
    if b.process_start_s is not None and a.process_start_s is not None and a.process_start_s != b.process_start_s:
        restarted = f"{PROCESS_START} moved from {b.process_start_s:.3f} to {a.process_start_s:.3f}"
        notes.append(f"server restarted in the window ({restarted}): counters and histograms count since then")

    counters = tuple(_counter_delta(k, b, a, restarted) for k in sorted(a.counters))
    notes.extend(
        f"{name}{dict(labels)}: present before the window, absent after; left out"
        for name, labels in sorted(b.counters.keys() - a.counters.keys())
    )

    histograms: list[HistogramDelta] = []
    skipped: set[str] = set()
    for key in sorted(a.histograms):
        if not key[0].endswith("_seconds"):
            skipped.add(key[0])
            continue
        result = _histogram_delta(key, b, a, restarted)
        if isinstance(result, str):
            notes.append(result)
        else:
            histograms.append(result)
    notes.extend(
        f"{name}{dict(labels)}: histogram present before the window, absent after; left out"
        for name, labels in sorted(b.histograms.keys() - a.histograms.keys())
        if name.endswith("_seconds")
    )

    gauges = tuple(
        GaugeDelta(name, dict(labels), b.gauges.get((name, labels)), a.gauges.get((name, labels)))
        for name, labels in sorted(a.gauges.keys() | b.gauges.keys())
    )
    reset = any(c.reset_detected for c in counters) or any(h.reset_detected for h in histograms)
    return WindowDelta(
        window_s=after.taken_monotonic_s - before.taken_monotonic_s,
        before_monotonic_s=before.taken_monotonic_s,
        after_monotonic_s=after.taken_monotonic_s,
        before_unix_s=before.taken_unix_s,
        after_unix_s=after.taken_unix_s,
        reset_detected=reset or restarted is not None,
        counters=counters,
        histograms=tuple(histograms),
        gauges=gauges,
        skipped_histograms=tuple(sorted(skipped)),
        notes=tuple(notes),
    )


def _matches(labels: Mapping[str, str], match: Mapping[str, str] | None) -> bool:
    return match is None or all(labels.get(k) == v for k, v in match.items())


def counter_sum(d: WindowDelta, name: str, match: Mapping[str, str] | None = None) -> float | None:
    """Sum of a counter's window deltas over its label sets (those carrying `match`); None when it has none."""
    found = [c.delta for c in d.counters if c.name == name and _matches(c.labels, match)]
    return sum(found) if found else None


def counter_by_label(d: WindowDelta, name: str, label: str) -> dict[str, float]:
    """A counter's window deltas summed per value of one label, e.g. request successes by finished_reason."""
    out: dict[str, float] = {}
    for c in d.counters:
        if c.name == name and label in c.labels:
            out[c.labels[label]] = out.get(c.labels[label], 0.0) + c.delta
    return out


def find_histograms(d: WindowDelta, name: str, match: Mapping[str, str] | None = None) -> list[HistogramDelta]:
    return [h for h in d.histograms if h.name == name and _matches(h.labels, match)]


def find_gauges(d: WindowDelta, name: str, match: Mapping[str, str] | None = None) -> list[GaugeDelta]:
    return [g for g in d.gauges if g.name == name and _matches(g.labels, match)]


# --- gauges over a window --------------------------------------------------------------------------------------


@dataclass
class GaugeSeries:
    """Gauges sampled repeatedly over a window: (monotonic_s, unix_s, value) points per series.

    `names` selects the gauges kept (default: the engine's load gauges); None keeps every gauge.
    Snapshots must be added in the order they were taken.
    """

    names: tuple[str, ...] | None = LOAD_GAUGES
    points: dict[tuple[str, LabelKey], list[tuple[float, float, float]]] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def add(self, snapshot: Snapshot) -> None:
        last = max((p[-1][0] for p in self.points.values() if p), default=-math.inf)
        if snapshot.taken_monotonic_s < last:
            raise ValueError(f"snapshot taken at {snapshot.taken_monotonic_s} s is older than the last one ({last} s)")
        for (name, labels), value in _index(snapshot).gauges.items():
            if self.names is None or name in self.names:
                self.points.setdefault((name, labels), []).append(
                    (snapshot.taken_monotonic_s, snapshot.taken_unix_s, value)
                )

    def series(self, name: str, match: Mapping[str, str] | None = None) -> list[list[tuple[float, float, float]]]:
        return [p for (n, labels), p in sorted(self.points.items()) if n == name and _matches(dict(labels), match)]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "series": [
                {
                    "name": name,
                    "labels": dict(labels),
                    "points": [
                        {"monotonic_s": m, "unix_s": u, "value": _finite(v)} for m, u, v in self.points[(name, labels)]
                    ],
                    "min": _finite(min(v for _, _, v in self.points[(name, labels)])),
                    "max": _finite(max(v for _, _, v in self.points[(name, labels)])),
                }
                for name, labels in sorted(self.points)
            ],
        }


# --- reports ---------------------------------------------------------------------------------------------------


def _finite(x: float | None) -> float | None:
    """JSON has no NaN or infinity: those become null."""
    return x if x is not None and math.isfinite(x) else None


def to_json(d: WindowDelta) -> dict[str, Any]:
    """The delta as plain JSON types (strict JSON: no NaN or Infinity; the +Inf bucket's bound is "+Inf")."""
    return {
        "schema_version": d.schema_version,
        "window_s": d.window_s,
        "before_monotonic_s": d.before_monotonic_s,
        "after_monotonic_s": d.after_monotonic_s,
        "before_unix_s": d.before_unix_s,
        "after_unix_s": d.after_unix_s,
        "reset_detected": d.reset_detected,
        "counters": [
            {
                "name": c.name,
                "labels": dict(c.labels),
                "before": _finite(c.before),
                "after": _finite(c.after),
                "delta": _finite(c.delta),
                "reset_detected": c.reset_detected,
                "note": c.note,
            }
            for c in d.counters
        ],
        "histograms": [
            {
                "name": h.name,
                "labels": dict(h.labels),
                "buckets": [
                    {"le_s": "+Inf" if math.isinf(x.le_s) else x.le_s, "cumulative_count": x.cumulative_count}
                    for x in h.buckets
                ],
                "count": h.count,
                "sum_s": _finite(h.sum_s),
                "mean_s": _finite(h.mean_s),
                "p50_s": _finite(h.p50_s),
                "p90_s": _finite(h.p90_s),
                "p99_s": _finite(h.p99_s),
                "reset_detected": h.reset_detected,
                "note": h.note,
            }
            for h in d.histograms
        ],
        "gauges": [
            {"name": g.name, "labels": dict(g.labels), "before": _finite(g.before), "after": _finite(g.after)}
            for g in d.gauges
        ],
        "skipped_histograms": list(d.skipped_histograms),
        "notes": list(d.notes),
    }


def _num(x: float | None) -> str:
    if x is None:
        return "n/a (not in /metrics)"
    return str(int(x)) if x.is_integer() else f"{x:g}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.2f}"


def _differing_labels(series: Sequence[HistogramDelta]) -> list[str]:
    """For each series, the labels that tell it from the others with the same name ("" when there is one)."""
    if len(series) < 2:
        return [""] * len(series)
    keys = sorted({k for h in series for k in h.labels})
    differing = [k for k in keys if len({h.labels.get(k) for h in series}) > 1]
    return ["{" + ",".join(f'{k}="{h.labels.get(k, "")}"' for k in differing) + "}" for h in series]


def _gauge_line(d: WindowDelta, name: str, percent: bool = False) -> str:
    found = find_gauges(d, name)
    if not found:
        return f"{name}: n/a (not in /metrics)"

    def fmt(x: float | None) -> str:
        if x is None:
            return "absent"
        return f"{x * 100:.1f}%" if percent else _num(x)

    ends = [f"{fmt(g.before)} -> {fmt(g.after)}" for g in found]
    return f"{name}: {', '.join(ends)}"


def summarize(d: WindowDelta) -> str:
    """A plain-text block of what happened in the window, for a terminal or an incident note."""
    lines = [f"window: {d.window_s:.3f} s (unix {d.before_unix_s:.3f} -> {d.after_unix_s:.3f})"]
    if d.reset_detected:
        lines.append("WARNING: the server restarted in the window: figures are counts since the restart (lower bounds)")
    by_reason = counter_by_label(d, REQUEST_SUCCESS, "finished_reason")
    finished = counter_sum(d, REQUEST_SUCCESS)
    reasons = ", ".join(f"{r} {_num(v)}" for r, v in sorted(by_reason.items()) if v)
    lines.append(f"requests finished: {_num(finished)}" + (f" ({reasons})" if reasons else ""))
    lines.append(f"prompt tokens: {_num(counter_sum(d, PROMPT_TOKENS))}")
    lines.append(f"generation tokens: {_num(counter_sum(d, GENERATION_TOKENS))}")
    lines.append(f"preemptions: {_num(counter_sum(d, PREEMPTIONS))}")
    queries, hits = counter_sum(d, PREFIX_CACHE_QUERIES), counter_sum(d, PREFIX_CACHE_HITS)
    rate = f"{hits / queries * 100:.1f}%" if queries and hits is not None else "n/a"
    lines.append(f"prefix cache: {_num(queries)} tokens queried, {_num(hits)} hit, hit rate {rate}")
    lines.append(_gauge_line(d, "vllm:num_requests_running"))
    lines.append(_gauge_line(d, "vllm:num_requests_waiting"))
    lines.append(_gauge_line(d, "vllm:kv_cache_usage_perc", percent=True))

    rows: list[tuple[str, str, str, str, str, str]] = []
    for name in LATENCY_HISTOGRAMS:
        series = find_histograms(d, name)
        for h, suffix in zip(series, _differing_labels(series), strict=True):
            flag = " (reset)" if h.reset_detected else ""
            rows.append((name + suffix + flag, _num(h.count), _ms(h.mean_s), _ms(h.p50_s), _ms(h.p90_s), _ms(h.p99_s)))
    if rows:
        width = max(len(r[0]) for r in rows)
        lines.append(f"{'latency (ms)':<{width}}  {'n':>6}  {'mean':>9}  {'p50':>9}  {'p90':>9}  {'p99':>9}")
        lines.extend(f"{r[0]:<{width}}  {r[1]:>6}  {r[2]:>9}  {r[3]:>9}  {r[4]:>9}  {r[5]:>9}" for r in rows)
        lines.append("(quantiles interpolate within a bucket, as histogram_quantile does: good to a bucket's width)")
    else:
        lines.append("latency: no vLLM latency histograms in /metrics")
    lines.extend(f"note: {n}" for n in d.notes)
    return "\n".join(lines) + "\n"
