"""summary.json's schema: a bench's runs, its pooled points and the summary that holds them, as pydantic models.

serving/bench/summary.py builds the summary and serving/bench/report.py writes it through `BenchSummary`, so a
figure the schema does not name, or one of the wrong type, fails the report rather than landing in the file unseen;
`read_summary` reads a saved summary.json back, or fails in one line naming the file.

Numbers are `int | float` wherever either can arrive (a counter's delta of 0, a rate an operator wrote as 2): the
models keep each as it came, so the file's bytes do not change with the schema. A part whose keys depend on what was
measured (GPU health, energy, PCIe links, the knee search) stays a mapping here, as do the manifest and the client's
record, which have their own writers. A key written only by later benches is optional with None, so an earlier
summary.json still reads; `dump` leaves out what a summary never had.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from serving.bench.protocol import SCHEMA_VERSION
from serving.config.schema import StrictModel, one_line
from serving.errors import InputError

Num = int | float


class Stat(StrictModel):
    """serving/bench/stats.py describe: the median, min and max of the finite values, and how many there were."""

    n: int
    median: float | None
    min: float | None
    max: float | None


class Outstanding(StrictModel):
    """Requests in flight as the client saw them (serving/bench/runs.py outstanding)."""

    max: float | None
    mean: float | None


class ServerHistogram(StrictModel):
    count: Num
    mean_ms: float | None
    p50_ms: float | None


class ServerFigures(StrictModel):
    """The server's side of a run: its /metrics counters' and histograms' deltas (serving/bench/runs.py)."""

    restarted: bool
    requests_finished: Num
    finished_reason: dict[str, Num]
    prompt_tokens: Num | None
    generation_tokens: Num | None
    prefix_cache_queries: Num | None
    prefix_cache_hits: Num | None
    preemptions: Num | None
    ttft: ServerHistogram
    itl: ServerHistogram
    tpot: ServerHistogram
    e2e: ServerHistogram
    queue: ServerHistogram
    prefill: ServerHistogram
    decode: ServerHistogram


class RunPageCache(StrictModel):
    """The served files' page-cache state a run asked for and had (serving/bench/runs.py page_cache_figures)."""

    state: str | None
    made: dict[str, Any] | None
    files: Num | None
    size_bytes: Num | None
    resident_before: Num | None
    resident_after: Num | None
    resident_bytes_before: Num | None
    resident_bytes_after: Num | None
    residency_error: str | None
    engine_read_bytes: Num | None
    engine_rchar: Num | None
    engine_pids: int
    engine_pids_unreadable: list[str]


class SloFigures(StrictModel):
    """A run against its per-request SLOs (serving/bench/runs.py slo_figures)."""

    thresholds_ms: dict[str, Num]
    min_share: float
    requests: int
    met_all: int
    share_met: float | None
    share_met_each: dict[str, float | None]
    goodput_req_s: float | None
    vllm_goodput_req_s: float | None
    goodput_flag: str | None


class RunSummary(StrictModel):
    """One run's figures and flags (serving/bench/runs.py summarize_run)."""

    id: str
    point: str
    phase: str
    seed: int | None
    max_concurrency: Num | None
    request_rate: Num | None
    status: str
    valid: bool
    flags: list[str]
    started_unix_s: Num | None
    wall_clock_step_s: float | None = None
    ended_unix_s: Num | None
    requests: int
    requests_ok: int
    requests_failed: int
    duration_s: float | None
    output_tokens: int
    output_tok_s: float | None
    request_s: float | None
    ttft_ms: Stat
    tpot_ms: Stat
    decode_tok_s: Stat
    e2el_ms: Stat
    chunk_interval_ms: Stat
    grouped_streaming: bool
    grouped_requests: int
    tokens_per_chunk: Stat
    achieved_rate_req_s: float | None
    achieved_over_requested: float | None
    outstanding: Outstanding
    vllm_reported: dict[str, Num | None]  # vLLM's own aggregates of the run, beside ours
    server: ServerFigures | None
    prefix_cache_hit_rate: float | None = None
    page_cache: RunPageCache | None = None
    slo: SloFigures | None = None


class PointSummary(StrictModel):
    """A point's valid measured runs pooled (serving/bench/runs.py pool_point), and its GPU health mark
    (serving/bench/health.py gpu_health)."""

    point: str
    max_concurrency: Num | None
    request_rate: Num | None
    runs: int
    runs_ok: int
    runs_valid: int
    # "<run id>: <its first flag>" for each measured run left out of the pool (a summary before issue 30 has none:
    # its points pooled every completed run).
    left_out: list[str] = Field(default_factory=list)
    ttft_ms: Stat
    tpot_ms: Stat
    decode_tok_s: Stat
    e2e_tok_s: Stat
    e2el_ms: Stat
    chunk_interval_ms: Stat
    output_tok_s: Stat
    request_s: Stat
    achieved_over_requested: Stat
    outstanding_max: Stat
    grouped_streaming: bool
    grouped_requests: int
    requests_ok: int
    server_ttft_mean_ms: Stat
    server_tpot_mean_ms: Stat
    server_queue_mean_ms: Stat
    prefix_cache_hit_rate: Stat | None = None
    slo_share_met: Stat | None = None
    goodput_req_s: Stat | None = None
    ttft_ms_by_turn: dict[str, Stat] | None = None
    gpu_health: dict[str, Any] | None = None


class ReferenceBeside(StrictModel):
    """A class reference figure beside the measured one of its definition (serving/bench/reference.py)."""

    key: str
    what: str
    concurrency: int
    reference: Any  # as the inventory's gpu_class.reference gives it
    measured: float | None


class PrefixCache(StrictModel):
    mode: str | None
    note: str
    hits_intended: bool | None = None
    hits_in_measured_runs: Num
    queries_in_measured_runs: Num
    hit_rate: float | None


class PageCache(StrictModel):
    """The served files' page-cache state over the bench (serving/bench/summary.py page_cache_summary)."""

    state: str
    how: str
    recorded: bool
    files: Num | None
    size_bytes: Num | None
    resident_before: Stat
    resident_after: Stat
    engine_read_bytes: Num | None
    engine_rchar: Num | None
    engine_pids_unreadable: list[str]


class BenchSummary(StrictModel):
    """summary.json: every figure of a bench (serving/bench/summary.py build_summary)."""

    schema_version: Literal[1]  # serving/bench/protocol.py SCHEMA_VERSION
    status: str
    reason: str
    bench_dir: str
    manifest: dict[str, Any]
    client: dict[str, Any] | None
    prefix_cache: PrefixCache
    page_cache: PageCache | None = None
    grouped_streaming: bool
    output_length_mismatch: list[str]
    runs: list[RunSummary]
    points: list[PointSummary]
    reference: dict[str, Any] | None
    reference_beside_measured: list[ReferenceBeside]
    weight_read_bound: dict[str, float] | None
    gpu_links: dict[str, Any] | None = None
    energy: dict[str, Any] | None = None
    gpu_health: dict[str, Any] | None = None
    server_cgroup: list[str] | None = None
    memory_at_decode: list[str] | None = None
    knee: dict[str, Any] | None = None

    def dump(self) -> dict[str, Any]:
        """The summary as summary.json holds it: the keys it was made (or read) with, numbers as they came."""
        return self.model_dump(exclude_unset=True)

    def dumps(self) -> str:
        """summary.json's text; what JSON has no name for (a path) as its string."""
        return json.dumps(self.dump(), indent=2, sort_keys=True, default=str) + "\n"


def read_summary(path: Path) -> BenchSummary:
    """A saved summary.json, or InputError in one line naming the file: unreadable, not JSON, another schema version,
    or figures this schema does not know."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable bench summary ({e})") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise InputError(f"{path}: bench summary schema_version {version!r}, this reader takes {SCHEMA_VERSION}")
    try:
        return BenchSummary.model_validate(data)
    except ValidationError as e:
        raise InputError(one_line(str(path), e)) from None
